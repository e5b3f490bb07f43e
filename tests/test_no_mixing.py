"""Nothing mixes: cached answers are checked as live ones are and keyed by how a server scores; a resumed run
refuses a server whose model changed under the same name; replicas must render chat prompts alike."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from fairprobe.cache import Cache
from fairprobe.errors import ConfigError, ModelError
from fairprobe.models.api import open_endpoint
from fairprobe.models.base import ContinuationScore, GenerationConfig, ModelBackend, ScoreRequest, Scores
from fairprobe.models.cached import CachedBackend
from fairprobe.runner import RunOptions, read_samples, run
from openai_servers import (
    CANNED_TOP,
    canned_text,
    completion_json,
    echo_answer,
    echo_server,
    prompt_text,
    rendered_chat,
    scripted,
    serve,
)
from test_failed_items import FAST, exact_direct

OPTIONS = ("yes", "Yes", "no", "No")


class ScoringBackend(ModelBackend):
    """A server-like backend that scores every continuation at probability 0.2 and says how it scores."""

    name = "scoring"
    has_chat_template = False

    def __init__(self, mode: str = "exact") -> None:
        self.mode = mode
        self.asked = 0

    def identity(self) -> dict[str, Any]:
        return {"id": "openai:test", "backend": "openai", "model": "test"}

    def scoring_mode(self) -> str:
        return self.mode

    def generate(self, prompts: list[Any], config: GenerationConfig, score: Any = None) -> list[Any]:
        raise AssertionError("only scores are asked")

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        self.asked += len(requests)
        status = "exact" if self.mode == "exact" else "upper_bound"
        row = ContinuationScore(math.log(0.2), 1, False, status)
        return [Scores(tuple(row for _ in r.continuations), mode=self.mode) for r in requests]


def test_a_cached_entry_whose_probabilities_add_up_to_more_than_one_is_asked_again(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    inner = ScoringBackend()
    model = CachedBackend(inner, cache)
    request = ScoreRequest("Do you agree?", OPTIONS)
    model.loglikelihood([request])
    (key,) = cache.get_many([k for k in _all_keys(cache)]).keys()
    forged = Scores(tuple(ContinuationScore(math.log(0.99), 1, False, "exact") for _ in OPTIONS), mode="exact")
    cache.put(key, forged.to_json(), "loglikelihood", "openai:test")  # 4 x 0.99 = 3.96: a forged entry
    again = CachedBackend(inner, cache)
    (scores,) = again.loglikelihood([request])
    assert inner.asked == 2 and (again.hits, again.misses) == (0, 1)
    assert [round(math.exp(c.logprob), 6) for c in scores.continuations] == [0.2] * 4
    assert cache.get(key) == scores.to_json()  # the forged entry was replaced by the live answer


def _all_keys(cache: Cache) -> list[str]:
    import sqlite3

    with sqlite3.connect(cache.path) as conn:
        return [row[0] for row in conn.execute("SELECT key FROM entries")]


def test_scores_are_keyed_by_how_the_server_scores(tmp_path: Path) -> None:
    # Bounds cached from a top-k endpoint never answer for an exact endpoint of the same model name.
    cache = Cache(tmp_path / "c.sqlite")
    request = ScoreRequest("Do you agree?", OPTIONS)
    topk, exact = ScoringBackend("topk"), ScoringBackend("exact")
    (bounded,) = CachedBackend(topk, cache).loglikelihood([request])
    (scored,) = CachedBackend(exact, cache).loglikelihood([request])
    assert (topk.asked, exact.asked) == (1, 1)
    assert {c.status for c in bounded.continuations} == {"upper_bound"}
    assert {c.status for c in scored.continuations} == {"exact"}
    again = CachedBackend(ScoringBackend("topk"), cache)
    assert again.loglikelihood([request])[0].mode == "topk" and again.hits == 1


def test_a_run_over_an_exact_endpoint_never_reads_bounds_cached_from_a_top_k_one(tmp_path: Path) -> None:
    cache = tmp_path / "cache.sqlite"
    with scripted() as (url, _):
        exact_direct(url, tmp_path / "topk", limit=3, cache=cache)
    with echo_server() as (url, _):
        exact_direct(url, tmp_path / "exact", limit=3, cache=cache)
    bounded = read_samples(tmp_path / "topk" / "samples.jsonl")
    exact = read_samples(tmp_path / "exact" / "samples.jsonl")
    assert all(r.q_bounds is not None and r.q is None for r in bounded)  # type: ignore[attr-defined]
    assert all(r.q is not None and r.q_bounds is None for r in exact)  # type: ignore[attr-defined]
    assert json.loads((tmp_path / "exact" / "manifest.json").read_text())["scoring"] == "exact"


def test_a_resumed_run_refuses_a_server_whose_model_changed_under_the_same_name(tmp_path: Path) -> None:
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    served = {"model": echo_answer()}
    with serve(lambda number, body, auth: served["model"](number, body, auth)) as (url, _):
        exact_direct(url, out, limit=3, cache=cache)
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["model_fingerprint"]["tokens"] == [ord(c) for c in "My friend is a nurse, and"]
        exact_direct(url, out, limit=3, cache=cache)  # the same model: resumes (nothing left to ask)
        served["model"] = echo_answer(shift=7)  # another model (and tokenizer) under the same name and URL
        with pytest.raises(ConfigError) as refused:
            exact_direct(url, out, limit=3, cache=cache)
    message = str(refused.value)
    assert message.startswith(f"the samples in {out} came from another model than the server serves now: ")
    assert "(another tokenizer)" in message and "\n" not in message


def test_replicas_that_render_chat_prompts_differently_are_refused_before_anything_is_scored(tmp_path: Path) -> None:
    def other_template(messages: list[dict[str, str]]) -> str:
        return rendered_chat(messages).replace("<user>", "<|user|>\n")

    with (
        echo_server() as (a, seen_a),
        echo_server(render=other_template) as (b, seen_b),
        pytest.raises(ModelError) as refused,
    ):
        exact_direct(f"{a},{b}", tmp_path / "run", limit=3, cache=tmp_path / "cache.sqlite")
    assert str(refused.value).startswith("--base-url endpoints render chat prompts differently: ")
    assert "(another chat template)" in str(refused.value)
    assert not any(b.get("echo") and isinstance(b.get("prompt"), list) for b in seen_a.bodies + seen_b.bodies)
    with echo_server() as (a, _), echo_server() as (b, _):
        assert (
            exact_direct(f"{a},{b}", tmp_path / "same", limit=3, cache=tmp_path / "cache.sqlite").results["direct"].n
            == 3
        )


def swappable_model(state: dict[str, Any]):
    """The scripted server's answers, with the fingerprint probe's continuation `state["text"]` and every listed
    logprob moved down by `state["shift"]`: a model that can be swapped under the same name and URL."""

    def answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        top = {token: value - state["shift"] for token, value in CANNED_TOP.items()}
        text = state["text"] if number < 0 else canned_text(prompt_text(body))
        return 200, json.dumps(completion_json(body, text, top)).encode(), {}

    return serve(answer)


def server_run(url: str, out: Path, **model_args: str) -> Any:
    """Four template prompts over the server at `url`, uncached: generated only (`implicit` off), or with scores."""
    generate_only = not model_args
    options = RunOptions(
        model="openai:test",
        model_args={"base_url": url, **model_args},
        probes=["template"],
        limit=4,
        out=out,
        use_cache=False,
        probe_options={"implicit": "off"} if generate_only else {},
    )
    return run(options)


def test_a_run_that_only_generates_refuses_to_resume_when_the_greedy_probe_answers_otherwise(tmp_path: Path) -> None:
    state = {"text": " she is kind.", "shift": 0.0}
    out = tmp_path / "run"
    with swappable_model(state) as (url, seen):
        server_run(url, out)
        recorded = json.loads((out / "manifest.json").read_text())["model_fingerprint"]
        assert "tokens" not in recorded  # nothing echoed: the greedy probe is the whole fingerprint
        assert recorded["greedy"]["text"] == " she is kind." and recorded["greedy"]["tokens"] == [" she"]
        assert recorded["greedy"]["top"][0][" he"] == pytest.approx(math.log(0.1))
        assert len(seen.probes) == 1 and seen.probes[0]["max_tokens"] == 8 and seen.probes[0]["logprobs"] == 5
        assert not any(b.get("logprobs") for b in seen.bodies)  # the run itself asks no logprobs
        server_run(url, out)  # the same model: resumes (the probe asked once more, when the run started again)
        assert len(seen.probes) == 2
        state["text"], asked = " he went home.", seen.count  # another model under the same name and URL
        with pytest.raises(ConfigError) as refused:
            server_run(url, out)
        assert seen.count == asked  # refused before any item was asked
    assert str(refused.value) == (
        f"the samples in {out} came from another model than the server serves now: the probe prompt's greedy "
        "continuation is ' he went home.' now, ' she is kind.' before; resuming would mix two models in one run: "
        "serve the model as before, or give another --out"
    )


def test_a_top_k_only_server_refuses_to_resume_when_its_probe_logprobs_moved_beyond_tolerance(tmp_path: Path) -> None:
    state = {"text": " she is kind.", "shift": 0.0}
    out = tmp_path / "run"
    with swappable_model(state) as (url, seen):
        server_run(url, out, implicit="topk")
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest["scoring"] == "topk" and manifest["model_fingerprint"]["greedy"]["text"] == " she is kind."
        state["shift"] = 0.05  # within tolerance (batching and hardware move logprobs this much): resumes
        server_run(url, out, implicit="topk")
        state["shift"] = 0.3  # the same greedy text, each listed logprob 0.3 lower: another model
        with pytest.raises(ConfigError) as refused:
            server_run(url, out, implicit="topk")
    message = str(refused.value)
    assert "the probe prompt's greedy logprobs differ by up to 0.3 from before;" in message and "\n" not in message
    assert len(seen.probes) == 3


def test_a_chat_only_server_is_fingerprinted_through_chat_completions() -> None:
    # A server without /completions (a chat model): the greedy probe is asked again as a chat turn, once.
    def chat_only(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        if "messages" not in body:
            return 404, b'{"error": {"message": "This is a chat model"}}', {}
        return 200, json.dumps(completion_json(body, " she is kind.", CANNED_TOP)).encode(), {}

    with serve(chat_only) as (url, seen):
        backend = open_endpoint("test", base_url=url)
        found = backend.answer_fingerprint()
        assert backend.answer_fingerprint() == found  # asked once
    assert [("messages" in b, b["logprobs"]) for b in seen.probes] == [(False, 5), (True, True)]
    assert found is not None and found["greedy"]["text"] == " she is kind." and found["greedy"]["tokens"] == [" she"]
    assert found["greedy"]["top"][0] == pytest.approx({t: v for t, v in CANNED_TOP.items()})


def test_the_greedy_probe_goes_past_a_dead_replica_and_a_server_that_never_answers_is_one_line() -> None:
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, the connection is refused
    with scripted() as (url, seen):
        found = open_endpoint("test", base_url=f"{dead},{url}", retry=FAST, timeout=5.0).answer_fingerprint()
    assert found is not None and found["greedy"]["url"] == url and len(seen.probes) == 1
    with pytest.raises(ModelError) as refused:
        open_endpoint("test", base_url=dead, retry=FAST, timeout=5.0).answer_fingerprint()
    assert str(refused.value) == (
        f"no server answers at {dead} (connection to {dead}/completions failed (ConnectError); gave up after 2 "
        "attempts): start the server (docs/vllm.md) or check --base-url"
    )
