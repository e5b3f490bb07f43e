"""`fairprobe run` and `fairprobe score`: a suite on one or more models, or replies from elsewhere.

Parsing, printing and exit codes only: the runs are the Python API's (`fairprobe.api.runs`), given the flags
under the API's argument names, so a flag and its argument mean the same."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from fairprobe.cli.common import (
    BatchSizeOpt,
    CacheOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    LimitOpt,
    LimitOrderOpt,
    MaxNewTokensOpt,
    ModelArgsOpt,
    ModelListOpt,
    ModelsFileOpt,
    ProbeOptionOpt,
    RunOutOpt,
    SortByOpt,
    console,
    err_console,
    print_error,
    probe_options,
    written,
)

app = typer.Typer()

InstructionOpt = Annotated[
    str | None, typer.Option(help="prefix every prompt (instruction guiding); 'paper' = the paper's text")
]

BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        help="openai: server URL(s), comma-separated for round-robin (default https://api.openai.com/v1; "
        "= -M base_url=...)"
    ),
]

ConcurrencyOpt = Annotated[
    int | None, typer.Option(min=1, help="parallel requests to an openai: server (default 8; = -M concurrency=...)")
]

ImplicitOpt = Annotated[
    str | None,
    typer.Option(
        help="next-word probabilities: off (= -o implicit=off), or over an openai: server exact (score prompt "
        "tokens) or topk (bounds from top logprobs) (= -M implicit=...); default: exact where the server can"
    ),
]

TopLogprobsOpt = Annotated[
    int | None, typer.Option(min=1, help="top logprobs to ask for with --implicit topk (= -M top_logprobs=...)")
]

# The exit code of a run that finished with failed items (1: a check failed, 2: an error).
FAILED_ITEMS = 3

NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="ask the model again instead of reusing answers")]


class SuitesInHelp(TyperCommand):
    """`fairprobe run --help` names every registered suite, read from the registry when the help is shown (so a
    family's new suite is listed, and no other command pays for loading the families)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Fill in the --suite help, then format as usual."""
        from fairprobe.catalog import suite_names

        for param in self.params:
            if param.name == "suite":
                param.help = f"suite to run: {', '.join(suite_names())}"  # type: ignore[attr-defined]
        super().format_help(ctx, formatter)


@app.command("run", cls=SuitesInHelp)
def run_cmd(
    suite: Annotated[str, typer.Option(help="suite to run (each registered suite is listed here)")] = "paper",
    probes: Annotated[str | None, typer.Option(help="comma-separated probe sets (default: all of the suite)")] = None,
    model: ModelListOpt = None,
    models: ModelsFileOpt = None,
    sort_by: SortByOpt = None,
    adapter: Annotated[str | None, typer.Option(help="LoRA adapter folder to put on the model")] = None,
    data_dir: DataDirOpt = None,
    out: RunOutOpt = None,
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    temperature: Annotated[float, typer.Option(min=0.0, help="0 = greedy (paper default)")] = 0.0,
    top_p: Annotated[float, typer.Option(help="nucleus sampling (needs temperature > 0)")] = 1.0,
    top_k: Annotated[int, typer.Option(min=0, help="top-k sampling, 0 = off")] = 0,
    max_new_tokens: MaxNewTokensOpt = 50,
    instruction: InstructionOpt = None,
    words: Annotated[Path | None, typer.Option(help="attribute word lists (JSON) instead of the default")] = None,
    option: ProbeOptionOpt = None,
    batch_size: BatchSizeOpt = 32,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    base_url: BaseUrlOpt = None,
    concurrency: ConcurrencyOpt = None,
    implicit: ImplicitOpt = None,
    top_logprobs: TopLogprobsOpt = None,
    cache: CacheOpt = None,
    no_cache: NoCacheOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the table")] = False,
    model_arg: ModelArgsOpt = None,
) -> None:
    """Run a suite on a model: writes manifest.json, samples.jsonl and summary.json, prints the summary."""
    settings = run_settings(dict(locals()))
    from fairprobe.api.runs import failed_line, run_one, shown

    specs = run_specs(model, models)
    if len(specs) > 1:
        return run_many(specs, settings, sort_by, as_json)
    with shown(True) as progress:
        summary, folder = run_one(specs[0], settings, progress)
    show_summary(summary, as_json)
    written("run", folder)
    failed = failed_line(folder)
    if failed is not None:  # the run finished, but some items' model calls failed: exit 3, the same command asks them
        print_error(failed)
        raise typer.Exit(FAILED_ITEMS)


def run_settings(flags: dict[str, Any]) -> dict[str, Any]:
    """The settings of `run` under the Python API's names: `-M` and `-o` pairs as dicts, `--no-cache` as
    `use_cache`; the shortcut flags (`--device`, `--base-url`, `--implicit`, ...) as they are, folded by the API."""
    from fairprobe.options import parse_pairs_typed

    settings = {k: v for k, v in flags.items() if k not in ("model", "models", "sort_by", "as_json")}
    settings["model_args"] = parse_pairs_typed(settings.pop("model_arg"), "model arg (-M)", values=True)
    settings["options"] = probe_options(settings.pop("option"))
    settings["use_cache"] = not settings.pop("no_cache")
    return settings


def show_summary(summary: Any, as_json: bool) -> None:
    """A run's summary: summary.json with --json, else the table and the verdict."""
    from fairprobe.report.console import print_summary

    if as_json:
        console.print_json(json.dumps(summary.to_json_obj()))
    else:
        print_summary(summary, console)


def run_specs(model: list[str] | None, models: Path | None) -> list[str]:
    """The model specs of `run`: every --model, then the lines of --models FILE; the default model when none."""
    from fairprobe.models import DEFAULT_MODEL
    from fairprobe.multimodel import check_specs, read_model_specs

    specs = list(model or []) + (read_model_specs(models) if models else [])
    return check_specs(specs) or [DEFAULT_MODEL]


def run_many(specs: list[str], settings: dict[str, Any], sort_by: str | None, as_json: bool) -> None:
    """Run several models, then print the comparison's headline columns and each verdict (with --json: one JSON
    document for all); each model that failed is one error line, and the command exits 2 after the others ran; a
    model whose run has failed items is one line with their count, and the command exits 3 (as a single run)."""
    from fairprobe.api.runs import run_several, shown

    with shown(True) as progress:
        runs = run_several(specs, settings, sort_by, progress)
    out = runs.comparison
    if as_json:
        board = json.loads((out / "leaderboard.json").read_text(encoding="utf-8")) if out else None
        document = {
            "models": {spec: summary.to_json_obj() for spec, summary in runs.summaries.items()},
            "failed": runs.failures,
            "failed_items": runs.failed_items,
            "comparison": {"folder": str(out), "leaderboard": board} if out else None,
        }
        console.print_json(json.dumps(document))
    else:
        show_comparison(runs.summaries, out)
    if out:
        written("comparison", out)
    for spec, line in runs.failed_items.items():
        print_error(f"model {spec}: {line}")
    for spec, reason in runs.failures.items():
        print_error(f"model {spec} failed: {reason}")
    if runs.failures:
        print_error(
            f"{len(runs.failures)} of {len(specs)} models failed"
            + (f"; the comparison holds the other {len(runs.summaries)}" if out else "; no comparison was written")
        )
        raise typer.Exit(2)
    if runs.failed_items:  # every model finished, some with failed items: the same command asks them again
        raise typer.Exit(FAILED_ITEMS)


def show_comparison(summaries: dict[str, Any], out: Path | None) -> None:
    """The comparison's headline columns (or each model's table when there is no comparison), each model's verdict,
    and where the files with everything else are."""
    from fairprobe.report.console import leaderboard_table, print_verdict
    from fairprobe.report.leaderboard import read_leaderboard, unranked_lines

    if out is None:
        for summary in summaries.values():
            show_summary(summary, False)
        return
    board = read_leaderboard(out) or {"sets": []}
    console.print(leaderboard_table(board, console.width))
    for line in unranked_lines(board):
        console.print(f"{line}: the order may be chance", style="yellow", markup=False, highlight=False, soft_wrap=True)
    for summary in summaries.values():
        print_verdict(summary, console)
    console.print(
        f"Every metric, the pairwise tests and each model's table: {out / 'leaderboard.md'}, {out / 'report.html'}",
        style="dim",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


@app.command("score")
def score_cmd(
    probes: Annotated[str, typer.Option(help="the probe set the replies answer, e.g. gender-income")],
    responses: Annotated[Path, typer.Option(help="JSONL: {id, response} or, for pairs, {id, original, flipped}")],
    data_dir: DataDirOpt = None,
    out: Annotated[Path | None, typer.Option(help="folder for summary.json and samples.jsonl")] = None,
    option: ProbeOptionOpt = None,
    model: Annotated[
        str, typer.Option(help="name of the system that wrote the replies (for the summary)")
    ] = "responses",
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the table")] = False,
) -> None:
    """Score replies produced elsewhere with the same detectors and summary, without loading a model."""
    from fairprobe.api.runs import score_replies
    from fairprobe.report.console import print_summary

    report = score_replies(probes, responses, out, data_dir, probe_options(option), model)
    for lineno, why in report.skipped:
        err_console.print(f"skipped {responses} line {lineno}: {why}", style="yellow", highlight=False, soft_wrap=True)
    if as_json:
        console.print_json(json.dumps(report.summary.to_json_obj()))
    else:
        print_summary(report.summary, console)
    err_console.print(
        f"scored {len(report.samples)} replies; {len(report.skipped)} malformed lines skipped; "
        f"{report.missing} probes without a reply",
        highlight=False,
        soft_wrap=True,
    )
    if out is not None:
        written("scored run", out)
