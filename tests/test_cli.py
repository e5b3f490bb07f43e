"""The `fairprobe` command on bad input (one line on stderr, non-zero exit, no traceback) and Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import interruptible, paper_data_dir
from fairprobe.families import load_probe_set


def fairprobe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run `python -m fairprobe ARGS` and capture its output."""
    return subprocess.run(
        [sys.executable, "-m", "fairprobe", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "200"},
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Non-zero exit, one error line on stderr that names the problem (after any status notes), no traceback."""
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def paper_dir(tmp_path: Path, stsb: str) -> Path:
    """A data folder whose stsb_neutral_test.csv has the given content."""
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "stsb_neutral_test.csv").write_text(stsb, encoding="utf-8")
    return folder


def test_bad_data_input(tmp_path: Path) -> None:
    missing_dir = tmp_path / "nowhere"
    assert_one_line_error(
        fairprobe("run", "--probes", "stsb", "--data-dir", str(missing_dir), cwd=tmp_path),
        "data folder not found",
        str(missing_dir),
    )
    empty_dir = tmp_path / "empty_dir"
    empty_dir.mkdir()
    assert_one_line_error(
        fairprobe("run", "--probes", "stsb", "--data-dir", str(empty_dir), cwd=tmp_path),
        "stsb_neutral_test.csv not found",
        str(empty_dir),
    )
    data = paper_dir(tmp_path, "")
    assert_one_line_error(
        fairprobe("run", "--probes", "stsb", "--data-dir", str(data), cwd=tmp_path),
        "empty",
        str(data / "stsb_neutral_test.csv"),
    )
    (data / "stsb_neutral_test.csv").write_text("is reading a book\nis a cook,is tall\n", encoding="utf-8")
    assert_one_line_error(
        fairprobe("probes", "show", "stsb", "--data-dir", str(data), cwd=tmp_path),
        "malformed line",
        "line 2",
    )


def test_bad_options(tmp_path: Path) -> None:
    assert_one_line_error(
        fairprobe("run", "--probes", "template", "--limit", "1", "--model", "nope-7b", cwd=tmp_path),
        "unknown model spec 'nope-7b'",
    )
    assert_one_line_error(fairprobe("run", "--probes", "no-such-set", cwd=tmp_path), "unknown probe set 'no-such-set'")
    out = tmp_path / "taken.txt"
    out.write_text("not a folder")
    assert_one_line_error(
        fairprobe("run", "--probes", "template", "--out", str(out), cwd=tmp_path), "output folder is a file", str(out)
    )
    assert_one_line_error(
        fairprobe("run", "--probes", "template", "--top-p", "0.5", cwd=tmp_path), "top-p", "temperature"
    )
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("summary.json"))


@pytest.mark.slow
def test_ctrl_c_then_resume(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "run",
        "--probes",
        "llm-gen-1",
        "--data-dir",
        str(paper_data_dir()),
        "--limit",
        "16",
        "--batch-size",
        "2",
        "--max-new-tokens",
        "6",
        "--device",
        "cpu",
        "--no-cache",
        "--out",
        str(out),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fairprobe", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    samples = out / "samples.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if samples.is_file() and samples.read_text(encoding="utf-8").count("\n") >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert "Traceback" not in stderr and "run the same command again" in stderr
    assert not (out / "summary.json").exists()
    kept = [json.loads(line) for line in samples.read_text(encoding="utf-8").splitlines()]
    assert 2 <= len(kept) < 16

    again = fairprobe(*args, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    ids = [json.loads(line)["id"] for line in samples.read_text(encoding="utf-8").splitlines()]
    drawn = load_probe_set("llm-gen-1", data_dir=paper_data_dir(), limit=16)  # the seeded draw, in file order
    assert ids == [p.id for p in drawn.probes]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["results"]["llm-gen-1"]["n"] == 16
