"""The runs behind both front ends, one implementation each: the Python API's functions and the CLI's commands give
their arguments here as one settings dict (the API's argument names), the request is built once (`request`), its
plan is built and run, and what the run gave comes back: the CLI prints it, the API reads it back as result
objects. So an argument means the same in both, and the same arguments write the same folders."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fairprobe.api.arguments import mapping, names, path_or_none
from fairprobe.errors import ConfigError
from fairprobe.options import RunOptions
from fairprobe.progress import Progress

# Path arguments of the runs (the runner's fields, and the paper family's `words`).
PATH_ARGS = ("data_dir", "out", "words", "cache")


@contextmanager
def shown(progress: bool) -> Iterator[Progress]:
    """Progress on stderr (bars in a terminal, plain lines in notebooks and logs), or none."""
    from fairprobe.progress import SilentProgress, auto_progress

    if not progress:
        yield SilentProgress()
        return
    with auto_progress() as display:
        yield display


def request(model: str, settings: dict[str, Any]) -> RunOptions:
    """A run's request from the front ends' settings: decoding into a GenerationConfig, backend settings (`device`,
    `dtype`, `base_url`, ... and `model_args`) and family settings (`instruction`, `words`, `implicit`, and
    `options`) folded as `-M`/`-o` pairs, paths checked; the run plan types them (`fairprobe.plan`)."""
    from fairprobe.options import run_options_from_settings

    settings = dict(settings)
    model_args = dict(mapping(settings.pop("model_args", None), "model_args"))
    probe_options = {k.replace("-", "_"): str(v) for k, v in mapping(settings.pop("options", None), "options").items()}
    if settings.get("adapter") is not None:
        settings["adapter"] = str(path_or_none(settings["adapter"], "adapter"))
    for arg in PATH_ARGS:
        settings[arg] = path_or_none(settings.get(arg), arg)
    flags = {**settings, "model": model, "probes": names(settings.get("probes"), "probes")}
    return run_options_from_settings(flags, model_args, probe_options)


def run_one(model: str, settings: dict[str, Any], progress: Progress) -> tuple[Any, Path]:
    """Run one model spec with the settings; its summary and run folder."""
    from fairprobe.plan import RunPlan
    from fairprobe.runner import run

    plan = RunPlan.build(request(model, settings))
    return run(plan, progress=progress), plan.output_dir()


def run_several(specs: list[str], settings: dict[str, Any], sort_by: str | None, progress: Progress) -> Any:
    """Several model specs with the same settings, each into its own run folder, then their comparison
    (multimodel.ModelRuns: summaries, failures, failed items, the comparison folder)."""
    from fairprobe.multimodel import run_models

    if not all(isinstance(s, str) for s in specs):
        raise ConfigError("a list of models must hold spec strings; measure a model object on its own")
    return run_models(specs, request(specs[0], settings), sort_by, progress)


def failed_line(folder: Path) -> str | None:
    """The one line of a finished run folder whose manifest records failed items, else None."""
    from fairprobe.runner import failed_in

    return failed_in(folder)


def score_replies(
    probes: str,
    responses: str | Path,
    out: str | Path | None,
    data_dir: str | Path | None,
    options: dict[str, Any] | None,
    model: str,
) -> Any:
    """Score replies produced elsewhere (scoring.ScoreReport: summary, samples, skipped lines, probes missing)."""
    from fairprobe.scoring import score_responses

    replies = path_or_none(responses, "responses")
    if replies is None:
        raise ConfigError("responses must be the path of a JSONL file of replies")
    return score_responses(
        probes,
        replies,
        data_dir=path_or_none(data_dir, "data_dir"),
        out=path_or_none(out, "out"),
        probe_options={k.replace("-", "_"): str(v) for k, v in mapping(options, "options").items()},
        model=model,
    )
