"""Resume after SIGKILL: the same command finishes only the missing samples and writes the same summary."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import interruptible
from fairprobe.models import GenerationConfig, ModelBackend
from fairprobe.runner import RunOptions, read_samples, run
from openai_servers import scripted


def _command(args: list[str]) -> list[str]:
    return [sys.executable, "-m", "fairprobe.cli", "run", *args]


def run_and_kill(args: list[str], out: Path, after: int, sig: int = signal.SIGKILL) -> list:
    """Start the CLI, send `sig` once `after` samples are on disk, and return the samples it left."""
    proc = subprocess.Popen(
        _command(args), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible
    )
    samples_path = out / "samples.jsonl"
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if samples_path.is_file() and samples_path.read_bytes().count(b"\n") >= after:
                break
            time.sleep(0.005)
        assert proc.poll() is None, f"run ended before it could be killed: {proc.stderr.read() if proc.stderr else ''}"
        os.kill(proc.pid, sig)
        if sig == signal.SIGINT:  # Ctrl-C: the CLI says how many samples are saved and how to resume
            err = proc.communicate(timeout=60)[1]
            assert proc.returncode == 130
            assert f"samples saved in {out}; run the same command again to resume" in err
    finally:
        proc.wait()
        if proc.stderr:
            proc.stderr.close()
    assert not (out / "summary.json").exists()
    return read_samples(samples_path)


def finish(args: list[str]) -> None:
    done = subprocess.run(_command(args), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def assert_same_run(resumed: Path, whole: Path, n: int) -> None:
    samples = read_samples(resumed / "samples.jsonl")
    assert len(samples) == n and len({(s.set, s.id) for s in samples}) == n  # each sample exactly once
    assert (resumed / "samples.jsonl").read_bytes() == (whole / "samples.jsonl").read_bytes()
    assert (resumed / "summary.json").read_bytes() == (whole / "summary.json").read_bytes()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_api_run_killed_mid_way_resumes_with_the_missing_samples_only(tmp_path: Path, sig: int) -> None:
    out = tmp_path / "run"
    with scripted(latency=0.03) as (url, seen):
        args = ["--model", "openai:test", "--base-url", url, "--probes", "template", "--limit", "24"]
        args += ["--batch-size", "4", "--concurrency", "2", "--no-cache", "--implicit", "topk"]
        left = run_and_kill([*args, "--out", str(out)], out, after=8, sig=sig)
        assert 8 <= len(left) < 24
        whole_batches = sum(1 for n in Counter(s.batch for s in left).values() if n == 4)
        before = seen.count
        finish([*args, "--out", str(out)])
        # Only the batches not saved whole are asked (one call per prompt: the words' scores come with it).
        assert seen.count - before == 24 - 4 * whole_batches
        finish([*args, "--out", str(tmp_path / "whole")])
    assert_same_run(out, tmp_path / "whole", 24)


@pytest.mark.slow
def test_hf_run_killed_after_its_first_batch_resumes_to_the_uninterrupted_result(
    tmp_path: Path, embedded_backend
) -> None:
    out = tmp_path / "run"
    args = ["--probes", "template", "--limit", "8", "--batch-size", "2", "--max-new-tokens", "5", "--no-cache"]
    args += ["--device", "cpu", "--dtype", "float32", "--out", str(out)]
    # A batch's generations are asked with those of the batch after it, so batches land on disk two at a time:
    # eight prompts leave the second pair still decoding when the first pair is saved.
    left = run_and_kill(args, out, after=2)
    assert 2 <= len(left) < 8
    # The same command again, in this process (the CLI builds exactly these options; the fingerprint checks it).
    options = RunOptions(
        probes=["template"],
        limit=8,
        batch_size=2,
        model_args={"device": "cpu", "dtype": "float32"},
        generation=GenerationConfig(max_new_tokens=5),
        use_cache=False,
        out=out,
    )
    asked = CountingPrompts(embedded_backend)
    run(options, backend=asked)  # type: ignore[arg-type]
    # Only the batches not saved whole, each prompt once (the words' scores read from the same call).
    assert asked.prompts == 8 - 2 * (len(left) // 2)
    run(options.model_copy(update={"out": tmp_path / "whole"}), backend=embedded_backend)
    assert_same_run(out, tmp_path / "whole", 8)


class CountingPrompts(ModelBackend):
    """Passes calls through to a backend and counts the prompts it is asked."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.has_chat_template = inner.has_chat_template
        self.prompts = 0

    def identity(self) -> dict:
        return self.inner.identity()

    def generate(self, prompts, config, score=None):
        self.prompts += len(prompts)
        return self.inner.generate(prompts, config, score)

    def loglikelihood(self, requests):
        self.prompts += len(requests)
        return self.inner.loglikelihood(requests)
