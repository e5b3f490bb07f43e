"""`fairprobe probes ...`: list, show and build probe sets."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from fairprobe.cli.common import (
    DataDirOpt,
    LimitOpt,
    LimitOrderOpt,
    ModelOpt,
    ProbeOptionOpt,
    console,
    err_console,
    probe_options,
    rich_table,
)
from fairprobe.errors import ConfigError
from fairprobe.terminal import escape_json_controls

app = typer.Typer(help="List, show and build probe sets.", no_args_is_help=True)


@app.command("list")
def probes_list() -> None:
    """List every probe set with its suite and whether it works offline."""
    from fairprobe.catalog import PROBE_SETS, load_families

    load_families()
    table = rich_table(header_style="bold cyan")
    for col in ("name", "suite", "offline", "description"):
        table.add_column(col)
    for entry in sorted((e for _, e in PROBE_SETS.items()), key=lambda e: (e.suite, e.rank)):
        table.add_row(entry.name, entry.suite, "yes" if entry.offline else "download or --data-dir", entry.description)
    console.print(table)


@app.command("show")
def probes_show(
    name: Annotated[str, typer.Argument(help="probe set name (see `fairprobe probes list`)")],
    data_dir: DataDirOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="jsonl, table or pairs")] = "jsonl",
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    option: ProbeOptionOpt = None,
    flip: Annotated[
        str | None, typer.Option(help="gender-income flip mode: consistent or vijil (= -o flip=...)")
    ] = None,
) -> None:
    """Print a probe set's prompts without loading a model (`--format pairs`: counterfactual pairs as Vijil's JSONL)."""
    from fairprobe.families import load_probe_set
    from fairprobe.options import fold

    if fmt not in ("jsonl", "table", "pairs"):
        raise ConfigError(f"--format must be jsonl, table or pairs, got {fmt!r}")
    options = probe_options(option)
    if flip is not None:
        fold(options, "flip", flip, "--flip", "-o")
    ps = load_probe_set(name, data_dir=data_dir, limit=limit, limit_order=limit_order, **options)
    if fmt == "pairs":
        if not ps.pair_fields:
            raise ConfigError(f"--format pairs needs a pair set such as gender-income, not {name!r}")
        for probe in ps.probes:
            sys.stdout.write(escape_json_controls(json.dumps({k: probe.meta[k] for k in ps.pair_fields})) + "\n")
        return
    if fmt == "jsonl":
        from fairprobe.scoring import probes_with_requests

        for line in probes_with_requests(ps, options):
            sys.stdout.write(escape_json_controls(json.dumps(line, ensure_ascii=False)) + "\n")
        return
    table = rich_table(title=f"{ps.name} ({len(ps.probes)} prompts, {ps.source})", header_style="bold cyan")
    table.add_column("id", justify="right")
    table.add_column("prompt")
    table.add_column("subsets")
    for probe in ps.probes:
        table.add_row(probe.id, probe.prompt, ", ".join(probe.subsets))
    console.print(table)


def _check_output_file(out: Path) -> None:
    """An output path must not be a folder."""
    if out.is_dir():
        raise ConfigError(f"--out must be a file, but {out} is a folder")


@app.command("build-natural")
def probes_build_natural(
    source: Annotated[Path, typer.Argument(help="raw STS-B sts-*.csv or SNLI .jsonl file")],
    out: Annotated[Path, typer.Option(help="predicate CSV to write (the paper's stsb_neutral_*.csv format)")],
    fmt: Annotated[str | None, typer.Option("--format", help="stsb or snli (default: snli for .jsonl)")] = None,
    reference: Annotated[Path | None, typer.Option(help="a predicate CSV to compare with (recall, precision)")] = None,
    words: Annotated[Path | None, typer.Option(help="attribute word lists (JSON) instead of the default")] = None,
) -> None:
    """Build a naturally-sourced set: one-person sentences rewritten as `My friend {predicate}` predicates."""
    from fairprobe.families.paper.build_natural import build_natural, overlap, write_predicates
    from fairprobe.families.paper.sets import read_predicates
    from fairprobe.families.paper.words import AttributeWords

    _check_output_file(out)
    fmt = fmt or ("snli" if source.suffix == ".jsonl" else "stsb")
    result = build_natural(source, fmt, AttributeWords.from_file(words) if words else None)
    write_predicates(out, result.predicates)
    console.print(f"kept {len(result.predicates)} predicates of {result.sentences} sentences -> {out}", soft_wrap=True)
    if reference is not None:
        ref = read_predicates(reference)
        recall, precision = overlap(result.predicates, ref)
        console.print(
            f"vs {reference} ({len(ref)} lines): recall {recall:.2%} (reference lines produced), "
            f"precision {precision:.2%} (produced lines in the reference)",
            soft_wrap=True,
        )


@app.command("generate")
def probes_generate(
    out: Annotated[Path, typer.Option(help="text file to write: one statement a line (templates_200.txt format)")],
    seed_sentence: Annotated[str, typer.Option(help="first statement and example")] = "My friend enjoys playing chess",
    n: Annotated[int, typer.Option("-n", "--n", min=1, help="statements to collect")] = 200,
    model: ModelOpt = "smollm2-135m-instruct",
    max_rounds: Annotated[int, typer.Option(min=1, help="stop after this many rounds of requests")] = 20,
    similarity: Annotated[float, typer.Option(help="near-duplicate threshold (token-set Jaccard)")] = 0.8,
    temperature: Annotated[float, typer.Option(help="sampling temperature (> 0)")] = 0.9,
    seed: Annotated[int, typer.Option(help="sampling seed")] = 0,
    batch_size: Annotated[int, typer.Option(min=1, help="requests per round")] = 8,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16, float16")] = "auto",
) -> None:
    """Build an LLM-generated set: ask a model for neutral `My friend ...` statements, drop (near-)duplicates."""
    from fairprobe.families.paper.build_generated import generate_statements
    from fairprobe.models import load_model
    from fairprobe.progress import auto_progress

    _check_output_file(out)
    with auto_progress() as progress:
        progress.note(f"loading model {model}")
        backend = load_model(model, device=device, dtype=dtype, batch_size=batch_size)
        report = generate_statements(
            backend,
            n,
            seed_sentence=seed_sentence,
            max_rounds=max_rounds,
            similarity=similarity,
            batch_size=batch_size,
            temperature=temperature,
            seed=seed,
            out=out,
            progress=progress,
        )
    kept = len(report.statements)
    console.print(
        f"kept {kept} statements in {report.rounds} rounds -> {out} ({report.lines} reply lines: "
        f"{report.invalid} malformed or gendered, {report.duplicates} duplicates, "
        f"{report.near_duplicates} near-duplicates)",
        soft_wrap=True,
    )
    if kept < n:
        err_console.print(f"only {kept} of {n}: raise --max-rounds or --temperature", style="yellow")
