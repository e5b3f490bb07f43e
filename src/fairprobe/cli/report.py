"""`fairprobe report` and `fairprobe check`: read run folders back."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fairprobe.cli.common import console, err_console
from fairprobe.redact import redact

app = typer.Typer()


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
    from fairprobe.report.check import Gate, check_folder, parse_bounds, parse_mark
    from fairprobe.report.severity import load_thresholds

    gate = Gate(parse_bounds(maximum, minimum, abs_max), parse_mark(mark_max), load_thresholds(thresholds))
    result = check_folder(run_dir, gate, set_names)
    for line in [*result.failures, *result.notes]:
        console.print(line, highlight=False, soft_wrap=True)
    console.print(result.message(), highlight=False, soft_wrap=True)
    if not result.ok:
        raise typer.Exit(1)
