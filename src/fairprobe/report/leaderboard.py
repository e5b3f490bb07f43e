"""The comparison of several models run on the same probe sets: leaderboard and pairwise tests.

`leaderboard.json` (kind "leaderboard") lists the model run folders, every metric of every set per model with
its 95% interval (rows sorted by a chosen metric, best first as its family declares, n/a last), and for every pair of models the
tests on the prompts both answered: exact McNemar for binary per-prompt outcomes (GAS, hit rate), paired
bootstrap for continuous ones (GLD, ADD, neutral share), with Holm-adjusted p-values over all the tests of
the comparison. `fairprobe report COMPARISON_DIR` renders it with the models' runs (figures with one bar
per model); Markdown and CSV exports carry the same tables.
"""

from __future__ import annotations

import fnmatch
import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np

from fairprobe.documents import Leaderboard, document_dict, read_document
from fairprobe.errors import ConfigError
from fairprobe.families import headline_metric, metric_info, metric_order
from fairprobe.formatting import format_p
from fairprobe.io import atomic_write_json, atomic_write_text
from fairprobe.records import MetricValue
from fairprobe.report.html import typed_sample
from fairprobe.report.runs import RunData, load_runs
from fairprobe.report.tables import Cell, Table, significance
from fairprobe.report.verdict import unit_of
from fairprobe.statistics.pairwise import PairedTest, bootstrap_test, holm, mcnemar_test

LEADERBOARD_FILE = "leaderboard.json"
# The comparison's folder under a many-models run's --out root.
COMPARISON_FOLDER = "comparison"


def pair_values(a: RunData, b: RunData, set_name: str, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The per-prompt values of `metric` for the prompts of `set_name` that both runs answered (same ids)."""
    read = metric_info(set_name, metric).per_prompt  # type: ignore[union-attr]

    def by_id(run: RunData) -> dict[str, float]:
        samples = [typed_sample(s) for s in run.samples if s.get("set") == set_name]
        values = np.asarray(read(samples), dtype=np.float64) if samples else np.zeros(0)  # type: ignore[misc]
        return {s.id: float(v) for s, v in zip(samples, values, strict=True) if np.isfinite(v)}

    va, vb = by_id(a), by_id(b)
    shared = [i for i in va if i in vb]
    return np.array([va[i] for i in shared]), np.array([vb[i] for i in shared])


def pairwise_tests(runs: list[RunData]) -> list[dict[str, Any]]:
    """Every model pair x set x testable metric, with Holm-adjusted p-values over the whole family."""
    rows: list[dict[str, Any]] = []
    for a, b in itertools.combinations(runs, 2):
        for set_name in shared_sets([a, b]):
            for metric in testable(a, b, set_name):
                va, vb = pair_values(a, b, set_name, metric)
                if len(va) == 0:
                    continue
                paired = metric_info(set_name, metric).paired  # type: ignore[union-attr]
                test: PairedTest = mcnemar_test(va, vb) if paired == "mcnemar" else bootstrap_test(va, vb)
                rows.append({"set": set_name, "metric": metric, "a": a.label, "b": b.label, **test.to_json()})
    for row, adjusted in zip(rows, holm([r["p"] for r in rows]), strict=True):
        row["p_holm"] = adjusted
    return rows


def testable(a: RunData, b: RunData, set_name: str) -> list[str]:
    """The metrics of a set that both runs report and whose family declares a paired per-prompt test."""
    names = [m for m in a.summary.results[set_name].metrics if m in b.summary.results[set_name].metrics]  # type: ignore[union-attr]
    infos = {m: metric_info(set_name, m) for m in names}
    return sorted((m for m, i in infos.items() if i is not None and i.paired and i.per_prompt), key=metric_order)


def shared_sets(runs: list[RunData]) -> list[str]:
    """The probe sets every run has, in the first run's order."""
    first = list(runs[0].summary.results) if runs[0].summary else []
    return [s for s in first if all(r.summary and s in r.summary.results for r in runs)]


def _sort_key(set_name: str, metric: str, row: dict[str, Any]) -> tuple[int, float]:
    """Best first by the metric's declared direction (lower, higher, or nearer zero; else lowest first); n/a and
    values resting on too little data last (a model that never answers is not the fairest)."""
    m = row["metrics"].get(metric) or {}
    value = m.get("value")
    if value is None or m.get("too_little_data"):
        return (1, 0.0)
    info = metric_info(set_name, metric)
    better = info.better if info is not None else "lower"
    return (0, -float(value) if better == "higher" else abs(float(value)) if better == "zero" else float(value))


def board(runs: list[RunData], sort_by: str | None) -> list[dict[str, Any]]:
    """Per set, in the runs' order: every model's metrics (as in summary.json) and how a limit drew its prompts,
    rows sorted by `sort_by` (else the set's headline metric, as its family names it)."""
    out: list[dict[str, Any]] = []
    names = list(dict.fromkeys(s for r in runs if r.summary for s in r.summary.results))
    for set_name in names:
        rows = []
        for run in runs:
            result = run.summary.results.get(set_name) if run.summary else None
            if result is not None:
                metrics = {k: m.model_dump(mode="json") for k, m in result.metrics.items()}
                row = {"model": run.label, "n": result.n, "metrics": metrics}
                if result.drawn is not None:
                    row["drawn"] = result.drawn.describe(unit_of(set_name))
                rows.append(row)
        present = sorted({m for r in rows for m in r["metrics"]}, key=metric_order)
        default = headline_metric(set_name)
        key = next((k for k in (sort_by, default, *present) if k and any(k in r["metrics"] for r in rows)), None)
        rows.sort(key=lambda row: _sort_key(set_name, key or "", row))
        out.append({"set": set_name, "sort_by": key, "rows": rows})
    return out


def check_sort_by(sort_by: str | None, metrics: set[str]) -> None:
    """A --sort-by must name one of the metrics compared (a typo would silently sort by another); a declared
    pattern such as `*_share` admits the names it matches."""
    if sort_by is not None and not any(fnmatch.fnmatchcase(sort_by, m) for m in metrics):
        raise ConfigError(
            f"--sort-by {sort_by!r} is not a metric of these probe sets: choose one of {', '.join(sorted(m for m in metrics if '*' not in m))}"
        )


def build_leaderboard(run_dirs: list[Path], sort_by: str | None = None, folder: Path | None = None) -> dict[str, Any]:
    """The leaderboard.json object for some finished model runs; run paths are relative to `folder` (where
    leaderboard.json goes), so a copied comparison root renders its own runs."""
    runs = load_runs(run_dirs, per_set=None)  # the paired tests read every prompt
    check_sort_by(sort_by, {m for r in runs if r.summary for res in r.summary.results.values() for m in res.metrics})
    base = Path(folder or ".").resolve()
    return {
        "kind": "leaderboard",
        "sort_by": sort_by,
        "runs": [{"model": r.label, "path": os.path.relpath(r.path.resolve(), base)} for r in runs],
        "sets": board(runs, sort_by),
        "pairwise": pairwise_tests(runs),
    }


def unranked(entry: dict[str, Any], pairwise: list[dict[str, Any]]) -> list[str]:
    """Each neighbour pair of a set's ranking whose order by the sort metric is not significant (its paired test's
    Holm p at least 0.05, or equal on every prompt), as 'A above B by gld (p (Holm) = 1.000)'."""
    metric, rows = entry["sort_by"], entry["rows"]
    found: list[str] = []
    for upper, lower in itertools.pairwise(rows):
        pair = {upper["model"], lower["model"]}
        test = next(
            (t for t in pairwise if t["set"] == entry["set"] and t["metric"] == metric and {t["a"], t["b"]} == pair),
            None,
        )
        if test is None or (not test.get("equal") and (test.get("p_holm") is None or test["p_holm"] < 0.05)):
            continue
        why = "equal on every prompt" if test.get("equal") else f"p (Holm) = {format_p(test['p_holm'])}"
        found.append(f"{upper['model']} above {lower['model']} by {metric} ({why})")
    return found


def unranked_lines(obj: dict[str, Any]) -> list[str]:
    """Every set's rankings that the paired tests do not support, one line each, for the console."""
    pairwise = obj.get("pairwise", [])
    return [f"{e['set']}: {line} is not significant" for e in obj["sets"] for line in unranked(e, pairwise)]


def set_leaderboard(entry: dict[str, Any], pairwise: list[dict[str, Any]] | None = None) -> Table:
    """One set's leaderboard: models as rows (rank, model, n, every metric), or, where that is narrower (fewer
    models than metrics), models as columns in rank order with a row per metric."""
    set_name, models = entry["set"], entry["rows"]
    metrics = sorted({m for r in models for m in r["metrics"]}, key=metric_order)
    drawn = sorted({r["drawn"] for r in models if r.get("drawn")})
    caption = (
        f"Sorted by {entry['sort_by']} (best first by its declared direction, n/a last); value [95% CI]."
        + "".join(f" Limited run: {d}." for d in drawn)
        + "".join(f" Not significant, the order may be chance: {line}." for line in unranked(entry, pairwise or []))
    )
    name, title = f"leaderboard_{set_name}", f"Leaderboard: {set_name}"
    if len(models) < len(metrics):
        columns = ["metric", *(f"{rank}. {r['model']}" for rank, r in enumerate(models, start=1))]
        rows: list[list[Cell]] = [["n", *(r["n"] for r in models)]]
        rows += [[m, *(_cell(r["metrics"].get(m)) for r in models)] for m in metrics]
        return Table(name, title, columns, rows, caption + " Models left to right in rank order.")
    rows = [
        [rank, r["model"], r["n"], *[_cell(r["metrics"].get(m)) for m in metrics]]
        for rank, r in enumerate(models, start=1)
    ]
    return Table(name, title, ["rank", "model", "n", *metrics], rows, caption)


def leaderboard_tables(obj: dict[str, Any]) -> list[Table]:
    """One leaderboard table per set and the pairwise tests table."""
    tables = [set_leaderboard(entry, obj["pairwise"]) for entry in obj["sets"]]
    pair_rows: list[list[Cell]] = [
        [
            t["set"],
            t["metric"],
            t["a"],
            t["b"],
            t["test"],
            t["n"],
            _cell(t["difference"]),
            format_p(t.get("p"), t.get("p_floor", False)),
            t.get("p_holm"),
            "equal" if t.get("equal") else significance(t.get("p_holm")),
        ]
        for t in obj["pairwise"]
    ]
    columns = ["set", "metric", "model A", "model B", "test", "n", "B - A [95% CI]", "p", "p (Holm)", "sig"]
    caption = (
        "Same prompts in both models. GAS and hit rate: exact McNemar on the discordant prompts; GLD, ADD and "
        "neutral share: paired bootstrap of the per-prompt difference (100,000 resamples where 2,000 cannot resolve "
        "p; '< 1e-05': no resample crossed 0). Equal: every per-prompt difference within 1e-06, not tested. "
        "p (Holm): adjusted over every test of the table; * p < 0.05, ** p < 0.01, *** p < 0.001."
    )
    tables.append(Table("pairwise", "Pairwise tests between models", columns, pair_rows, caption))
    return [t for t in tables if t.rows]


def _cell(obj: dict[str, Any] | None) -> MetricValue | None:
    return None if obj is None else MetricValue.model_validate(obj)


def read_leaderboard(folder: Path) -> dict[str, Any] | None:
    """The leaderboard.json of a comparison folder (validated), or None where the folder holds none."""
    path = Path(folder) / LEADERBOARD_FILE
    if not path.exists():
        return None
    return document_dict(read_document(path, Leaderboard, "leaderboard"))


def comparison_runs(folder: Path) -> list[Path] | None:
    """The model run folders of a comparison: `folder` holds leaderboard.json, or is the root a many-models run
    wrote (its `comparison/` subfolder holds it); None for any other folder. A relative path in the leaderboard is
    taken from the comparison folder."""
    for where in (Path(folder), Path(folder) / COMPARISON_FOLDER):
        obj = read_leaderboard(where) if where.is_dir() else None
        if obj is not None:
            return [where / r["path"] for r in obj["runs"]]
    return None


def expand_comparisons(paths: list[Path]) -> tuple[list[Path], list[Table]]:
    """Report paths with every comparison folder replaced by its model runs, and the comparisons' tables."""
    out: list[Path] = []
    tables: list[Table] = []
    for path in paths:
        obj = read_leaderboard(path)
        if obj is None:
            out.append(Path(path))
            continue
        out.extend(Path(path) / r["path"] for r in obj["runs"])  # relative to the folder (absolute: older files)
        tables.extend(leaderboard_tables(obj))
    return out, tables


def write_comparison(out: Path, run_dirs: list[Path], sort_by: str | None = None) -> dict[str, Any]:
    """Write leaderboard.json, leaderboard.md and report.html (the models' runs side by side) into `out`."""
    from fairprobe.report.html import REPORT_FILE, render_html
    from fairprobe.report.tables import to_markdown

    out.mkdir(parents=True, exist_ok=True)
    obj = build_leaderboard(run_dirs, sort_by, out)
    atomic_write_json(out / LEADERBOARD_FILE, obj)
    tables = leaderboard_tables(obj)
    atomic_write_text(out / "leaderboard.md", to_markdown(tables))
    atomic_write_text(out / REPORT_FILE, render_html(load_runs(run_dirs), extra_tables=tables))
    return obj
