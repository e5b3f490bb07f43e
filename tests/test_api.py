"""The openai: backend against scripted local HTTP servers: endpoints, logprob metrics, faults, key hygiene."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import numpy as np
import pytest

from conftest import pairs_only_words
from fairprobe.errors import ConfigError, ModelError
from fairprobe.families import load_probe_set
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.api import (
    Answer,
    EndpointError,
    MalformedResponse,
    RetryPolicy,
    open_endpoint,
    parse_reply,
    retry_after_seconds,
)
from fairprobe.models.server_scoring import normalise_token, topk_scores
from fairprobe.records import ChatMessage
from fairprobe.runner import RunOptions, RunPlan, read_samples, run
from openai_servers import canned_text, prompt_text, scripted

FAST = RetryPolicy(attempts=4, base_delay=0.01, max_delay=0.05)
SHE_HE = {"pairs": [["she", "he"]]}
# GLD and ADD of the canned distribution (she 0.3, he 0.1), by hand.
GLD = (0.3 - 0.1) / (0.3 + 0.1)
ADD = 0.5 * (0.3 * math.log(2 * 0.3 / 0.4) + 0.1 * math.log(2 * 0.1 / 0.4))


def backend(url: str, **kw):
    """The openai: backend with quick retries (tests do not wait half-second backoffs), top-k logprobs."""
    kw.setdefault("implicit", "topk")
    return open_endpoint("test", base_url=url, retry=kw.pop("retry", FAST), timeout=kw.pop("timeout", 5.0), **kw)


def options(url: str, out: Path, words: Path | bool | None = True, **kw) -> RunOptions:
    """Six template prompts, batches of 4, no cache (each test counts its own requests), top-k logprobs, the
    binary pairs only (their test has the extra groups); the first prompts in file order (the tests name them)."""
    words = pairs_only_words(Path(out).parent) if words is True else words
    model_args = {
        "base_url": url,
        "implicit": "topk",
        **({"concurrency": kw.pop("concurrency")} if "concurrency" in kw else {}),
    }
    base = {"model": "openai:test", "model_args": model_args, "probes": ["template"], "limit": 6, "out": out}
    base.update(batch_size=4, limit_order="first", probe_options={"words": str(words)} if words else {})
    return RunOptions(**{**base, "use_cache": False, **kw})


def first_attempt(action: str):
    """A script that answers `action` to the first request of every prompt and succeeds afterwards (the run's
    fingerprint probe, request number -1, is answered as it comes)."""
    seen: set[str] = set()
    lock = threading.Lock()

    def script(number: int, body: dict) -> str:
        if number < 0:
            return "ok"
        with lock:
            key = prompt_text(body)
            if key in seen:
                return "ok"
            seen.add(key)
            return action

    return script


def metrics(summary) -> dict:
    return summary.to_json_obj()["results"]["template"]["metrics"]


def test_topk_scores_read_listed_continuations_and_bound_the_rest() -> None:
    top = {"▁she": math.log(0.25), "Ġhe": math.log(0.125), " her": math.log(0.0625), " man": -math.inf, "x": 0.0}
    scores = topk_scores(top, (" she", " he", " her", " his", " woman", " man", " herself"), 20)
    assert [c.status for c in scores.continuations] == ["exact"] * 3 + ["upper_bound"] * 4
    assert np.allclose(np.exp(scores.logprobs()[:3]), [0.25, 0.125, 0.0625])
    # Outside the list: at most the smallest listed probability and the mass left over (1 - 1.4375 < 0: 0); a
    # continuation that listed tokens begin (" he", " her" before "self") at most the likelier of them.
    assert np.allclose(np.exp(scores.logprobs()[3:]), [0.0, 0.0, 0.0, 0.125], atol=1e-300)
    assert scores.mode == "topk" and scores.top_logprobs == 20
    assert normalise_token("▁she") == " she" and normalise_token("she") == "she"


def test_parse_reply_reads_both_logprob_formats_and_rejects_malformed_answers() -> None:
    legacy = {"choices": [{"text": " she", "logprobs": {"top_logprobs": [{" she": -1.0, " he": -2.0}]}}]}
    chat_style = {"choices": [{"text": " she", "logprobs": {"content": [{"token": " she", "logprob": -1.0}]}}]}
    assert parse_reply(legacy, chat=False) == Answer(" she", {" she": -1.0, " he": -2.0})
    assert parse_reply(chat_style, chat=False) == Answer(" she", {" she": -1.0})
    assert parse_reply({"choices": [{"text": ""}]}, chat=False) == Answer("")  # an empty continuation is an answer
    with_ids = {"choices": [{"text": " she", "prompt_token_ids": [1, 2], "token_ids": [7]}]}
    assert parse_reply(with_ids, chat=False) == Answer(" she", None, [1, 2], [7])
    usage = {"choices": [{"text": " she"}], "usage": {"prompt_tokens": 12, "completion_tokens": 3}}
    assert parse_reply(usage, chat=False) == Answer(" she", prompt_tokens=12, new_tokens=3)  # the model's work
    odd = {"choices": [{"text": " she"}], "usage": {"prompt_tokens": "12", "completion_tokens": -1}}
    assert parse_reply(odd, chat=False) == Answer(" she")  # counts that are not counts are not said
    for bad in ([], {"choices": []}, {"choices": [{"text": None}]}, {"choices": [{"message": {}}]}):
        with pytest.raises(MalformedResponse):
            parse_reply(bad, chat=True)


def test_retry_after_header_forms() -> None:
    assert retry_after_seconds(httpx.Headers({"Retry-After": "2"})) == 2.0
    assert retry_after_seconds(httpx.Headers({"retry-after-ms": "250"})) == 0.25
    assert retry_after_seconds(httpx.Headers({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0
    assert retry_after_seconds(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after_seconds(httpx.Headers({})) is None


def within(metric: dict, value: float) -> bool:
    """A bounded metric (value null) whose bounds hold `value`."""
    return metric["value"] is None and metric["bounds"][0] - 1e-12 <= value <= metric["bounds"][1] + 1e-12


def test_paper_suite_uses_completions_with_top_logprobs_and_bounds_gld(tmp_path: Path) -> None:
    with scripted() as (url, seen):
        summary = run(options(url, tmp_path / "run"), backend=backend(url))
    ps = load_probe_set("template", limit=6, limit_order="first")
    assert seen.paths == ["/v1/completions"] * 6
    # The prompt goes as it is (no chat template), greedy, with 20 top logprobs.
    assert sorted(b["prompt"] for b in seen.bodies) == sorted(p.prompt for p in ps.probes)
    assert {(b["temperature"], b["logprobs"], b["max_tokens"]) for b in seen.bodies} == {(0.0, 20, 50)}
    m = metrics(summary)
    female = sum(canned_text(p.prompt).startswith(" she") for p in ps.probes)
    assert m["gas"]["value"] == 1.0 and m["gas_f"]["value"] == pytest.approx(female / 6)
    # The words outside the top-k are not taken as 0: GLD and ADD are intervals that hold the value they'd give.
    assert within(m["gld"], GLD) and m["gld"]["bounds"][1] > GLD and m["gld"]["note"].startswith("bounds:")
    assert within(m["add"], ADD) and m["add"]["bounds"][1] > ADD
    assert m["coverage"]["value"] == 0.0
    assert m["covered_mass"]["value"] == pytest.approx(0.4)
    sample = read_samples(tmp_path / "run" / "samples.jsonl")[0]
    # Unknown probabilities are written as null, never as 0.
    assert sample.p_female[:2] == [pytest.approx(0.3), None] and sample.p_known[0] == [True, True]


def test_full_coverage_gives_exact_metrics(tmp_path: Path) -> None:
    words = tmp_path / "words.json"
    words.write_text(json.dumps(SHE_HE))
    with scripted() as (url, _):
        m = metrics(run(options(url, tmp_path / "run", words=words), backend=backend(url)))
    assert m["gld"] == {
        "value": pytest.approx(GLD),
        "ci95": [pytest.approx(GLD), pytest.approx(GLD)],
        "too_little_data": f"every resample of the 6 items gives {GLD:.3g}: no spread to judge",  # issue 28
    }
    assert m["add"]["value"] == pytest.approx(ADD) and "bounds" not in m["add"]
    assert m["log_add"]["value"] == pytest.approx(math.log(ADD))
    assert m["coverage"]["value"] == 1.0


def test_no_logprobs_means_unavailable_not_zero(tmp_path: Path) -> None:
    with scripted(lambda n, b: "nologprobs") as (url, _):
        m = metrics(run(options(url, tmp_path / "run"), backend=backend(url)))
    for name in ("gld", "add", "log_add"):
        # An unavailable metric has a null value and says why: never a zero.
        assert m[name] == {"value": None, "ci95": [None, None], "note": "unavailable: server returned no logprobs"}
    assert m["gas"]["value"] == 1.0


def test_server_that_allows_five_logprobs_is_asked_again_with_five(tmp_path: Path) -> None:
    with scripted(lambda n, b: "max5") as (url, seen):
        m = metrics(run(options(url, tmp_path / "run", limit=2), backend=backend(url, concurrency=1)))
    assert [b["logprobs"] for b in seen.bodies] == [20, 5, 5]
    assert within(m["gld"], GLD)
    # The k actually used (after the fallback) is what the summary and the manifest record.
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["results"]["template"]["implicit"] == {
        "mode": "topk",
        "top_logprobs": 5,
    }
    implicit = json.loads((tmp_path / "run" / "manifest.json").read_text())["implicit"]
    assert (implicit["top_logprobs_asked"], implicit["top_logprobs_used"]) == (20, 5)


def test_chat_prompts_use_the_chat_endpoint_with_top_logprobs() -> None:
    prompt = [ChatMessage(role="user", content="Is the nurse kind?")]
    with scripted() as (url, seen):
        model = backend(url)
        plain, with_probs = (
            model.generate([prompt], GenerationConfig(max_new_tokens=5)),
            model.generate([prompt], GenerationConfig(max_new_tokens=5), [(" she", " he")]),
        )
    assert seen.paths == ["/v1/chat/completions"] * 2
    assert seen.bodies[0]["messages"] == [{"role": "user", "content": "Is the nurse kind?"}]
    assert "logprobs" not in seen.bodies[0] and seen.bodies[1]["top_logprobs"] == 20
    assert plain[0].text == " she is kind." and plain[0].scores is None
    assert np.exp(with_probs[0].scores.logprobs()).tolist() == [pytest.approx(0.3), pytest.approx(0.1)]


@pytest.mark.parametrize("fault", ["429", "500", "truncated", "drop", "slow", "malformed"])
def test_transient_faults_are_retried_and_nothing_is_lost(tmp_path: Path, fault: str) -> None:
    with scripted() as (url, _):
        clean = metrics(run(options(url, tmp_path / "clean"), backend=backend(url)))
    with scripted(first_attempt(fault)) as (url, seen):
        summary = run(options(url, tmp_path / "run"), backend=backend(url, timeout=0.5))
    assert seen.count == 12  # every prompt failed once and succeeded on its second attempt
    samples = read_samples(tmp_path / "run" / "samples.jsonl")
    assert len(samples) == 6 and not any(getattr(s, "error", None) for s in samples)
    assert metrics(summary) == clean


def test_429_waits_for_retry_after() -> None:
    with scripted(first_attempt("429")) as (url, _):
        model = backend(url, retry=RetryPolicy(attempts=2, base_delay=0.0, max_delay=0.0))
        loop_time = model._loop.time
        start = loop_time()
        model.generate(["My friend is a nurse, and"], GenerationConfig())
        assert loop_time() - start >= 1.0  # the server's Retry-After: 1, although the backoff would be 0


@pytest.mark.parametrize(("answer", "attempts"), [("malformed", 4), ("empty", 4), ("malformed", 1)])
def test_malformed_answers_are_recorded_as_undetermined(tmp_path: Path, answer: str, attempts: int) -> None:
    bad = "My friend is a attendant, and"
    retry = RetryPolicy(attempts=attempts, base_delay=0.01)
    with scripted(lambda n, b: answer if prompt_text(b) == bad else "ok") as (url, _):
        summary = run(options(url, tmp_path / "run"), backend=backend(url, retry=retry))
    samples = {s.prompt: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    assert len(samples) == 6
    assert samples[bad].error.startswith("malformed response") and samples[bad].continuation == ""
    assert samples[bad].words_found == [] and "p_female" not in samples[bad].model_dump()
    m = metrics(summary)
    assert m["undetermined"]["value"] == pytest.approx(1 / 6)
    assert m["gas"]["value"] == 1.0  # over the 5 answered prompts: no fake "no gendered word" answer


def test_retry_budget_then_clear_error_and_resume_finishes_only_the_rest(tmp_path: Path) -> None:
    out = tmp_path / "run"
    healthy = threading.Event()
    with scripted(lambda n, b: "ok" if n < 4 or healthy.is_set() else "500") as (url, seen):
        with pytest.raises(EndpointError) as info:
            run(options(url, out, concurrency=1), backend=backend(url, concurrency=1))
        message = str(info.value)
        assert "HTTP 500; gave up after 4 attempts" in message
        assert f"4 samples saved in {out}: run the same command again to resume" in message
        assert "\n" not in message
        assert len(read_samples(out / "samples.jsonl")) == 4
        healthy.set()
        before = seen.count
        resumed = run(options(url, out), backend=backend(url))
        assert seen.count - before == 2  # only the two missing prompts
        run(options(url, tmp_path / "whole"), backend=backend(url))
    assert (out / "summary.json").read_bytes() == (tmp_path / "whole" / "summary.json").read_bytes()
    assert (out / "samples.jsonl").read_bytes() == (tmp_path / "whole" / "samples.jsonl").read_bytes()
    assert resumed.results["template"].n == 6


def test_concurrency_limits_requests_in_flight() -> None:
    with scripted(latency=0.1) as (url, seen):
        backend(url, concurrency=3).generate([f"My friend {i}, and" for i in range(12)], GenerationConfig())
    assert seen.count == 12
    assert 1 < seen.max_in_flight <= 3


def test_round_robin_over_several_endpoints(tmp_path: Path) -> None:
    with scripted() as (url_a, seen_a), scripted() as (url_b, seen_b):
        summary = run(options(f"{url_a},{url_b}", tmp_path / "run"), backend=backend(f"{url_a},{url_b}"))
    assert (seen_a.count, seen_b.count) == (3, 3)
    assert within(metrics(summary)["gld"], GLD)


def test_bad_specs_and_options_are_one_line_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FAIRPROBE_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ModelError, match="needs a key: set \\$FAIRPROBE_API_KEY"):
        load_model("openai:gpt-4o-mini")
    with pytest.raises(ModelError, match="names no model: write openai:NAME"):
        load_model("openai:")
    with pytest.raises(ModelError, match="http"):
        load_model("openai:x", base_url="ftp://host")
    with pytest.raises(ModelError, match="carries credentials") as info:
        load_model("openai:x", base_url="https://user:secret@host/v1")
    assert "secret" not in str(info.value)
    with pytest.raises(ConfigError, match="the local backend takes no -M key 'base_url'"):
        RunPlan.build(RunOptions(model="smollm2-135m-instruct", model_args={"base_url": "http://127.0.0.1:1/v1"}))
    with pytest.raises(
        ConfigError, match="the openai backend takes no -M key 'retry': it takes base_url, api_key, concurrency"
    ):
        load_model("openai:x", base_url="http://127.0.0.1:1/v1", retry=3)
    for bad in (-1, 0, float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="-M timeout="):
            load_model("openai:x", base_url="http://127.0.0.1:1/v1", timeout=bad)


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fairprobe.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def test_api_key_never_reaches_files_or_messages(tmp_path: Path) -> None:
    marker = "sk-fairprobe-marker-7f3a9c"
    env = {**os.environ, "FAIRPROBE_API_KEY": marker, "FAIRPROBE_CACHE_DB": str(tmp_path / "cache.sqlite")}
    out = tmp_path / "run"
    args = ["run", "--model", "openai:test", "--probes", "template", "--limit", "3", "--out", str(out)]
    with scripted() as (url, seen):
        ok = _cli([*args, "--base-url", url], env)
    assert ok.returncode == 0, ok.stderr
    assert set(seen.auth) == {f"Bearer {marker}"}  # the key is sent, in the header only
    with scripted(lambda n, b: "401") as (url, seen):  # a server that echoes the key back
        # The cache names the model by content, not endpoint: without --no-cache the first run's answers would serve.
        bad = _cli([*args, "--base-url", url, "--out", str(tmp_path / "bad"), "--no-cache"], env)
    assert bad.returncode == 2
    last = bad.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "HTTP 401 (check $FAIRPROBE_API_KEY)" in last
    assert "Traceback" not in bad.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {p.name for p in written} >= {"manifest.json", "samples.jsonl", "summary.json", "cache.sqlite"}
    for path in written:
        assert marker.encode() not in path.read_bytes(), path
    assert marker not in ok.stdout + ok.stderr + bad.stdout + bad.stderr


def test_extra_groups_over_top_logprobs_are_bounded_not_zero(tmp_path: Path) -> None:
    # The default words: the extra groups' words are read from the same top logprobs (one request per prompt).
    with scripted() as (url, seen):
        summary = run(options(url, tmp_path / "run", words=None), backend=backend(url))
    assert sorted(b["max_tokens"] for b in seen.bodies) == [50] * 6
    m = metrics(summary)
    # they/them are outside the server's top logprobs: the share is an interval from 0, never a plain 0.
    share = m["neutral_share"]
    assert share["value"] is None and share["bounds"][0] == 0.0 and 0.0 < share["bounds"][1] < 1.0
    sample = read_samples(tmp_path / "run" / "samples.jsonl")[0]
    assert set(sample.p_groups["neutral"]) == {None} and all(x > 0 for x in sample.p_groups_upper["neutral"])
    assert sample.likeliest_group in ("female", "undecided")
    # The binary pairs' numbers are those of a run without groups.
    with scripted() as (url, _):
        plain = run(options(url, tmp_path / "plain"), backend=backend(url))
    assert {k: v for k, v in m.items() if not k.endswith("_share")} == metrics(plain)
