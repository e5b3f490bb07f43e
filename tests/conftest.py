"""Shared test setup: offline hub, two torch threads, a private cache, and the reference data path."""

from __future__ import annotations

import importlib
import math
import os
import signal
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Runs in tests share one private cache database, never the user's.
os.environ["FAIRPROBE_CACHE_DB"] = str(Path(tempfile.mkdtemp(prefix="fairprobe-test-cache-")) / "calls.sqlite")

# Two torch threads, fixed (fairprobe would otherwise follow the CPUs free at each batch).
os.environ.setdefault("FAIRPROBE_THREADS", "2")

import torch

from fairprobe.models.base import ContinuationScore, ScoreRequest, Scores

torch.set_num_threads(2)

# The reference data beside the clone (../shared/data); FAIRPROBE_SHARED_DATA points elsewhere.
SHARED_DATA = Path(os.environ.get("FAIRPROBE_SHARED_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data")


def interruptible() -> None:
    """A child's Ctrl-C as at a terminal: started from a background job (`cmd &`, nohup) it would inherit an
    ignored SIGINT, which Python keeps ignoring, so a test's SIGINT would let the run finish."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def shared_data_dir() -> Path:
    """The shared data root; a test that needs it skips without it, except in CI (CI=true), where it fails."""
    if SHARED_DATA.is_dir():
        return SHARED_DATA
    reason = f"needs the reference data at {SHARED_DATA} (../shared/data beside the clone)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI needs the reference data: {reason}")
    pytest.skip(reason)


def private_namespace(flags: str) -> list[str]:
    """`unshare FLAGS` as a command prefix (-rm: own mounts, -rn: no network), for tests of a full disk or of
    running offline; skips where the kernel refuses it, except in CI (CI=true), where it fails."""
    import subprocess

    probe = subprocess.run(["unshare", flags, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        reason = f"needs `unshare {flags}` (a private namespace): {probe.stderr.strip()}"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return ["unshare", flags]


def pairs_only_words(folder: Path) -> Path:
    """The default attribute words without the extra gender groups, as a --words file in `folder`: runs that count
    server requests ask one call per prompt (the groups' scoring call is tested on its own)."""
    import json

    default = json.loads((Path(__file__).parents[1] / "src/fairprobe/data/attribute_words.json").read_text())
    path = Path(folder) / "pairs_only_words.json"
    path.write_text(json.dumps({"pairs": default["pairs"], "detection": default["detection"]}))
    return path


def paper_data_dir() -> Path:
    """The paper's files (debias_llms/ under the shared data root), skipping or failing like shared_data_dir."""
    return shared_data_dir() / "debias_llms"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The reference data sets beside the project (../shared/data)."""
    return shared_data_dir()


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


def exact_scores(probs: list[float]) -> Scores:
    """Scores of a fake backend: each continuation known exactly with probability `probs[i]`."""
    return Scores(tuple(ContinuationScore(math.log(p), 1, None) for p in probs))


def fake_loglikelihood(requests: list[ScoreRequest], prob: float = 0.01) -> list[Scores]:
    """A fake backend's loglikelihood: every continuation has probability `prob`."""
    return [exact_scores([prob] * len(r.continuations)) for r in requests]


@contextmanager
def fixture_family(module: str, probe_set: str) -> Iterator[ModuleType]:
    """A family from tests/fixtures/families, imported from its folder and registered through the public API
    (`register_family`), removed again afterwards."""
    from fairprobe.catalog import FAMILIES, PROBE_SETS
    from fairprobe.families import register_family

    folder = str(Path(__file__).parent / "fixtures" / "families")
    sys.path.insert(0, folder)
    try:
        imported = importlib.import_module(module)
        register_family(imported.FAMILY)
        yield imported
    finally:
        FAMILIES.unregister(imported.FAMILY.name)
        PROBE_SETS.unregister(probe_set)
        sys.modules.pop(module, None)
        sys.path.remove(folder)
