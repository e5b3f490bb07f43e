"""The `fairprobe` command: a thin typer layer over the Python API (errors are one line, no traceback).

One module per command group (run.py: run and score; probes.py; cache.py; report.py: report and check;
mitigation.py: tune, sweep, compare); the logic they call lives in the layers below.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

import typer

from fairprobe import __version__
from fairprobe.cli import cache, mitigation, probes, report, run
from fairprobe.cli.common import err_console
from fairprobe.errors import RunInterrupted, describe_failure
from fairprobe.redact import redact

app = typer.Typer(
    name="fairprobe",
    help="Disclose, measure and mitigate gender bias in LLMs (Dong et al. 2024 probes, fairness tests, Debias Tuning).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for _group in (run, report, mitigation):
    app.registered_commands += _group.app.registered_commands
app.add_typer(probes.app, name="probes")
app.add_typer(cache.app, name="cache")


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
