"""The `fairprobe` command: a thin typer layer over the Python API (errors are one line, no traceback)."""

from __future__ import annotations

import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from fairprobe import __version__
from fairprobe.errors import ConfigError, RunInterrupted, describe_failure
from fairprobe.redact import redact

app = typer.Typer(
    name="fairprobe",
    help="Disclose, measure and mitigate gender bias in LLMs (Dong et al. 2024 probes, fairness tests, Debias Tuning).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
probes_app = typer.Typer(help="List, show and build probe sets.", no_args_is_help=True)
app.add_typer(probes_app, name="probes")
cache_app = typer.Typer(help="Inspect or empty the shared cache of model and judge calls.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


class LazyConsole:
    """A rich Console made on first use, so `--help` and `version` never import rich's rendering."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._kwargs)
        return getattr(self._console, name)


class RedactingStream:
    """A text stream that writes to the current sys.stdout/sys.stderr with every secret redacted."""

    def __init__(self, stream: Callable[[], IO[str]]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        """Write the redacted text."""
        return self._stream().write(redact(text))

    def flush(self) -> None:
        """Flush the underlying stream."""
        self._stream().flush()

    def isatty(self) -> bool:
        """Whether the underlying stream is a terminal."""
        return self._stream().isatty()

    def fileno(self) -> int:
        """The underlying stream's file descriptor."""
        return self._stream().fileno()

    @property
    def encoding(self) -> str:
        """The underlying stream's encoding."""
        return getattr(self._stream(), "encoding", "utf-8") or "utf-8"


# User text (paths, prompts, model labels, messages) is printed as text: markup is off everywhere and
# styles are given as style=..., never as [tags]. Piped output (logs, CI) gets a wide table.
console = LazyConsole(
    file=RedactingStream(lambda: sys.stdout),
    width=None if sys.stdout.isatty() else 180,
    markup=False,
    emoji=False,
)
err_console = LazyConsole(file=RedactingStream(lambda: sys.stderr), markup=False, emoji=False)


def rich_table(**kwargs: Any) -> Any:
    """A rich Table (imported on use)."""
    from rich.table import Table

    return Table(**kwargs)


def written(what: str, folder: Path) -> None:
    """The last line of every command that writes a run: where it is and which report to open."""
    err_console.print(
        f"{what} written to {folder}; open {Path(folder) / 'report.html'} in a browser",
        style="green",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def split_csv(value: str | None) -> list[str] | None:
    """'a,b' -> ['a', 'b']; None stays None."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


def parse_options(pairs: list[str] | None) -> dict[str, str]:
    """-o key=value pairs for the probe families."""
    from fairprobe.io import parse_pairs

    return {k.replace("-", "_"): v for k, v in parse_pairs(pairs, "probe option").items()}


def parse_model_args(pairs: list[str] | None) -> dict[str, Any]:
    """-M key=value model args for any backend (values read as JSON when they are: 1, 0.5, true, "x")."""
    from fairprobe.io import parse_pairs, parse_value

    return {k: parse_value(v) for k, v in parse_pairs(pairs, "model arg (-M)").items()}


ModelArgsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model-arg",
        "-M",
        help="backend option KEY=VALUE, passed to the model loader (e.g. -M revision=main, -M timeout=30)",
    ),
]


ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="smollm2-135m-instruct, gemma-3-270m, hf:ID_OR_PATH or openai:MODEL")
]
# `run` takes several models: each runs into its own folder and a comparison folder follows.
ModelListOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model",
        "-m",
        help="smollm2-135m-instruct (default), gemma-3-270m, hf:ID_OR_PATH or openai:MODEL; repeat to compare models",
    ),
]
ModelsFileOpt = Annotated[
    Path | None, typer.Option("--models", help="file with one model spec a line: run and compare them all")
]
SortByOpt = Annotated[
    str | None, typer.Option("--sort-by", help="metric that orders a comparison's leaderboard (best first)")
]
RunOutOpt = Annotated[
    Path | None,
    typer.Option(help="run folder (default runs/MODEL/SUITE; rerun resumes); with several models their root"),
]
CacheOpt = Annotated[
    Path | None, typer.Option("--cache", help="cache database (default $FAIRPROBE_CACHE_DB or the user cache folder)")
]
LimitOpt = Annotated[
    int | None,
    typer.Option(min=1, help="N prompts of each set, a seeded draw stratified over its subsets (see --limit-order)"),
]
LimitOrderOpt = Annotated[
    str, typer.Option(help="how --limit picks prompts: stratified (default) or first (the first N in file order)")
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="the shared data root, e.g. ../shared/data, for every suite (else download, pinned + sha256)"
    ),
]


def limit_order_of(value: str) -> Any:
    """--limit-order checked: stratified or first."""
    if value not in ("stratified", "first"):
        raise ConfigError(f"--limit-order must be stratified or first, got {value!r}")
    return value


def run_options_from_flags(flags: dict[str, Any]) -> Any:
    """The RunOptions of `fairprobe run`'s flags (decoding flags become a GenerationConfig, lists are split)."""
    from fairprobe.families.paper import INSTRUCTION
    from fairprobe.models import GenerationConfig
    from fairprobe.runner import RunOptions

    decoding = {k: flags.pop(k) for k in ("max_new_tokens", "temperature", "top_p", "top_k")}
    instruction = flags.pop("instruction")
    flags["limit_order"] = limit_order_of(flags["limit_order"])
    return RunOptions(
        **{
            k: v for k, v in flags.items() if k not in ("probes", "words", "option", "model_arg", "no_cache", "as_json")
        },
        probes=split_csv(flags["probes"]),
        generation=GenerationConfig(**decoding, seed=flags["seed"]),
        instruction=INSTRUCTION if instruction == "paper" else instruction,
        words_file=flags["words"],
        probe_options=parse_options(flags["option"]),
        model_args=parse_model_args(flags["model_arg"]),
        use_cache=not flags["no_cache"],
    )


@app.command("run")
def run_cmd(
    suite: Annotated[str, typer.Option(help="suite to run: paper or fairness")] = "paper",
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
    max_new_tokens: Annotated[int, typer.Option(min=1, help="tokens to generate")] = 50,
    instruction: Annotated[
        str | None, typer.Option(help="prefix every prompt (instruction guiding); 'paper' = the paper's text")
    ] = None,
    words: Annotated[Path | None, typer.Option(help="attribute word lists (JSON) instead of the default")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="probe-set option key=value")] = None,
    batch_size: Annotated[int, typer.Option(min=1)] = 32,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16, float16")] = "auto",
    base_url: Annotated[
        str | None,
        typer.Option(help="openai: server URL(s), comma-separated for round-robin (default https://api.openai.com/v1)"),
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="parallel requests to an openai: server (default 8)")
    ] = None,
    implicit: Annotated[
        str,
        typer.Option(
            help="GLD/ADD over an openai: server: exact (score prompt tokens), topk (bounds from top logprobs), "
            "off; default: exact where the server can, else topk"
        ),
    ] = "auto",
    top_logprobs: Annotated[int, typer.Option(min=1, help="top logprobs to ask for with --implicit topk")] = 20,
    cache: CacheOpt = None,
    no_cache: Annotated[
        bool, typer.Option("--no-cache", help="ask the model again instead of reusing answers")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the table")] = False,
    model_arg: ModelArgsOpt = None,
) -> None:
    """Run a suite on a model: writes manifest.json, samples.jsonl and summary.json, prints the summary."""
    specs, options = run_plan(dict(locals()))
    if len(specs) > 1:
        return run_many(specs, options, sort_by, as_json)
    from fairprobe.progress import auto_progress
    from fairprobe.runner import run

    with auto_progress() as progress:
        summary = run(options, progress=progress)
    show_summary(summary, as_json)
    written("run", options.output_dir())


def run_plan(flags: dict[str, Any]) -> tuple[list[str], Any]:
    """The model specs of `run` and the RunOptions its flags give (for the first model)."""
    specs = run_specs(flags.pop("model"), flags.pop("models"))
    flags.pop("sort_by")
    return specs, run_options_from_flags({**flags, "model": specs[0]})


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


def run_many(specs: list[str], options: Any, sort_by: str | None, as_json: bool) -> None:
    """Run several models and print each summary, then where the comparison is."""
    from fairprobe.multimodel import run_models
    from fairprobe.progress import auto_progress

    with auto_progress() as progress:
        summaries, out = run_models(specs, options, sort_by, progress)
    if as_json:
        for summary in summaries.values():
            show_summary(summary, as_json)
        return written("comparison", out)
    from fairprobe.report.console import leaderboard_table
    from fairprobe.report.leaderboard import read_leaderboard
    from fairprobe.report.verdict import verdict

    console.print(leaderboard_table(read_leaderboard(out) or {"sets": []}, console.width))
    for summary in summaries.values():
        console.print(verdict(summary), markup=False, highlight=False, soft_wrap=True)
    console.print(
        f"Every metric, the pairwise tests and each model's table: {out / 'leaderboard.md'}, {out / 'report.html'}",
        style="dim",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    written("comparison", out)


@probes_app.command("list")
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


@probes_app.command("show")
def probes_show(
    name: Annotated[str, typer.Argument(help="probe set name (see `fairprobe probes list`)")],
    data_dir: DataDirOpt = None,
    fmt: Annotated[str, typer.Option("--format", help="jsonl, table or pairs")] = "jsonl",
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="probe-set option key=value")] = None,
    flip: Annotated[
        str | None, typer.Option(help="gender-income flip mode: consistent or vijil (= -o flip=...)")
    ] = None,
) -> None:
    """Print a probe set's prompts without loading a model (`--format pairs`: counterfactual pairs as Vijil's JSONL)."""
    from fairprobe.families import load_probe_set
    from fairprobe.families.gender_income.sets import PAIR_FIELDS

    if fmt not in ("jsonl", "table", "pairs"):
        raise ConfigError(f"--format must be jsonl, table or pairs, got {fmt!r}")
    options = parse_options(option)
    if flip is not None:
        options["flip"] = flip
    ps = load_probe_set(name, data_dir=data_dir, limit=limit, limit_order=limit_order_of(limit_order), **options)
    if fmt == "pairs":
        if ps.kind != "pairs":
            raise ConfigError(f"--format pairs needs a pair set such as gender-income, not {name!r}")
        for probe in ps.probes:
            sys.stdout.write(json.dumps({k: probe.meta[k] for k in PAIR_FIELDS}) + "\n")
        return
    if fmt == "jsonl":
        for probe in ps.probes:
            sys.stdout.write(json.dumps(probe.model_dump(mode="json"), ensure_ascii=False) + "\n")
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


@probes_app.command("build-natural")
def probes_build_natural(
    source: Annotated[Path, typer.Argument(help="raw STS-B sts-*.csv or SNLI .jsonl file")],
    out: Annotated[Path, typer.Option(help="predicate CSV to write (the paper's stsb_neutral_*.csv format)")],
    fmt: Annotated[str | None, typer.Option("--format", help="stsb or snli (default: snli for .jsonl)")] = None,
    reference: Annotated[Path | None, typer.Option(help="a predicate CSV to compare with (recall, precision)")] = None,
    words: Annotated[Path | None, typer.Option(help="attribute word lists (JSON) instead of the default")] = None,
) -> None:
    """Build a naturally-sourced set: one-person sentences rewritten as `My friend {predicate}` predicates."""
    from fairprobe.detectors.gendered_words import AttributeWords
    from fairprobe.families.paper.sets import read_predicates
    from fairprobe.probes.natural import build_natural, overlap, write_predicates

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


@probes_app.command("generate")
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
    from fairprobe.models import load_model
    from fairprobe.probes.generated import generate_statements
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


@cache_app.command("stats")
def cache_stats(cache: CacheOpt = None) -> None:
    """Show the cache's location, size and entries per kind and model."""
    from fairprobe.cache import Cache

    stats = Cache(cache).stats()
    console.print(f"{stats.path}: {stats.entries} entries, {stats.size_bytes / 1e6:.2f} MB", soft_wrap=True)
    if not stats.entries:
        return
    table = rich_table(header_style="bold cyan")
    table.add_column("kind")
    table.add_column("model")
    table.add_column("entries", justify="right")
    for kind, n in stats.by_kind.items():
        table.add_row(kind, "", str(n))
    for model, n in stats.by_model.items():
        table.add_row("", model, str(n))
    console.print(table)


@cache_app.command("clear")
def cache_clear(
    cache: CacheOpt = None,
    model: Annotated[str | None, typer.Option(help="only this model's entries (as `cache stats` lists it)")] = None,
) -> None:
    """Delete cached answers (all, or one model's): the next run asks the model again."""
    from fairprobe.cache import Cache

    store = Cache(cache)
    deleted = store.clear(model)
    console.print(f"deleted {deleted} entries from {store.path}", soft_wrap=True)


@app.command("score")
def score_cmd(
    probes: Annotated[str, typer.Option(help="the probe set the replies answer, e.g. gender-income")],
    responses: Annotated[Path, typer.Option(help="JSONL: {id, response} or, for pairs, {id, original, flipped}")],
    data_dir: DataDirOpt = None,
    out: Annotated[Path | None, typer.Option(help="folder for summary.json and samples.jsonl")] = None,
    option: Annotated[list[str] | None, typer.Option("--option", "-o", help="probe-set option key=value")] = None,
    model: Annotated[
        str, typer.Option(help="name of the system that wrote the replies (for the summary)")
    ] = "responses",
    as_json: Annotated[bool, typer.Option("--json", help="print summary.json instead of the table")] = False,
) -> None:
    """Score replies produced elsewhere with the same detectors and summary, without loading a model."""
    from fairprobe.report.console import print_summary
    from fairprobe.scoring import score_responses

    report = score_responses(
        probes, responses, data_dir=data_dir, out=out, probe_options=parse_options(option), model=model
    )
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


@app.command("report")
def report_cmd(
    run_dirs: Annotated[list[Path], typer.Argument(help="run folders (or folders holding compare.json)")],
    fmt: Annotated[str, typer.Option("--format", help="html, md or csv")] = "html",
    out: Annotated[
        Path | None, typer.Option(help="file (html, md) or folder (csv); html default RUN_DIR/report.html")
    ] = None,
    thresholds: Annotated[Path | None, typer.Option(help="severity thresholds JSON (see README)")] = None,
) -> None:
    """Report one or more runs: self-contained HTML (figures, summary, samples), or every table as Markdown/CSV."""
    from fairprobe.report.export import export

    text, written = export(run_dirs, fmt, out, thresholds)
    if text:
        sys.stdout.write(redact(text))
    for path in written:
        err_console.print(f"wrote {path}", style="green", highlight=False, soft_wrap=True)


@app.command("check")
def check_cmd(
    run_dir: Annotated[
        Path, typer.Argument(help="run folder with summary.json, or a many-models comparison (every model is checked)")
    ],
    maximum: Annotated[
        list[str] | None, typer.Option("--max", help="METRIC=VALUE: fail if the upper 95% bound exceeds it")
    ] = None,
    minimum: Annotated[
        list[str] | None, typer.Option("--min", help="METRIC=VALUE: fail if the lower 95% bound is below it")
    ] = None,
    abs_max: Annotated[
        list[str] | None,
        typer.Option("--abs-max", help="METRIC=VALUE: fail if either 95% bound lies beyond ±VALUE (signed metrics)"),
    ] = None,
    mark_max: Annotated[
        str | None, typer.Option("--mark-max", help="A-D: fail if any marked metric's interval allows a worse mark")
    ] = None,
    thresholds: Annotated[Path | None, typer.Option(help="severity thresholds JSON for --mark-max")] = None,
    set_names: Annotated[list[str] | None, typer.Option("--set", help="probe set to check (default: all)")] = None,
) -> None:
    """CI gate: exit 1 when a metric's 95% interval leaves a bound or allows a worse mark; fails closed on what it
    cannot judge (n/a, unavailable or too little data), one line per failure."""
    from fairprobe.report.check import Gate, check_runs, parse_bounds, parse_mark
    from fairprobe.report.leaderboard import comparison_runs
    from fairprobe.report.runs import load_summary
    from fairprobe.report.severity import load_thresholds

    gate = Gate(parse_bounds(maximum, minimum, abs_max), parse_mark(mark_max), load_thresholds(thresholds))
    folders = comparison_runs(run_dir)
    summaries = {"": load_summary(run_dir)} if folders is None else {}
    for folder in folders or []:
        summary = load_summary(folder)
        summaries[summary.model if summary.model not in summaries else str(folder)] = summary
    result = check_runs(summaries, gate, set_names)
    for line in [*result.failures, *result.notes]:
        console.print(line, highlight=False, soft_wrap=True)
    console.print(result.message(), highlight=False, soft_wrap=True)
    if not result.ok:
        raise typer.Exit(1)


@app.command("tune")
def tune_cmd(
    model: ModelOpt = "smollm2-135m-instruct",
    out: Annotated[Path, typer.Option(help="adapter folder (rerun resumes from its checkpoint)")] = Path(
        "adapters/debias"
    ),
    train: Annotated[
        Path | None, typer.Option(help="file of 'My friend' predicates (default: paper train set)")
    ] = None,
    dev: Annotated[Path | None, typer.Option(help="dev predicates (default: paper dev set)")] = None,
    data_dir: DataDirOpt = None,
    steps: Annotated[int, typer.Option(min=1)] = 500,
    rank: Annotated[int, typer.Option(min=1, help="LoRA rank")] = 64,
    alpha: Annotated[float, typer.Option(help="LoRA alpha")] = 16.0,
    dropout: Annotated[float, typer.Option(help="LoRA dropout")] = 0.1,
    lr: Annotated[float, typer.Option(help="learning rate")] = 2e-4,
    batch_size: Annotated[int, typer.Option(min=1)] = 16,
    max_length: Annotated[int, typer.Option(min=4)] = 512,
    warmup_steps: Annotated[int, typer.Option(min=0)] = 0,
    losses: Annotated[
        str | None,
        typer.Option(help="loss terms and weights: 'd,g,l' (default), 'g,l' (ablation), 'd,g,l,kl=0.5' (regularised)"),
    ] = None,
    kl_positions: Annotated[int, typer.Option(min=1, help="continuation positions the KL term covers")] = 8,
    dev_drift: Annotated[
        int, typer.Option(min=0, help="dev prompts whose continuations get drift numbers at each evaluation (0: none)")
    ] = 32,
    ablations: Annotated[
        bool, typer.Option("--ablations", help="train the paper's Table 3 variants and the KL variant into --out")
    ] = False,
    targets: Annotated[str, typer.Option(help="LoRA target modules, comma-separated")] = (
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    ),
    checkpoint_every: Annotated[int, typer.Option(min=1)] = 50,
    eval_every: Annotated[int, typer.Option(min=1, help="dev loss every N steps")] = 50,
    dev_limit: Annotated[int | None, typer.Option(min=1, help="first N dev predicates only")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    words: Annotated[Path | None, typer.Option(help="attribute word lists (JSON) instead of the default")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16, float16")] = "auto",
    quantize: Annotated[str, typer.Option(help="auto (4-bit QLoRA on CUDA with bitsandbytes), 4bit or none")] = "auto",
) -> None:
    """Debias Tuning: train a LoRA adapter with L_d + L_g + L_l (+ optional KL) on neutral 'My friend ..., and' prompts."""
    from fairprobe.mitigation.tuning import TuneOptions, tune, tune_ablations
    from fairprobe.progress import auto_progress

    if ablations and losses is not None:
        raise ConfigError(
            "--ablations trains its own loss variants (the paper's Table 3 and the KL term): drop --losses"
        )
    renamed = {"train_file": train, "dev_file": dev, "target_modules": split_csv(targets) or [], "words_file": words}
    given = {k: v for k, v in locals().items() if k in TuneOptions.model_fields and k != "losses"}
    options = TuneOptions(**given, **renamed, losses=losses or "d,g,l")
    with auto_progress() as progress:
        run = tune_ablations if ablations else lambda o, progress: {o.losses: tune(o, progress=progress)}
        manifests = run(options, progress=progress)
    for name, manifest in manifests.items():
        console.print(f"{name}: {tune_summary(manifest)}", highlight=False, markup=False)
    err_console.print(f"adapter{'s' if ablations else ''} written to {out}", style="green", highlight=False)


def tune_summary(manifest: dict[str, Any]) -> str:
    """One line of a finished adapter: dev loss, GLD, drift and perplexity before and after, time."""
    from fairprobe.mitigation.drift import format_drift

    first, last = manifest["dev_curve"][0], manifest["dev_curve"][-1]
    ppl = manifest["perplexity"]
    line = (
        f"dev loss {first['loss']:.4f} -> {last['loss']:.4f}, dev GLD {first['gld']:.3f} -> {last['gld']:.3f}, "
        f"perplexity {ppl['before']:.2f} -> {ppl['after']:.2f} ({ppl['relative_change']:+.1%}), "
        f"{manifest['train_seconds']:.0f} s; dev evaluated on {manifest['dev_evaluated']} predicates"
    )
    if "drift" in last:
        line += f"; dev drift after: {format_drift(last['drift'], last.get('drift_vs_start'))}"
    return line


def _run_options(**fields: Any) -> Any:
    """RunOptions of the paper suite from shared sweep/compare flags."""
    from fairprobe.models import GenerationConfig
    from fairprobe.runner import RunOptions

    max_new_tokens = fields.pop("max_new_tokens")
    return RunOptions(
        suite="paper",
        generation=GenerationConfig(max_new_tokens=max_new_tokens, seed=fields["seed"]),
        **fields,
    )


@app.command("sweep")
def sweep_cmd(
    probes: Annotated[str, typer.Option(help="comma-separated paper probe sets")] = "stsb,snli",
    model: ModelOpt = "smollm2-135m-instruct",
    adapter: Annotated[str | None, typer.Option(help="LoRA adapter folder to put on the model")] = None,
    data_dir: DataDirOpt = None,
    out: Annotated[Path, typer.Option(help="sweep folder (rerun resumes)")] = Path("runs/sweep"),
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    seeds: Annotated[int, typer.Option(min=1, help="sampling seeds per setting")] = 3,
    temperature: Annotated[str | None, typer.Option(help="temperature grid (default 0.3,0.5,0.7,1.0)")] = None,
    top_p: Annotated[str | None, typer.Option(help="top-p grid (default 0.3,0.5,0.7,1.0)")] = None,
    top_k: Annotated[str | None, typer.Option(help="top-k grid (default 10,50,100,150,200)")] = None,
    only: Annotated[str | None, typer.Option(help="sweep only these knobs, e.g. temperature,top_k")] = None,
    base_temperature: Annotated[float, typer.Option(help="temperature while top-p / top-k vary")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 50,
    batch_size: Annotated[int, typer.Option(min=1)] = 32,
    device: Annotated[str, typer.Option()] = "auto",
    dtype: Annotated[str, typer.Option()] = "auto",
    model_arg: ModelArgsOpt = None,
) -> None:
    """Decoding sweep (paper Section 5.1): GAS per temperature / top-p / top-k over seeds; lowest GAS is best."""
    from fairprobe.mitigation.sweep import PAPER_GRID, parse_values, sweep, sweep_markdown
    from fairprobe.progress import auto_progress

    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
    knobs = split_csv(only) or list(PAPER_GRID)
    grid = {}
    for knob in knobs:
        if knob.replace("-", "_") not in PAPER_GRID:
            raise ConfigError(f"unknown sweep parameter {knob!r} in --only: use temperature, top_p or top_k")
        knob = knob.replace("-", "_")
        grid[knob] = parse_values(knob, given[knob]) or list(PAPER_GRID[knob])
    options = _run_options(
        model_args=parse_model_args(model_arg),
        model=model,
        adapter=adapter,
        probes=split_csv(probes),
        data_dir=data_dir,
        limit=limit,
        limit_order=limit_order_of(limit_order),
        seed=0,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
    )
    with auto_progress() as progress:
        result = sweep(options, out, grid=grid, seeds=seeds, base_temperature=base_temperature, progress=progress)
    console.print(sweep_markdown(result), markup=False, highlight=False)
    err_console.print(f"sweep written to {out}/sweep.json and sweep.md", style="green", markup=False, highlight=False)
    written("greedy reference run", out / "greedy")


@app.command("compare")
def compare_cmd(
    probes: Annotated[str, typer.Option(help="comma-separated paper probe sets")] = "stsb,snli",
    model: ModelOpt = "smollm2-135m-instruct",
    adapter: Annotated[str | None, typer.Option(help="the Debias Tuning adapter folder")] = None,
    ablation: Annotated[
        list[str] | None, typer.Option(help="more adapters as NAME=PATH, e.g. 'w/o L_d=adapters/no-d' (repeatable)")
    ] = None,
    ablations: Annotated[
        Path | None, typer.Option(help="a `tune --ablations` folder: each of its adapters becomes a method")
    ] = None,
    hyper: Annotated[str, typer.Option(help="Hyperparameter method's decoding, e.g. temperature=0.3 ('' = skip)")] = (
        "temperature=0.3"
    ),
    sweep_file: Annotated[
        Path | None, typer.Option("--sweep", help="sweep.json: use its best setting (of the first set) as --hyper")
    ] = None,
    instruction: Annotated[
        str | None, typer.Option(help="instruction prefix (default: the paper's; '' = skip)")
    ] = None,
    data_dir: DataDirOpt = None,
    out: Annotated[Path, typer.Option(help="comparison folder (rerun resumes)")] = Path("runs/compare"),
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    seed: Annotated[int, typer.Option(help="sampling seed of the Hyperparameter method")] = 0,
    max_new_tokens: Annotated[int, typer.Option(min=1)] = 50,
    batch_size: Annotated[int, typer.Option(min=1)] = 32,
    device: Annotated[str, typer.Option()] = "auto",
    dtype: Annotated[str, typer.Option()] = "auto",
    model_arg: ModelArgsOpt = None,
) -> None:
    """Original vs Hyperparameter vs Instruction vs Debias Tuning: paper-style table with paired tests and drift."""
    from fairprobe.mitigation.compare import INSTRUCTION, compare, compare_markdown
    from fairprobe.progress import auto_progress

    hyper = best_sweep_setting(sweep_file) if sweep_file is not None else hyper
    options = _run_options(
        model_args=parse_model_args(model_arg),
        model=model,
        probes=split_csv(probes),
        data_dir=data_dir,
        limit=limit,
        limit_order=limit_order_of(limit_order),
        seed=seed,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
    )
    with auto_progress() as progress:
        result = compare(
            options,
            out,
            adapter=adapter,
            ablations=compare_adapters(ablation, ablations),
            hyper=hyper or None,
            instruction=INSTRUCTION if instruction is None else instruction,
            progress=progress,
        )
    console.print(compare_markdown(result, headline=True), markup=False, highlight=False, soft_wrap=True)
    written("comparison (compare.json, compare.md)", out)


def best_sweep_setting(sweep_file: Path) -> str:
    """The lowest-GAS setting of a sweep.json (of its first set), with a note when it does not beat greedy."""
    from fairprobe.io import read_text

    sets = json.loads(read_text(sweep_file, "sweep file")).get("sets", {})
    if not sets:
        raise ConfigError(f"sweep file {sweep_file} has no results")
    best = next(iter(sets.values()))["best"]
    if best.get("beats_greedy") is False:
        err_console.print(f"note: {best.get('verdict')}", style="yellow", markup=False, highlight=False)
    return str(best["setting"])


def compare_adapters(items: list[str] | None, folder: Path | None) -> dict[str, str]:
    """Method name -> adapter folder from repeated --ablation NAME=PATH and a `tune --ablations` folder."""
    from fairprobe.io import parse_pairs
    from fairprobe.mitigation.tuning import read_ablations

    out = read_ablations(folder) if folder is not None else {}
    for name, path in parse_pairs(items, "--ablation", "NAME=PATH", last=True).items():
        if name in out:
            raise ConfigError(f"method name {name!r} is taken by {folder}: name the --ablation otherwise")
        out[name] = path
    return out


@app.command("version")
def version_cmd() -> None:
    """Print fairprobe's version."""
    sys.stdout.write(__version__ + "\n")


def print_error(message: str) -> None:
    """One line on stderr: 'error: ' and the message as plain text (never markup), secrets redacted."""
    from rich.text import Text

    text = Text("error: ", style="bold red")
    text.append(" ".join(redact(message).split()))
    err_console.print(text, highlight=False, soft_wrap=True)


def print_warning(message: Warning | str, *_args: Any, **_kwargs: Any) -> None:
    """A warning (e.g. a cache that cannot be written) as one plain line on stderr."""
    from rich.text import Text

    text = Text("warning: ", style="yellow")
    text.append(" ".join(redact(str(message)).split()))
    err_console.print(text, highlight=False, soft_wrap=True)


def _usage_message(exc: typer.TyperException) -> str:
    """A typer usage error (unknown option, bad value, missing argument) as one line naming where to get help."""
    ctx = getattr(exc, "ctx", None)
    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return f"{message}{where}"


def main() -> None:
    """Entry point, the one handler of failures: each ends in one line on stderr and exit 2 (130 on Ctrl-C).

    $FAIRPROBE_DEBUG=1 shows the traceback instead.
    """
    warnings.showwarning = print_warning
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and ctx is not None:  # `fairprobe probes`: show its help
            sys.stdout.write(ctx.get_help() + "\n")
            code = 0
        else:
            print_error(_usage_message(exc))
            code = 2
    except (RunInterrupted, KeyboardInterrupt, typer.Abort) as exc:
        err_console.print(
            str(exc) if isinstance(exc, RunInterrupted) else "interrupted", style="yellow", soft_wrap=True
        )
        code = 130
    except BrokenPipeError:  # `fairprobe ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    except Exception as exc:
        if os.environ.get("FAIRPROBE_DEBUG"):
            raise
        message = describe_failure(exc)
        if message is None:
            message = (
                f"internal error, please report it: {type(exc).__name__}: {exc} (FAIRPROBE_DEBUG=1 shows the traceback)"
            )
        print_error(message)
        code = 2
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
