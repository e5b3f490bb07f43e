"""Every failure a user can cause ends in one plain line on stderr and exit 2, from the CLI's one handler."""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fairprobe import cli
from fairprobe.errors import describe_failure


def fairprobe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI's entry point in this process: (exit code, stdout, stderr)."""
    old = sys.argv
    sys.argv = ["fairprobe", *args]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    finally:
        sys.argv = old
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, err: str) -> str:
    """The error line, after checking exit 2, a single line and no traceback."""
    lines = [line for line in err.split("\n") if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in lines if "error" in line.lower()]
    assert errors == lines[-1:], err  # progress notes may come first; the error is the one last line
    assert lines[-1].startswith("error: "), err
    assert not lines[-1].startswith("error: internal error"), err
    return lines[-1]


@pytest.fixture
def run_folder(tmp_path: Path) -> Path:
    """A finished-looking run folder (hand-made summary) for report and check."""
    folder = tmp_path / "run"
    folder.mkdir()
    summary = {
        "fairprobe_version": "0.1.0",
        "model": "m",
        "results": {"template": {"n": 10, "source": "s", "metrics": {"gas": {"value": 0.5, "ci95": [0.2, 0.8]}}}},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    (folder / "manifest.json").write_text(json.dumps({"fingerprint": "x", "suite": "paper"}))
    (folder / "samples.jsonl").write_text("")
    return folder


def test_usage_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    line = one_error_line(*fairprobe(capsys, "run", "--bogus")[::2])
    assert "No such option: --bogus" in line and "fairprobe run --help" in line
    line = one_error_line(*fairprobe(capsys, "run", "--limit", "many")[::2])
    assert "--limit" in line
    line = one_error_line(*fairprobe(capsys, "run", "--batch-size", "0")[::2])
    assert "--batch-size" in line
    code, out, _ = fairprobe(capsys, "probes")  # a group without a command shows its help
    assert code == 0 and "Usage" in out


def test_user_text_with_square_brackets_is_printed_as_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = one_error_line(*fairprobe(capsys, "probes", "show", "file:[/x]/p.txt")[::2])
    assert line == "error: probe file not found: [/x]/p.txt"
    weird = tmp_path / "[bold]r[/bold].jsonl"
    line = one_error_line(*fairprobe(capsys, "score", "--probes", "professional-bias", "--responses", str(weird))[::2])
    assert line == f"error: responses file not found: {weird}"


def test_a_model_label_with_markup_prints_as_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "0", "response": "The nurse [/x]."}\n')
    code, out, err = fairprobe(
        capsys,
        "score",
        "--probes",
        "professional-bias",
        "--responses",
        str(responses),
        "--model",
        "[red]m[/x]",
        "--json",
    )
    assert code == 0, err
    assert json.loads(out)["model"] == "[red]m[/x]"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["run", "--probes", "template", "-o", "foo=bar"],
            "unknown template option 'foo': use instruction, words, implicit",
        ),
        (["run", "--probes", "template", "--words", "{dir}"], "attribute word file is a folder"),
        (["run", "--probes", "template", "--words", "{binary}"], "attribute word file"),
        (
            ["run", "--probes", "template", "--model", "openai:x", "--base-url", "http://127.0.0.1:99999/v1"],
            "port 99999",
        ),
        (
            ["run", "--probes", "template", "--model", "openai:x", "--base-url", "http://[::1:8000/v1"],
            "not a valid URL",
        ),
        (
            ["run", "--model", "openai:x", "--base-url", "http://127.0.0.1:1/v1", "-M", "retry=3"],
            "the openai backend takes no -M key 'retry': it takes base_url, api_key, concurrency, timeout, top_logprobs, implicit",
        ),
        (
            ["run", "--model", "openai:x", "-M", "timeout=-1"],
            "-M timeout=-1 for the openai backend: Input should be greater",
        ),
        (
            ["run", "--model", "openai:x", "-M", "timeout=NaN"],
            "-M timeout=nan for the openai backend: Input should be a finite",
        ),
        (["run", "-M", "device=cpu", "--device", "cuda"], "--device and -M device='cpu' disagree: give one of them"),
        (["run", "-M", "dtype=float8"], "-M dtype='float8' for the local backend: Input should be 'auto'"),
        (["run", "--probes", "template", "--out", "{manifest_list}"], "not a fairprobe manifest"),
        (["report", "{manifest_list}"], "manifest.json"),
        (["run", "--probes", "template", "--out", "/proc/fairprobe-run"], "/proc/fairprobe-run"),
    ],
)
def test_bad_inputs_are_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, run_folder: Path, args: list[str], expected: str
) -> None:
    binary = tmp_path / "words.bin"
    binary.write_bytes(b"\x00\xff\xfe\x80" * 100)
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "manifest.json").write_text("[]")
    (listed / "summary.json").write_text((run_folder / "summary.json").read_text())
    names = {"dir": str(tmp_path), "binary": str(binary), "manifest_list": str(listed)}
    args = [a.format(**names) for a in args]
    if args[0] == "run" and "--out" not in args:
        args += ["--out", str(tmp_path / "out")]
    line = one_error_line(*fairprobe(capsys, *args)[::2])
    assert expected in line


def test_report_to_an_unwritable_place_is_one_line(capsys: pytest.CaptureFixture[str], run_folder: Path) -> None:
    line = one_error_line(*fairprobe(capsys, "report", str(run_folder), "--out", "/proc/fairprobe-report.html")[::2])
    assert "/proc" in line


def test_a_fifo_is_refused_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    timer = threading.Timer(20, lambda: os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # unblocks a hung reader
    timer.start()
    try:
        for args in (
            ["score", "--probes", "professional-bias", "--responses", str(fifo)],
            ["run", "--probes", f"file:{fifo}", "--out", str(tmp_path / "o")],
            ["run", "--probes", "template", "--words", str(fifo), "--out", str(tmp_path / "o2")],
        ):
            line = one_error_line(*fairprobe(capsys, *args)[::2])
            assert "not a regular file" in line and str(fifo) in line
    finally:
        timer.cancel()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device", "/data/run/samples.jsonl"),
            "No space left on device: /data/run/samples.jsonl (free some space",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/summary.json"),
            "Read-only file system: /ro/summary.json (choose a writable",
        ),
        (
            sqlite3.DatabaseError("database disk image is malformed"),
            "cache database error: database disk image is malformed",
        ),
        (MemoryError(), "out of memory"),
    ],
)
def test_os_sqlite_and_memory_errors_become_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, exc: BaseException, expected: str
) -> None:
    assert expected in (describe_failure(exc) or "")

    def fail(*args: object, **kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(cli, "app", fail)
    line = one_error_line(*fairprobe(capsys, "version")[::2])
    assert expected in line


def test_torch_errors_become_one_line() -> None:
    import torch

    try:
        torch.nn.Linear(3, 4)(torch.zeros(2, 5))  # a shape error raised inside torch
    except RuntimeError as exc:
        message = describe_failure(exc)
    assert message is not None and message.startswith("torch error: ")
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    assert describe_failure(oom).startswith("torch error: CUDA out of memory")


def test_an_unknown_device_is_one_line() -> None:
    from fairprobe.errors import ModelError
    from fairprobe.models.hf import resolve_device

    with pytest.raises(ModelError, match="unknown --device 'quantum'"):
        resolve_device("quantum")
    assert resolve_device("cpu") == "cpu"


def test_a_device_this_machine_lacks_is_refused_before_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 32: a bad --device was refused only after the embedded model was converted and loaded (50 s).
    import torch

    from fairprobe.errors import ConfigError, ModelError
    from fairprobe.models import embedded, load_model

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was converted before its device was checked")

    monkeypatch.setattr(embedded, "converted_folder", never)
    monkeypatch.setattr(embedded, "find_gguf", never)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ModelError, match=r"^--device cuda:3: torch sees no CUDA device on this machine"):
        load_model("smollm2-135m-instruct", device="cuda:3")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ModelError, match=r"^--device cuda:3: this machine has 2 CUDA device\(s\), cuda:0 to cuda:1$"):
        load_model("smollm2-135m-instruct", device="cuda:3")
    with pytest.raises(
        ConfigError, match=r"^-M device='gpu' for the local backend: .*use auto, cpu, cuda, cuda:N or mps"
    ):
        load_model("smollm2-135m-instruct", device="gpu")


def test_http_errors_become_one_line() -> None:
    import httpx

    assert describe_failure(httpx.InvalidURL("Invalid port: ':1:8000'")) == "HTTP error: Invalid port: ':1:8000'"


def test_summary_tables_print_labels_as_text_and_colours_as_styles() -> None:
    import io

    from rich.console import Console

    from fairprobe.records import MetricValue, SetResult, Summary
    from fairprobe.report.console import print_summary

    summary = Summary(
        fairprobe_version="0.1.0",
        model="[bold]m[/x] {'pairs': [, ...]}",
        results={
            "file:[/x]/p.txt": SetResult(n=3, source="s", metrics={"gas": MetricValue(value=0.5, ci95=(0.2, 0.8))})
        },
    )
    buffer = io.StringIO()
    print_summary(summary, Console(file=buffer, width=200, markup=False))
    text = " ".join(buffer.getvalue().split())  # the title may wrap
    assert "[bold]m[/x] {'pairs': [, ...]}" in text and "file:[/x]/p.txt" in text
    assert "0.500 [0.20, 0.80]" in text and "[red]" not in text


# A fresh interpreter runs the CLI, then says which libraries the command loaded before it stopped.
LOADED = """
import sys
sys.argv = ["fairprobe", *sys.argv[1:]]
from fairprobe.cli import main
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code
sys.stderr.write("LOADED:" + ",".join(m for m in ("torch", "transformers", "scipy", "matplotlib") if m in sys.modules))
sys.exit(code)
"""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--probes", "no-such-set"], "error: unknown probe set 'no-such-set'"),
        (["tune", "--lr", "inf"], "error: lr: Input should be a finite number"),
        (["tune", "--model", "openai:x", "--losses", "d,g,l,kl=0.5"], "error: the KL term needs the base model"),
        (["compare", "--adapter", "UNFINISHED"], "error: adapter folder "),
    ],
)
def test_a_refused_command_loads_no_model_metric_or_figure_library(tmp_path: Path, args: list[str], message: str):
    """A typo is answered in well under a second: the refusal comes before torch, transformers, scipy or
    matplotlib is imported (each costs from a third of a second to seconds)."""
    (tmp_path / "unfinished" / "checkpoint").mkdir(parents=True)
    (tmp_path / "unfinished" / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    argv = [str(tmp_path / "unfinished") if a == "UNFINISHED" else a for a in args]
    proc = subprocess.run(
        [sys.executable, "-c", LOADED, *argv, "--out", str(tmp_path / "never")], capture_output=True, text=True
    )
    error, loaded = proc.stderr.rsplit("LOADED:", 1)
    assert proc.returncode == 2 and error.strip().startswith(message), proc.stderr
    assert loaded == ""
    assert not (tmp_path / "never").exists()
