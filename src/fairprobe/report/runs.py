"""Read run folders for reports: summary.json, manifest.json, samples.jsonl and any compare JSON, with a label each."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fairprobe.catalog import suite_names, suite_sets
from fairprobe.documents import (
    RunManifest,
    comparison_model,
    document_dict,
    parse_document,
    read_document,
    read_json_object,
)
from fairprobe.errors import DataError
from fairprobe.io import iter_jsonl
from fairprobe.records import Summary

COMPARE_FILE = "compare.json"
# The sample browser of report.html holds at most this many samples of a set (evenly spread over it), so a run of
# 100,000 samples still makes a report of a few MB; samples.jsonl keeps every one.
BROWSE_PER_SET = 1000


@dataclass
class RunData:
    """One run folder as a report reads it; `summary` is None for a folder holding only a comparison."""

    path: Path
    label: str
    summary: Summary | None
    manifest: dict[str, Any] = field(default_factory=dict)
    samples: list[dict[str, Any]] = field(default_factory=list)
    compare: dict[str, Any] | None = None


def read_comparison(path: Path) -> dict[str, Any]:
    """A comparison JSON validated: fairprobe's compare.json as such, any other shape's metrics as metrics."""
    obj, text = read_json_object(path, COMPARE_FILE)
    return document_dict(parse_document(text, comparison_model(obj), f"{COMPARE_FILE} {path}"))


def load_summary(path: Path) -> Summary:
    """summary.json of a run folder, validated; a missing or malformed file is a DataError naming it."""
    if not Path(path).is_dir():
        raise DataError(f"run folder not found: {path}")
    obj, _ = read_json_object(path / "summary.json", "summary.json", non_finite=True)
    # summary.json leaves out None fields, so a metric without a value (no gendered continuation) has no "value".
    for result in (obj.get("results") or {}).values() if isinstance(obj, dict) else ():
        parts = [result, *(result.get("subsets") or {}).values()] if isinstance(result, dict) else []
        for part in parts:
            for m in (part.get("metrics") or {}).values() if isinstance(part, dict) else ():
                if isinstance(m, dict):
                    m.setdefault("value", None)
    try:
        return Summary.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise DataError(f"malformed summary.json in {path}: {where}: {first.get('msg')}") from None


def browse_samples(path: Path, summary: Summary, per_set: int | None) -> list[dict[str, Any]]:
    """samples.jsonl's records, read one line at a time: all of them (`per_set` None), none (0), or at most
    `per_set` of each set, evenly spread over it (every k-th, k from the set's n in the summary)."""
    if per_set == 0 or not path.is_file() or not path.stat().st_size:
        return []
    step = {name: max(1, -(-r.n // per_set)) if per_set else 1 for name, r in summary.results.items()}
    seen: dict[str, int] = {}
    kept = []
    for _, obj in iter_jsonl(path, "samples.jsonl"):
        name = str(obj.get("set", ""))
        index = seen.get(name, 0)
        seen[name] = index + 1
        if index % step.get(name, 1) == 0:
            kept.append(obj)
    return kept


def load_run(path: Path, per_set: int | None = BROWSE_PER_SET) -> RunData:
    """A run folder: summary.json (required unless the folder holds compare.json), manifest and samples if there
    (`per_set`: see `browse_samples`)."""
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"run folder not found: {path}")
    compare_path = path / COMPARE_FILE
    compare = read_comparison(compare_path) if compare_path.exists() else None
    if not (path / "summary.json").is_file() and compare is not None:
        return RunData(path=path, label=path.name, summary=None, compare=compare)
    summary = load_summary(path)
    manifest_path = path / "manifest.json"
    manifest = (
        document_dict(read_document(manifest_path, RunManifest, "manifest.json")) if manifest_path.is_file() else {}
    )
    samples = browse_samples(path / "samples.jsonl", summary, per_set)
    summary.results = dict(sorted(summary.results.items(), key=lambda item: set_order(item[0], manifest)))
    return RunData(path=path, label=summary.model, summary=summary, manifest=manifest, samples=samples, compare=compare)


def set_order(name: str, manifest: dict[str, Any]) -> tuple[int, str]:
    """Probe sets in the order the run asked for them, else their suites' order (summary.json sorts them by name)."""
    order = list((manifest.get("options") or {}).get("probes") or []) + [
        n for s in suite_names() for n in suite_sets(s)
    ]
    return (order.index(name) if name in order else len(order), name)


def _run_details(run: RunData) -> list[str]:
    """What sets a run apart from a plain run of its model: adapter, instruction, decoding, probe options."""
    options = run.manifest.get("options", {})
    decoding = run.manifest.get("decoding", {})
    details = []
    if options.get("adapter"):
        details.append("+" + Path(options["adapter"]).name)
    family_options = run.manifest.get("family_options") or {}
    if run.manifest.get("instruction") or any(
        isinstance(v, dict) and v.get("instruction") for v in family_options.values()
    ):
        details.append("instruction")
    if decoding.get("temperature"):
        details.append(f"temperature={decoding['temperature']:g}")
    if decoding.get("top_p", 1.0) != 1.0:
        details.append(f"top-p={decoding['top_p']:g}")
    if decoding.get("top_k"):
        details.append(f"top-k={decoding['top_k']}")
    details.extend(f"{k}={v}" for k, v in sorted(options.get("probe_options", {}).items()))
    return details


def load_runs(paths: list[Path], per_set: int | None = BROWSE_PER_SET) -> list[RunData]:
    """Several run folders with labels that tell them apart (model, then its settings, then the folder name)."""
    if not paths:
        raise DataError("no run folder given")
    runs = []
    for path in paths:
        runs.append(load_run(path, per_set))
        # `fairprobe compare` keeps each method's run beside compare.json: show them side by side too.
        if runs[-1].compare is not None:
            found = sorted(Path(path).glob("runs/*/summary.json"), key=lambda p: (p.parent.name != "original", p))
            runs += [load_run(p.parent, per_set) for p in found]
    for run in runs:
        if run.summary is not None:
            run.label = " ".join([run.summary.model, *_run_details(run)])
    labels = [r.label for r in runs]
    for run in runs:
        if labels.count(run.label) > 1:
            run.label = f"{run.label} ({run.path.name})"
    labels = [r.label for r in runs]
    for i, run in enumerate(runs):
        if labels.count(run.label) > 1:
            run.label = f"{run.label} #{i + 1}"
    return runs
