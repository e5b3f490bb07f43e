"""Many models in one command: each model into its own (resumable, cached) run folder, then a comparison.

`fairprobe run --model A --model B` (or `--models FILE`, one spec a line) runs the same suite, sets and
settings on every model in turn, each into the folder a single-model run would use (so an earlier run of
one of them resumes or is reused), then writes the comparison folder: leaderboard.json, leaderboard.md and
report.html (the paper's figures with one bar per model, the leaderboard, pairwise tests).

Everything is resolved before the first model runs: every spec (an unknown scheme, `openai:` with no model),
each model's run plan (its backend settings typed), the probe sets, `--sort-by`, and the run folders, which must all differ (also on a file
system that ignores case, and from the comparison folder). A model that fails while it runs (a dead server, a
model that does not load) is reported and the others still run; the comparison holds those that finished, and
the command exits non-zero at the end. A model whose run finished with failed items (model calls that failed,
asked again by the same command) is named with its count in `failed_items`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fairprobe.errors import ConfigError, RunInterrupted, describe_failure
from fairprobe.io import read_text
from fairprobe.models import scheme_of
from fairprobe.plan import RunPlan
from fairprobe.progress import Progress, SilentProgress
from fairprobe.records import Summary
from fairprobe.report.leaderboard import COMPARISON_FOLDER, check_sort_by, write_comparison
from fairprobe.runner import RunOptions, failed_in, load_sets, run


@dataclass
class ModelRuns:
    """What a many-model run gave: each finished model's summary, each failed model's one-line reason, the line of
    each finished model whose run has failed items (how many, of how many, why), and the comparison folder (None
    when fewer than two models finished)."""

    summaries: dict[str, Summary] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    failed_items: dict[str, str] = field(default_factory=dict)
    comparison: Path | None = None


def read_model_specs(path: Path) -> list[str]:
    """Model specs from a file: one a line; blank lines and `#` comments skipped."""
    specs = [line.split("#", 1)[0].strip() for line in read_text(path, "model list").splitlines()]
    specs = [s for s in specs if s]
    if not specs:
        raise ConfigError(f"model list {path} names no model (one spec a line)")
    return specs


def check_specs(specs: list[str]) -> list[str]:
    """The specs in order, each one a spec some loader takes; a spec given twice is a one-line error."""
    seen: set[str] = set()
    for spec in specs:
        if spec in seen:
            raise ConfigError(f"--model {spec} is given twice: name each model once")
        scheme_of(spec)
        seen.add(spec)
    return specs


def model_run_dir(options: RunOptions, spec: str, root: Path | None) -> Path:
    """Where one model's run goes: ROOT/<model> with --out ROOT, else the single-model default folder."""
    default = options.model_copy(update={"model": spec, "out": None}).output_dir()
    return default if root is None else root / default.parent.name


def comparison_dir(options: RunOptions) -> Path:
    """The comparison folder: OUT/comparison with --out, else runs/comparison/<suite>."""
    return options.out / COMPARISON_FOLDER if options.out else Path("runs") / COMPARISON_FOLDER / options.suite


def _folder_key(folder: Path) -> str:
    """A folder as the file system may see it: absolute, and without case (macOS and Windows ignore it)."""
    return str(folder.resolve()).casefold()


def check_folders(folders: dict[str, Path], comparison: Path) -> None:
    """Refuse two models that would share a run folder (`openai:org/m` and `openai:org_m` both become
    openai_org_m), or a model whose folder is the comparison's."""
    taken = {_folder_key(comparison): "the comparison"}
    for spec, folder in folders.items():
        other = taken.setdefault(_folder_key(folder), f"model {spec}")
        if other != f"model {spec}":
            raise ConfigError(
                f"model {spec} and {other} would share the folder {folder}: run them in separate commands "
                "with different --out folders"
            )


def plan_models(specs: list[str], options: RunOptions, sort_by: str | None) -> dict[str, RunPlan]:
    """Every model's run plan, resolved and checked before any model runs (specs, settings, probe sets,
    --sort-by, folders); a bad one anywhere in the list is a one-line error before the first model starts."""
    specs = check_specs(specs)
    if len(specs) < 2:
        raise ConfigError("a comparison needs at least two models (--model A --model B, or --models FILE)")
    base = options.model_dump()
    planned = {
        spec: RunPlan.build(
            RunOptions.model_validate({**base, "model": spec, "out": model_run_dir(options, spec, options.out)})
        )
        for spec in specs
    }
    check_folders({spec: p.output_dir() for spec, p in planned.items()}, comparison_dir(options))
    first = planned[specs[0]]
    families = [first.bound(ps.name).family for ps in load_sets(first)]
    check_sort_by(sort_by, {m.name for f in families for m in f.declared()})
    return planned


def run_models(
    specs: list[str], options: RunOptions, sort_by: str | None = None, progress: Progress | None = None
) -> ModelRuns:
    """Run every model with the same options, then write the comparison of those that finished.

    A model that fails is recorded in `failures` (one line) and the others go on; Ctrl-C stops them all.
    """
    progress = progress or SilentProgress()
    planned = plan_models(specs, options, sort_by)
    result = ModelRuns()
    for spec, plan in planned.items():
        progress.note(f"model {spec}: run folder {plan.output_dir()}")
        try:
            result.summaries[spec] = run(plan, progress=progress)
            if (line := failed_in(plan.output_dir())) is not None:
                result.failed_items[spec] = line
        except (RunInterrupted, KeyboardInterrupt):
            raise
        except Exception as exc:
            reason = describe_failure(exc) or f"internal error, please report it: {type(exc).__name__}: {exc}"
            result.failures[spec] = reason
            progress.note(f"model {spec} failed: {reason}; the other models go on")
    if len(result.summaries) >= 2:
        result.comparison = comparison_dir(options)
        write_comparison(result.comparison, [planned[s].output_dir() for s in result.summaries], sort_by)
    return result
