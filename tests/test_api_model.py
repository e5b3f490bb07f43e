"""The openai: backend against a real OpenAI-compatible HTTP server serving the embedded model.

The server (tests/openai_servers.model_server) answers /v1/completions and /v1/chat/completions with
top logprobs from the embedded SmolLM2 model; the same model run locally gives the exact reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fairprobe.models import GenerationConfig, load_model
from fairprobe.records import ChatMessage
from fairprobe.runner import RunOptions, read_samples, run
from openai_servers import model_server

pytestmark = pytest.mark.slow

GEN = GenerationConfig(max_new_tokens=8)


def test_paper_suite_through_the_server_matches_the_local_model(tmp_path: Path, embedded_backend) -> None:
    common = {"probes": ["template"], "limit": 4, "generation": GEN}
    with model_server(embedded_backend) as (url, seen):
        api = run(
            RunOptions(
                model="openai:smollm2",
                model_args={"base_url": url, "implicit": "topk"},
                out=tmp_path / "api",
                use_cache=False,
                **common,
            )
        ).results["template"]
    # Each prompt: one request, its continuation with 20 top logprobs (the pairs' and the groups' words read from them).
    assert seen.paths == ["/v1/completions"] * 4 and {b["logprobs"] for b in seen.bodies} == {20}
    # batch_size 1: the local model sees each prompt alone, as the server does (no padding).
    local = run(RunOptions(out=tmp_path / "local", batch_size=1, **common), backend=embedded_backend).results[
        "template"
    ]
    api_samples = {s.id: s for s in read_samples(tmp_path / "api" / "samples.jsonl")}
    local_samples = {s.id: s for s in read_samples(tmp_path / "local" / "samples.jsonl")}
    assert {k: s.continuation for k, s in api_samples.items()} == {k: s.continuation for k, s in local_samples.items()}
    for name in ("gas", "gas_f", "gas_m", "delta"):
        assert api.metrics[name] == local.metrics[name]
    for key, s in api_samples.items():
        known = np.asarray(s.p_known)
        api_probs = np.stack([np.asarray(s.p_female, float), np.asarray(s.p_male, float)], axis=-1)
        exact = np.stack([local_samples[key].p_female, local_samples[key].p_male], axis=-1)
        assert known[0].all()  # " she" and " he" are in the top 20 after every template prompt
        np.testing.assert_allclose(api_probs[known], exact[known], rtol=1e-4)
        assert not known.all()  # rarer words ("granddaughter") are outside the top 20: unknown, not 0
    assert api.metrics["coverage"].value == 0.0
    assert 0 < api.metrics["covered_mass"].value < 1
    for name in ("gld", "add"):  # bounds that hold the exact value, never a value that takes unseen words as 0
        low, high = api.metrics[name].bounds
        assert api.metrics[name].value is None and low <= local.metrics[name].value <= high
        assert local.metrics[name].bounds is None
    # The neutral share over the server holds the local model's exact value (they/them outside the top 20: bounds).
    share, exact_share = api.metrics["neutral_share"], local.metrics["neutral_share"].value
    low, high = share.bounds if share.value is None else (share.value, share.value)
    assert exact_share is not None and low - 1e-4 <= exact_share <= high + 1e-4


def test_chat_prompts_get_the_model_chat_template_on_the_server(embedded_backend) -> None:
    prompt = [ChatMessage(role="user", content="My friend is a nurse. Write one sentence about my friend.")]
    with model_server(embedded_backend) as (url, seen):
        model = load_model("openai:smollm2", base_url=url, implicit="topk")
        words = ("A", "My", " she", "Zebra")  # the reply's likeliest first tokens, a pronoun, an unlikely word
        remote = model.generate([prompt], GEN, [words])[0]
    assert seen.paths == ["/v1/chat/completions"]
    local = embedded_backend.generate([prompt], GEN, [words])[0]
    assert remote.text == local.text and remote.text
    # Listed in the server's top 20 (after the chat template): exact, and equal to the local model's.
    known = remote.scores.exact()
    assert known[:2].all() and not known[3]
    np.testing.assert_allclose(remote.scores.logprobs()[known], local.scores.logprobs()[known], atol=1e-4)
    # Outside the list: only bounded, and the bound holds the local value.
    assert remote.scores.continuations[3].status == "upper_bound"
    assert local.scores.logprobs()[3] <= remote.scores.logprobs()[3] + 1e-6
