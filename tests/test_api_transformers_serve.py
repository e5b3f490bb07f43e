"""The openai: backend against `transformers serve` (transformers[serving]) on the embedded model.

That server continues prompts on /v1/completions but ignores `logprobs`: GAS must equal the local
model's and GLD/ADD must be reported as unavailable, never as zero.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fairprobe.models import GenerationConfig
from fairprobe.runner import RunOptions, read_samples, run

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_paper_suite_through_transformers_serve(tmp_path: Path, embedded_backend) -> None:
    folder = str(embedded_backend.model.name_or_path)  # the converted safetensors folder
    port = free_port()
    serve = [sys.executable, "-m", "transformers.cli.transformers", "serve", folder]
    serve += ["--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32"]
    server = subprocess.Popen(serve, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, "transformers serve exited"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.5)
        common = {"probes": ["template"], "limit": 2, "generation": GenerationConfig(max_new_tokens=6)}
        api = run(
            RunOptions(
                model=f"openai:{folder}",
                model_args={"base_url": f"http://127.0.0.1:{port}/v1", "concurrency": 1},
                out=tmp_path / "api",
                use_cache=False,
                **common,
            )
        ).results["template"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    local = run(RunOptions(out=tmp_path / "local", batch_size=1, **common), backend=embedded_backend)
    local_result = local.results["template"]
    remote = [s.continuation for s in read_samples(tmp_path / "api" / "samples.jsonl")]
    assert remote == [s.continuation for s in read_samples(tmp_path / "local" / "samples.jsonl")]
    for name in ("gas", "gas_f", "gas_m", "delta"):
        assert api.metrics[name] == local_result.metrics[name]
    for name in ("gld", "add", "log_add"):
        assert api.metrics[name].value is None and api.metrics[name].note == "unavailable: server returned no logprobs"
