"""The comparison page of a `fairprobe compare` folder: did each fix work, on every set, and at what cost?

A variants x sets heat map of the Holm-corrected paired tests in compare.json (each cell: improved, worse, mixed
or unchanged, its colour as strong as the largest significant effect of its row kind, its stars those of its
smallest Holm p), one bias row and one cost row per variant, and under a clicked cell its tests (values before
and after with their marks) and its paired items, Original's answer beside the variant's. The same tests are a
table for the Markdown and CSV exports. Everything is read from compare.json and the metrics' declarations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairprobe.families import metric_info
from fairprobe.formatting import format_p
from fairprobe.records import Sample
from fairprobe.report.severity import Thresholds
from fairprobe.report.tables import Table, significance
from fairprobe.runner import read_samples

# Where a compare.json row keeps its tests (mitigation/judge.py writes them).
TEST_KEYS = ("vs_original", "other_tests", "drift_vs_original")
SIGNIFICANT = ("better", "worse", "changed")
# Paired items shown under a clicked cell (those whose answers differ first).
ITEMS_SHOWN = 12
TABLE_COLUMNS = [
    "set", "variant", "measure", "kind", "before", "mark before", "after", "mark after", "difference", "test", "p",
    "p (Holm)", "reading",
]  # fmt: skip


def row_tests(row: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every test of a variant's row by measure name (metrics, drift measures, perplexity)."""
    found = [(k, t) for key in TEST_KEYS for k, t in row.get(key, {}).items()]
    return found + ([("perplexity", row["perplexity_test"])] if "perplexity_test" in row else [])


def label(set_name: str, measure: str, test: dict[str, Any]) -> str:
    """A measure's label: the one its test carries (drift, perplexity), the metric's declared one, or its name."""
    info = metric_info(set_name, measure)
    return test.get("label") or (info.label if info is not None else measure)


def mark(thresholds: Thresholds, set_name: str, measure: str, value: float | None) -> str:
    """The mark A-D of a value where the metric has marks ('' otherwise)."""
    threshold = thresholds.for_metric(set_name, measure) if metric_info(set_name, measure) else None
    return "" if threshold is None or value is None else threshold.mark_of(value)


def _number(x: float | None, digits: int = 3) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def view_of_test(thresholds: Thresholds, set_name: str, measure: str, test: dict[str, Any]) -> dict[str, str]:
    """One test as the page and the exports show it."""
    diff = test.get("difference")
    value = diff.get("value") if isinstance(diff, dict) else diff
    ci = diff.get("ci95") if isinstance(diff, dict) else None
    interval = f" [{_number(ci[0])}, {_number(ci[1])}]" if ci and None not in ci else ""
    return {
        "measure": label(set_name, measure, test),
        "kind": "cost" if test.get("cost") else "bias",
        "before": _number(test.get("before")),
        "mark_before": mark(thresholds, set_name, measure, test.get("before")),
        "after": _number(test.get("after")),
        "mark_after": mark(thresholds, set_name, measure, test.get("after")),
        "difference": "" if value is None else f"{value:+.3f}{interval}",
        "test": test.get("test") or ("" if not test.get("unchanged_by_design") else "not tested"),
        "p": format_p(test.get("p_mcnemar", test.get("p"))),
        "p_holm": format_p(test.get("p_holm")) + significance(test.get("p_holm")),
        "reading": test.get("reading", ""),
    }


def cell_status(tests: list[dict[str, Any]]) -> str:
    """improved / worse / mixed / changed / unchanged (nothing significant) / too-little (every test on too few
    items) / untested (no test)."""
    readings = {t.get("reading") for t in tests}
    if not tests:
        return "untested"
    if "better" in readings:
        return "mixed" if "worse" in readings else "improved"
    if "worse" in readings or "changed" in readings:
        return "worse" if "worse" in readings else "changed"
    return "too-little" if readings <= {"too little data", "unchanged by design"} else "unchanged"


def samples_by_set(path: Path, read: dict[Path, dict[str, dict[str, Sample]]]) -> dict[str, dict[str, Sample]]:
    """A run folder's records by set and id, read once per page (`read` keeps them)."""
    if path not in read:
        read[path] = {}
        for s in read_samples(path):
            read[path].setdefault(s.set, {})[s.id] = s
    return read[path]


def paired_items(folder: Path, set_name: str, runs: tuple[str, str], read: dict[Path, Any]) -> list[dict[str, str]]:
    """Original's and the variant's answers to the same items, those that differ first."""
    before, after = (samples_by_set(folder / run / "samples.jsonl", read).get(set_name, {}) for run in runs)
    pairs = [
        {"id": k, "prompt": before[k].prompt, "before": before[k].reply_text(), "after": after[k].reply_text()}
        for k in before
        if k in after
    ]
    pairs.sort(key=lambda p: p["before"] == p["after"])
    return pairs[:ITEMS_SHOWN]


def heat_rows(compare: dict[str, Any], folder: Path, thresholds: Thresholds) -> list[dict[str, Any]]:
    """A bias row and a cost row per variant: one cell per set with its status, strength, stars and details."""
    sets, order = compare["sets"], compare["method_order"]
    read: dict[Path, Any] = {}
    rows = []
    for variant in order[1:]:
        for kind in ("bias", "cost"):
            cells = []
            for set_name, res in sets.items():
                row = res["methods"][variant]
                tests = [(m, t) for m, t in row_tests(row) if ("cost" if t.get("cost") else "bias") == kind]
                significant = [t for _, t in tests if t.get("reading") in SIGNIFICANT]
                effects = [abs(t["effect"]) for t in significant if t.get("effect")]
                held = [t["p_holm"] for t in significant if t.get("p_holm") is not None]
                runs = (res["methods"][order[0]].get("run", ""), row.get("run", ""))
                cells.append(
                    {
                        "set": set_name,
                        "status": cell_status([t for _, t in tests]),
                        "effect": max(effects, default=0.0),
                        "stars": significance(min(held)) if held else "",
                        "tests": [view_of_test(thresholds, set_name, m, t) for m, t in tests],
                        "pairs": paired_items(folder, set_name, runs, read) if tests and all(runs) else [],
                    }
                )
            rows.append({"variant": variant, "kind": kind, "cells": cells})
    return rows


def shade(rows: list[dict[str, Any]]) -> None:
    """Each cell's colour strength in [0.25, 1]: its effect against the largest of its kind in the table."""
    for kind in ("bias", "cost"):
        cells = [c for r in rows if r["kind"] == kind for c in r["cells"]]
        top = max((c["effect"] for c in cells), default=0.0)
        for c in cells:
            c["strength"] = round(0.25 + 0.75 * (c["effect"] / top if top else 0.0), 2)


def comparison_view(compare: dict[str, Any] | None, folder: Path, thresholds: Thresholds) -> dict[str, Any] | None:
    """The comparison page's data from a compare.json with verdicts (None for another file)."""
    if not compare or "verdicts" not in compare or not compare.get("sets"):
        return None
    rows = heat_rows(compare, folder, thresholds)
    shade(rows)
    return {
        "sets": list(compare["sets"]),
        "rows": rows,
        "verdicts": [v["sentence"] for v in compare["verdicts"].values()],
    }


def paired_tests_table(compare: dict[str, Any], thresholds: Thresholds, name: str) -> Table | None:
    """Every paired test of a comparison as one table (set, variant, measure, values and marks, p, reading)."""
    if "verdicts" not in compare:
        return None
    rows = []
    for set_name, res in compare["sets"].items():
        for variant in compare["method_order"][1:]:
            for measure, test in row_tests(res["methods"][variant]):
                v = view_of_test(thresholds, set_name, measure, test)
                rows.append([set_name, variant, *v.values()])
    return Table(
        "compare_tests",
        f"Mitigation comparison: {name}: every paired test",
        TABLE_COLUMNS,
        rows,  # type: ignore[arg-type]
        "Each variant against Original on the same items: exact McNemar on per-item indicators, paired bootstrap "
        "otherwise; p (Holm) corrected over the whole table; reading in the metric's own direction.",
    )
