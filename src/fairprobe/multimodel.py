"""Many models in one command: each model into its own (resumable, cached) run folder, then a comparison.

`fairprobe run --model A --model B` (or `--models FILE`, one spec a line) runs the same suite, sets and
settings on every model in turn, each into the folder a single-model run would use (so an earlier run of
one of them resumes or is reused), then writes the comparison folder: leaderboard.json, leaderboard.md and
report.html (the paper's figures with one bar per model, the leaderboard, pairwise tests).
"""

from __future__ import annotations

from pathlib import Path

from fairprobe.errors import ConfigError
from fairprobe.io import read_text
from fairprobe.progress import Progress, SilentProgress
from fairprobe.records import Summary
from fairprobe.report.leaderboard import COMPARISON_FOLDER, write_comparison
from fairprobe.runner import RunOptions, run


def read_model_specs(path: Path) -> list[str]:
    """Model specs from a file: one a line; blank lines and `#` comments skipped."""
    specs = [line.split("#", 1)[0].strip() for line in read_text(path, "model list").splitlines()]
    specs = [s for s in specs if s]
    if not specs:
        raise ConfigError(f"model list {path} names no model (one spec a line)")
    return specs


def check_specs(specs: list[str]) -> list[str]:
    """The specs in order; a spec given twice is a one-line error (each model runs once)."""
    seen: set[str] = set()
    for spec in specs:
        if spec in seen:
            raise ConfigError(f"--model {spec} is given twice: name each model once")
        seen.add(spec)
    return specs


def model_run_dir(options: RunOptions, spec: str, root: Path | None) -> Path:
    """Where one model's run goes: ROOT/<model> with --out ROOT, else the single-model default folder."""
    default = options.model_copy(update={"model": spec, "out": None}).output_dir()
    return default if root is None else root / default.parent.name


def comparison_dir(options: RunOptions) -> Path:
    """The comparison folder: OUT/comparison with --out, else runs/comparison/<suite>."""
    return options.out / COMPARISON_FOLDER if options.out else Path("runs") / COMPARISON_FOLDER / options.suite


def run_models(
    specs: list[str], options: RunOptions, sort_by: str | None = None, progress: Progress | None = None
) -> tuple[dict[str, Summary], Path]:
    """Run every model with the same options, then write the comparison; returns summaries and its folder."""
    progress = progress or SilentProgress()
    specs = check_specs(specs)
    if len(specs) < 2:
        raise ConfigError("a comparison needs at least two models (--model A --model B, or --models FILE)")
    folders, summaries = [], {}
    for spec in specs:
        folder = model_run_dir(options, spec, options.out)
        progress.note(f"model {spec}: run folder {folder}")
        summaries[spec] = run(options.model_copy(update={"model": spec, "out": folder}), progress=progress)
        folders.append(folder)
    out = comparison_dir(options)
    write_comparison(out, folders, sort_by)
    return summaries, out
