"""Outside text (server bodies, file contents, model output) never acts on a terminal or a spreadsheet."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from fairprobe.records import MetricValue
from fairprobe.redact import escape_controls, escape_json_controls, shorten
from fairprobe.report.tables import Table, inert_cell, to_csv
from fairprobe.terminal import safe_console
from openai_servers import CANNED_TOP, canned_text, completion_json, prompt_text, serve

# Clear screen, set the window title (OSC 0), write the clipboard (OSC 52), an 8-bit CSI, a right-to-left override,
# a carriage return that would overwrite the line, a bell.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x9b31m\u202eevil\rover\x07"
RAW_CONTROLS = ["\x1b", "\x07", "\x9b", "\u202e", "\r"]


def raw_controls(text: str) -> list[str]:
    """The hostile control characters present, unescaped, in a text."""
    return [c for c in RAW_CONTROLS if c in text]


def hostile_answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
    """Refuses nurse prompts and the echo probe with a raw (non-JSON) body full of escapes; other continuations
    carry them too."""
    if "nurse" in prompt_text(body) or body.get("echo"):
        return 400, ("bad request " + HOSTILE).encode(), {"Content-Type": "text/plain"}
    text = canned_text(prompt_text(body)) + HOSTILE
    return 200, json.dumps(completion_json(body, text, CANNED_TOP)).encode(), {}


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fairprobe.cli", *args], capture_output=True, text=True, env=env, timeout=180
    )


def test_escape_sequences_from_a_server_and_a_file_reach_the_console_escaped(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPROBE_CACHE_DB": str(tmp_path / "calls.sqlite")}
    out = tmp_path / "run"
    with serve(hostile_answer) as (url, _):
        args = [
            "run",
            "-m",
            "openai:t",
            "--base-url",
            url,
            "--probes",
            "template",
            "--limit",
            "12",
            "--limit-order",
            "first",
        ]
        done = _cli([*args, "--out", str(out)], env)
    assert done.returncode == 3, done.stderr  # the refused prompt is a failed item (exit 3)
    assert not raw_controls(done.stdout + done.stderr), done.stderr
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    # The server's words are kept, as text: its refusal of the nurse prompt names the escapes it sent.
    escaped = "bad request \\x1b[2J\\x1b]0;pwned\\x07\\x1b]52;c;cHduZWQ=\\x07\\x9b31m\\u202eevil"
    assert [s["prompt"] for s in samples if escaped in s.get("error", "")] == ["My friend is a nurse, and"]
    assert any(HOSTILE in s["continuation"] for s in samples)  # model output is stored as it came (JSON-escaped)
    report = _cli(["report", str(out), "--format", "md"], env)
    assert report.returncode == 0 and not raw_controls(report.stdout + report.stderr)

    probes = tmp_path / "hostile.txt"
    probes.write_text(f"My friend {HOSTILE}\nMy friend is kind\n", encoding="utf-8")
    table = _cli(["probes", "show", f"file:{probes}", "--format", "table"], env)
    assert table.returncode == 0 and not raw_controls(table.stdout + table.stderr)
    lines = _cli(["probes", "show", f"file:{probes}"], env)
    assert lines.returncode == 0 and not raw_controls(lines.stdout)
    assert json.loads(lines.stdout.splitlines()[0])["prompt"] == f"My friend {HOSTILE}, and"  # same text, escaped


def test_a_terminal_console_keeps_its_styles_and_escapes_the_text() -> None:
    from rich.table import Table as RichTable

    buffer = io.StringIO()
    console = safe_console(file=buffer, force_terminal=True, color_system="standard", width=100)
    table = RichTable(header_style="bold cyan")
    table.add_column("model")
    table.add_row(f"openai:{HOSTILE}")
    console.print(table)
    console.print(f"note {HOSTILE}", style="yellow", highlight=False)
    shown = buffer.getvalue()
    assert "\x1b[1;36m" in shown  # rich's own styling still reaches the terminal
    for sequence in ("\x1b[2J", "\x1b]0;", "\x1b]52;", "\x07", "\x9b", "\u202e"):
        assert sequence not in shown
    assert "\\x1b]52;c;cHduZWQ=" in shown  # shown as text (rich itself drops the bell and carriage return)


def test_escaping_keeps_text_and_json_readable() -> None:
    assert escape_controls("tab\tand\nnewline stay") == "tab\tand\nnewline stay"
    assert escape_controls("a\x1b[31mb\x00c\x7f\u2066") == "a\\x1b[31mb\\x00c\\x7f\\u2066"
    assert escape_controls(escape_controls(HOSTILE)) == escape_controls(HOSTILE)  # escaping twice changes nothing
    text = json.dumps({"p": HOSTILE}, ensure_ascii=False)
    assert json.loads(escape_json_controls(text)) == {"p": HOSTILE} and not raw_controls(escape_json_controls(text))
    assert shorten("x" * 10 + HOSTILE, 200).startswith("xxxxxxxxxx\\x1b[2J")


def test_csv_cells_a_spreadsheet_would_run_are_neutralised() -> None:
    assert inert_cell('=HYPERLINK("http://x")') == '\'=HYPERLINK("http://x")'
    assert [inert_cell(c) for c in ("@SUM(A1)", "+cmd|' /C calc'!A0", "-2+3", "\tx", "\r=1")] == [
        "'@SUM(A1)",
        "'+cmd|' /C calc'!A0",
        "'-2+3",
        "'\tx",
        "'\r=1",
    ]
    # Numbers, negative ones and those written as text, stay numbers; ordinary text is untouched.
    assert [inert_cell(c) for c in (-0.25, "-0.25", "+5%", "1e-3", "openai:m", None)] == [
        -0.25,
        "-0.25",
        "+5%",
        "1e-3",
        "openai:m",
        "",
    ]
    table = Table("t", "t", ["model", "gas"], [["=1+1", MetricValue(value=-0.5, ci95=(-0.7, -0.3))]], "")
    rows = list(csv.reader(io.StringIO(to_csv(table))))
    assert rows[1] == ["'=1+1", "-0.5", "-0.7", "-0.3"]
