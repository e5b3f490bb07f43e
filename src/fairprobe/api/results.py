"""What the Python API returns, and `load(path)` for any folder fairprobe wrote: a run, a many-models comparison,
a mitigation comparison or a decoding sweep, each with its files read back and `to_pandas()`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from fairprobe.api.arguments import ArgumentError
from fairprobe.api.frames import (
    frame,
    method_rows,
    pairwise_rows,
    sample_row,
    setting_rows,
    summary_rows,
    sweep_drift_rows,
)
from fairprobe.errors import ConfigError, DataError
from fairprobe.io import iter_jsonl, read_text
from fairprobe.records import Summary
from fairprobe.report.leaderboard import COMPARISON_FOLDER, read_leaderboard
from fairprobe.report.runs import load_summary

REPORT = "report.html"


class FailedItems(UserWarning):
    """A run finished with failed items (model calls that failed: a server error, a malformed answer): its summary
    leaves them out, `Run.failed` (or `Comparison.failed`) says how many and why, and calling the same function
    again with the same arguments asks exactly those items again."""


def read_object(path: Path, what: str) -> dict[str, Any]:
    """A JSON object file, or fairprobe's one-line DataError naming it."""
    try:
        obj = json.loads(read_text(path, what))
    except (json.JSONDecodeError, RecursionError) as exc:
        raise DataError(f"malformed {what} {path}: {exc}") from None
    if not isinstance(obj, dict):
        raise DataError(f"malformed {what} {path}: expected a JSON object")
    return obj


def report_in(folder: Path | None) -> Path | None:
    """The folder's report.html, where it has one (none for a result kept in memory)."""
    if folder is None:
        return None
    path = folder / REPORT
    return path if path.is_file() else None


@dataclass
class Run:
    """One model's run folder: its manifest, summary and samples, and the report to open.

    `to_pandas()` gives one row per set x subset x metric (value, 95% interval, n); `to_pandas("samples")` one row
    per sample (prompt, continuation, detector verdicts, probabilities ...).
    """

    folder: Path
    summary: Summary
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        sets = ", ".join(f"{name} (n={r.n})" for name, r in self.summary.results.items())
        return f"Run(model={self.model!r}, folder={str(self.folder) if self.folder else None!r}, sets: {sets})"

    @property
    def model(self) -> str:
        """The model's label, as the summary names it."""
        return self.summary.model

    @property
    def report_path(self) -> Path | None:
        """report.html of the run (None where it was not written)."""
        return report_in(self.folder)

    @property
    def failed(self) -> dict[str, Any] | None:
        """The items whose model calls failed, as the manifest records them: `{"items": 2, "of": 6, "reasons":
        {reason: count}}`; None when every item was answered. Calling `run` again with the same arguments asks
        exactly these again."""
        failed = self.manifest.get("failed")
        return dict(failed) if isinstance(failed, dict) else None

    @cached_property
    def samples(self) -> list[dict[str, Any]]:
        """samples.jsonl, one dict per prompt (or pair), read on first use."""
        path = self.folder / "samples.jsonl"
        if not path.is_file():
            return []
        return [obj for _, obj in iter_jsonl(path, "samples.jsonl")]

    def to_pandas(self, what: Literal["metrics", "samples"] = "metrics") -> Any:
        """A tidy DataFrame of the run's metrics (default) or samples; needs `fairprobe[pandas]`."""
        if what == "metrics":
            return frame(summary_rows(self.summary))
        if what == "samples":
            return frame([sample_row(self.model, s) for s in self.samples])
        raise ConfigError(f"to_pandas() takes 'metrics' or 'samples', got {what!r}")


@dataclass
class Comparison:
    """Several models run alike (`run(model=[a, b])`): each model's Run, the leaderboard and its pairwise tests."""

    folder: Path
    runs: dict[str, Run]
    leaderboard: dict[str, Any] = field(repr=False)

    def __repr__(self) -> str:
        return f"Comparison(folder={str(self.folder)!r}, models={list(self.runs)})"

    @property
    def report_path(self) -> Path | None:
        """The comparison's report.html."""
        return report_in(self.folder)

    @property
    def failed(self) -> dict[str, dict[str, Any]]:
        """Each model whose run has failed items, with them (as `Run.failed`); empty when every item was answered."""
        return {model: failed for model, run in self.runs.items() if (failed := run.failed) is not None}

    def to_pandas(self, what: Literal["metrics", "samples", "pairwise"] = "metrics") -> Any:
        """Every model's rows in one DataFrame (a `model` column tells them apart), or with "pairwise" the paired
        tests between the models (difference, interval, p and Holm's p); needs `fairprobe[pandas]`."""
        if what == "metrics":
            return frame([row for run in self.runs.values() for row in summary_rows(run.summary)])
        if what == "samples":
            return frame([sample_row(run.model, s) for run in self.runs.values() for s in run.samples])
        if what == "pairwise":
            return frame(pairwise_rows(self.leaderboard))
        raise ConfigError(f"to_pandas() takes 'metrics', 'samples' or 'pairwise', got {what!r}")


@dataclass
class MitigationComparison:
    """`compare()`'s folder: each method (Original, Hyperparameter, Instruction, Debias Tuning ...) on each set, with
    paired tests and drift against Original (compare.json), and each method's own Run."""

    folder: Path
    result: dict[str, Any] = field(repr=False)

    @property
    def report_path(self) -> Path | None:
        """The comparison's report.html."""
        return report_in(self.folder)

    @property
    def runs(self) -> dict[str, Run]:
        """Each method's run folder (runs/<method>/ beside compare.json)."""
        return {p.parent.name: load_run(p.parent) for p in sorted(self.folder.glob("runs/*/summary.json"))}

    def to_pandas(self) -> Any:
        """One row per set x method x metric with value and interval; needs `fairprobe[pandas]`."""
        return frame(method_rows(self.result))


@dataclass
class Sweep:
    """`sweep()`'s folder: GAS over seeds for each decoding setting, the greedy reference and the best setting."""

    folder: Path
    result: dict[str, Any] = field(repr=False)

    def best(self, set_name: str | None = None) -> dict[str, Any]:
        """The lowest-GAS setting of a set (the first set by default), with its verdict against greedy."""
        sets = self.result.get("sets", {})
        if not sets:
            raise DataError(f"sweep {self.folder} has no results")
        if set_name is not None and set_name not in sets:
            raise ConfigError(f"sweep {self.folder} has no set {set_name!r}: it has {', '.join(sets)}")
        return dict(sets[set_name or next(iter(sets))]["best"])

    @property
    def runs(self) -> dict[str, Run]:
        """The greedy reference run and each setting's first seed, by setting (as its report shows them)."""
        found = [self.folder / "greedy", *sorted(self.folder.glob("settings/*/seed0"))]
        return {
            p.parent.name if p.name == "seed0" else p.name: load_run(p) for p in found if (p / "summary.json").is_file()
        }

    def to_pandas(self, what: Literal["settings", "drift"] = "settings") -> Any:
        """One row per set x setting (greedy first) with GAS and its interval, or with "drift" one per set x setting
        x drift measure with its test against greedy; needs `fairprobe[pandas]`."""
        if what == "settings":
            return frame(setting_rows(self.result))
        if what == "drift":
            return frame(sweep_drift_rows(self.result))
        raise ConfigError(f"to_pandas() takes 'settings' or 'drift', got {what!r}")


def load_run(folder: Path) -> Run:
    """A run folder as a Run (summary validated; manifest when there)."""
    manifest_path = folder / "manifest.json"
    manifest = read_object(manifest_path, "manifest.json") if manifest_path.is_file() else {}
    return Run(folder=folder, summary=load_summary(folder), manifest=manifest)


def load_comparison(folder: Path, leaderboard: dict[str, Any]) -> Comparison:
    """A many-models comparison folder with each model's run (paths stored relative to it, or absolute)."""
    runs = {}
    for entry in leaderboard.get("runs", []):
        path = Path(entry["path"])
        run = load_run(path if path.is_absolute() else folder / path)
        runs[str(entry.get("model") or run.model)] = run
    return Comparison(folder=folder, runs=runs, leaderboard=leaderboard)


Result = Run | Comparison | MitigationComparison | Sweep


def load(path: str | Path | Result) -> Result:
    """Read back any folder fairprobe wrote: a run (summary.json), a many-models comparison (leaderboard.json, or
    the root a many-models run wrote, which holds it in comparison/), a mitigation comparison (compare.json) or a
    decoding sweep (sweep.json). A result object is read again from its folder (as it is when it has none)."""
    if isinstance(path, Run | Comparison | MitigationComparison | Sweep):
        return path if path.folder is None else load(path.folder)
    if not isinstance(path, str | Path) or not str(path):
        raise ArgumentError(
            f"fairprobe.load() needs a folder (a str or pathlib.Path) or a fairprobe result, got {path!r}"
        )
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"no fairprobe folder at {folder}")
    for where in (folder, folder / COMPARISON_FOLDER):
        leaderboard = read_leaderboard(where) if where.is_dir() else None
        if leaderboard is not None:
            return load_comparison(where, leaderboard)
    if (folder / "compare.json").is_file():
        return MitigationComparison(folder=folder, result=read_object(folder / "compare.json", "compare.json"))
    if (folder / "sweep.json").is_file():
        return Sweep(folder=folder, result=read_object(folder / "sweep.json", "sweep.json"))
    if (folder / "summary.json").is_file():
        return load_run(folder)
    raise DataError(
        f"{folder} holds no fairprobe result (summary.json, leaderboard.json, compare.json or sweep.json); "
        "an unfinished run is finished by running the same command again"
    )


def summaries_of(result: Result) -> dict[str, Summary]:
    """The run summaries a result holds, by label: a run's own (labelled ""), each model's of a comparison, each
    method's of a mitigation comparison, the greedy run's and each setting's of a sweep."""
    if isinstance(result, Run):
        return {"": result.summary}
    return {label: run.summary for label, run in result.runs.items()}


def report_folders(result: Result) -> list[Path]:
    """The folders a report of a result shows (a comparison folder brings its models' runs, a mitigation
    comparison its methods'); a run scored in memory has none, so it cannot be reported."""
    if isinstance(result, Sweep):
        return [run.folder for run in result.runs.values()]
    if result.folder is None:
        raise ConfigError("this result was scored in memory: score it with out=FOLDER to report it")
    return [result.folder]
