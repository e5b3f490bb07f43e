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
    run_dir: Annotated[Path, typer.Argument(help="run folder with summary.json")],
    maximum: Annotated[list[str], typer.Option("--max", help="METRIC=VALUE: fail if the upper 95% bound exceeds it")],
    set_names: Annotated[list[str] | None, typer.Option("--set", help="probe set to check (default: all)")] = None,
) -> None:
    """CI gate: exit 1 when a metric's upper 95% bound exceeds its --max, with one line per failure."""
    from fairprobe.report.check import check_summary, parse_limits
    from fairprobe.report.runs import load_summary

    limits = parse_limits(maximum)
    result = check_summary(load_summary(run_dir), limits, set_names)
    for line in result.failures:
        console.print(line, highlight=False, soft_wrap=True)
    console.print(result.message(), highlight=False, soft_wrap=True)
    if not result.ok:
        raise typer.Exit(1)
