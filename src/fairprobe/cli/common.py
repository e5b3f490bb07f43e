"""What every command group shares: the consoles (secrets redacted, control characters escaped, markup off),
option types, small helpers."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from fairprobe.records import LimitOrder
from fairprobe.redact import redact
from fairprobe.terminal import RedactingStream, safe_console


class LazyConsole:
    """A safe rich Console (fairprobe.terminal) made on first use, so `--help` and `version` never import rich."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._console: Any = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = safe_console(**self._kwargs)
        return getattr(self._console, name)


# User text (paths, prompts, model labels, messages) is printed as text: markup is off everywhere and
# styles are given as style=..., never as [tags]; control characters are escaped and secrets redacted in
# everything printed (fairprobe.terminal). Piped output (logs, CI) gets a wide table.
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


def split_csv(value: str | None) -> list[str] | None:
    """'a,b' -> ['a', 'b']; None stays None."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    return items or None


ModelArgsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--model-arg",
        "-M",
        help="backend option KEY=VALUE, passed to the model loader (e.g. -M revision=main, -M timeout=30)",
    ),
]


ProbeOptionOpt = Annotated[list[str] | None, typer.Option("--option", "-o", help="probe-set option key=value")]


def probe_options(pairs: list[str] | None) -> dict[str, Any]:
    """`-o` pairs as the API's `options` (what `run`, `score`, `compare`, `sweep` and `probes show` take): key=value,
    dashes in keys read as underscores, values left as text for each family's options type to read."""
    from fairprobe.options import parse_pairs_typed

    return parse_pairs_typed(pairs, "probe option", values=False)


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
DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir", help="the shared data root, e.g. ../shared/data, for every suite (else download, pinned + sha256)"
    ),
]

LimitOpt = Annotated[
    int | None,
    typer.Option(min=1, help="N prompts of each set, a seeded draw stratified over its subsets (see --limit-order)"),
]
LimitOrderOpt = Annotated[
    LimitOrder,
    typer.Option(help="how --limit picks prompts: stratified over each set's subsets, or the first N in file order"),
]
MaxNewTokensOpt = Annotated[int, typer.Option(min=1, help="tokens to generate")]
BatchSizeOpt = Annotated[int, typer.Option(min=1, help="prompts per batch (a batch is saved whole)")]
DeviceOpt = Annotated[str | None, typer.Option(help="auto, cpu, cuda, cuda:1 ... (= -M device=...)")]
DtypeOpt = Annotated[str | None, typer.Option(help="auto, float32, bfloat16, float16 (= -M dtype=...)")]
