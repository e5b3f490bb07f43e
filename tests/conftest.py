"""Shared test setup: offline hub, two torch threads, a private cache, and the reference data path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Runs in tests share one private cache database, never the user's.
os.environ["FAIRPROBE_CACHE_DB"] = str(Path(tempfile.mkdtemp(prefix="fairprobe-test-cache-")) / "calls.sqlite")

import torch

torch.set_num_threads(2)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PAPER_DATA = SHARED_DATA / "debias_llms"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The reference data sets beside the project (../shared/data)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"reference data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def embedded_backend():
    """The embedded SmolLM2-135M-Instruct model, loaded once for the whole session."""
    from fairprobe.models import load_model

    return load_model("smollm2-135m-instruct", device="cpu", dtype="float32", batch_size=16)


@pytest.fixture(scope="session")
def vllm_server(request, embedded_backend):
    """A real vLLM server (tests/vllm_server.py) on the embedded model, started once per session."""
    from vllm_server import vllm_fixture

    return vllm_fixture(request, embedded_backend)
