"""Compare two JSON (or JSON Lines) files value by value: identical, or different by float rounding only.

    python benchmarks/json_identity.py BEFORE_FILE AFTER_FILE [--root-before DIR --root-after DIR]

Key order is not a value (a record's fields may be listed in another order). Every string, integer, boolean and
null must be equal (after each side's own folder path is replaced by OUT); a float may differ, and every field
where one does is listed with its largest absolute and relative change (list positions folded: `p_female[]`).
Exit 0 when identical or when every float change stays under the limits, 1 otherwise: 1e-9 absolute for the
probabilities a sample records (fields named `p_...`), 1e-4 relative for every other float (a metric computed from
such probabilities, whose rounding it carries: a share of two tiny masses, a bootstrap interval's end).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

PROBABILITY_LIMIT = 1e-9
RELATIVE_LIMIT = 1e-4


def records(path: Path, root: str | None) -> list[Any]:
    """The JSON values of a .json file (one) or a .jsonl file (one per line), the root folder replaced by OUT."""
    text = path.read_text(encoding="utf-8")
    if root:
        text = text.replace(root, "OUT")
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def walk(a: Any, b: Any, where: str, floats: dict[str, list[float]], other: list[str]) -> None:
    """Record every float change (by field) and every other difference between two JSON values."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            other.append(f"{where}: keys {sorted(set(a) ^ set(b))} on one side only")
        for key in set(a) & set(b):
            walk(a[key], b[key], f"{where}.{key}" if where else key, floats, other)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            other.append(f"{where}: {len(a)} items before, {len(b)} after")
        for x, y in zip(a, b, strict=False):
            walk(x, y, f"{where}[]", floats, other)
    elif isinstance(a, float) and isinstance(b, float) and a != b:
        if not (math.isfinite(a) and math.isfinite(b)):
            other.append(f"{where}: {a} before, {b} after")
            return
        scale = max(abs(a), abs(b))
        entry = floats.setdefault(where, [0.0, 0.0])
        entry[0] = max(entry[0], abs(a - b))
        entry[1] = max(entry[1], abs(a - b) / scale)
    elif a != b or type(a) is not type(b):
        other.append(f"{where}: {a!r} before, {b!r} after")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--root-before")
    parser.add_argument("--root-after")
    args = parser.parse_args()
    before, after = records(args.before, args.root_before), records(args.after, args.root_after)
    floats: dict[str, list[float]] = {}
    other: list[str] = []
    if len(before) != len(after):
        other.append(f"{len(before)} records before, {len(after)} after")
    for a, b in zip(before, after, strict=False):
        walk(a, b, "", floats, other)
    for line in other[:10]:
        print(f"    DIFFERENT {line}")
    ok = not other
    for field, (absolute, relative) in sorted(floats.items()):
        probability = field.rsplit(".", 1)[-1].startswith("p_") or field.startswith("p_")
        within = absolute <= PROBABILITY_LIMIT if probability else relative <= RELATIVE_LIMIT
        ok &= within
        mark = "" if within else "  OVER THE LIMIT"
        print(f"    float rounding: {field}: largest change {absolute:.3g} (relative {relative:.3g}){mark}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
