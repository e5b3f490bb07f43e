"""Server answers are validated before use: a nonsense answer is malformed (undetermined), never a number or a crash."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest

from fairprobe.errors import ConfigError, ModelError
from fairprobe.models import load_model, validate
from fairprobe.models.api import RetryPolicy, open_endpoint, parse_reply
from fairprobe.models.validate import AnswerLimits, MalformedResponse
from fairprobe.runner import RunOptions, read_samples, run
from openai_servers import CANNED_TOP, canned_text, completion_json, prompt_text, serve

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
BAD_PROMPT = "My friend is a attendant, and"  # one of the first six template prompts


def completions_answer(top: dict[str, Any], text: Any = None) -> dict[str, Any]:
    """A completions answer with a hand-made first-position top_logprobs (values may be nonsense)."""
    return {
        "choices": [
            {
                "text": " she went home." if text is None else text,
                "logprobs": {"tokens": [" she"], "token_logprobs": [-1.0], "top_logprobs": [top]},
            }
        ]
    }


def chat_answer(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "choices": [{"message": {"content": "hi"}, "logprobs": {"content": [{**entries[0], "top_logprobs": entries}]}}]
    }


@pytest.mark.parametrize(
    "value",
    [0.5, 5.0, 700, True, False, float("nan"), float("inf"), -float("inf"), "-0.1", None, [1], {"x": 1}],
)
def test_every_logprob_that_is_not_a_finite_number_at_most_0_is_malformed(value: Any) -> None:
    with pytest.raises(MalformedResponse):
        parse_reply(completions_answer({" she": value, " he": -2.0}), chat=False)
    with pytest.raises(MalformedResponse):
        parse_reply(chat_answer([{"token": " she", "logprob": value}, {"token": " he", "logprob": -2.0}]), chat=True)


def test_valid_logprobs_pass_and_rounding_above_0_counts_as_0() -> None:
    answer = parse_reply(completions_answer({" she": 1e-9, " he": -20.0}), chat=False)
    assert answer.text == " she went home." and answer.top == {" she": 0.0, " he": -20.0}
    assert validate.logprob(-0.0) == 0.0 and validate.logprob(-3) == -3.0


def test_listed_tokens_holding_more_than_all_the_probability_fail_the_scoring_and_keep_the_text() -> None:
    answer = parse_reply(completions_answer({" she": math.log(0.7), "▁she": math.log(0.7)}), chat=False)
    assert answer.text == " she went home." and answer.top is None
    assert answer.scoring_error is not None and answer.scoring_error.startswith("malformed scoring answer: ")
    assert "total probability of 1.4, above 1" in answer.scoring_error


@pytest.mark.parametrize("text", [123, ["a"], {"a": 1}, True])
def test_text_that_is_not_a_string_is_malformed(text: Any) -> None:
    with pytest.raises(MalformedResponse, match="not a string"):
        parse_reply(completions_answer({" she": -1.0}, text=text), chat=False)


def test_json_bodies_with_nan_or_bad_bytes_are_malformed() -> None:
    with pytest.raises(MalformedResponse):
        validate.json_body(b'{"choices": [{"text": "x", "logprobs": NaN}]}')
    with pytest.raises(MalformedResponse):
        validate.json_body(b"\xff\xfe not utf-8")
    assert validate.json_body(b'{"a": 1}') == {"a": 1}


def test_limits_come_from_the_environment_and_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRPROBE_MAX_ANSWER_BYTES", "1234")
    monkeypatch.setenv("FAIRPROBE_REQUEST_DEADLINE", "2.5")
    assert AnswerLimits.from_env() == AnswerLimits(max_bytes=1234, deadline=2.5)
    monkeypatch.setenv("FAIRPROBE_MAX_ANSWER_BYTES", "lots")
    with pytest.raises(ConfigError, match="FAIRPROBE_MAX_ANSWER_BYTES must be a whole number"):
        AnswerLimits.from_env()
    with pytest.raises(ConfigError):
        AnswerLimits(deadline=float("nan"))


def _run(url: str, out: Path, limits: AnswerLimits | None = None):
    backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0, limits=limits)
    options = RunOptions(
        model="openai:test",
        model_args={"base_url": url},
        probes=["template"],
        limit=6,
        limit_order="first",
        out=out,
        batch_size=6,
        use_cache=False,
    )
    return run(options, backend=backend)


def _server(bad: Any):
    """A server answering the canned reply, except `bad(body)` -> (status, payload) for BAD_PROMPT."""

    def answer(number: int, body: dict[str, Any], auth: str | None):
        if prompt_text(body) == BAD_PROMPT:
            status, payload = bad(body)
            return status, payload, {}
        return 200, json.dumps(completion_json(body, canned_text(prompt_text(body)), CANNED_TOP)).encode(), {}

    return serve(answer)


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("logprob above 0", lambda b: (200, json.dumps(completions_answer({" she": 5.0, " he": -1.0})).encode())),
        ("logprob true", lambda b: (200, json.dumps(completions_answer({" she": True, " he": -1.0})).encode())),
        ("logprob 700", lambda b: (200, json.dumps(completions_answer({" she": 700, " he": -1.0})).encode())),
        ("text a number", lambda b: (200, json.dumps(completions_answer({" she": -1.0}, text=7)).encode())),
        (
            "answer too large",
            lambda b: (200, json.dumps(completions_answer({" she": -1.0}, text="x" * 50_000)).encode()),
        ),
    ],
)
def test_a_bad_answer_is_recorded_as_undetermined_and_the_run_goes_on(tmp_path: Path, name: str, bad: Any) -> None:
    with _server(bad) as (url, _):
        summary = _run(url, tmp_path / "run", AnswerLimits(max_bytes=20_000, deadline=10))
    samples = {s.prompt: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    assert len(samples) == 6
    assert samples[BAD_PROMPT].error.startswith("malformed response"), name
    metrics = summary.to_json_obj()["results"]["template"]["metrics"]
    assert metrics["undetermined"]["value"] == pytest.approx(1 / 6)
    for key in ("gld", "add"):  # the five good answers only (top-k bounds): no probability of 148, no ADD of 57
        low, high = metrics[key]["bounds"]
        assert 0 <= low <= high <= 1
    assert (tmp_path / "run" / "samples.jsonl").stat().st_size < 20_000


def test_a_trickling_server_is_cut_at_the_request_deadline(tmp_path: Path) -> None:
    ok = json.dumps(completions_answer({" she": -1.0})).encode()
    with _server(lambda b: (-3, ok)) as (url, _):  # one byte every 0.2 s: a per-read timeout never fires
        started = time.monotonic()
        _run(url, tmp_path / "run", AnswerLimits(deadline=1.0))
        elapsed = time.monotonic() - started
    samples = {s.prompt: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    assert "request deadline" in samples[BAD_PROMPT].error
    assert elapsed < 10  # two tries of 1 s each (plus the other prompts), not 0.2 s x len(answer) x tries


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("http://127.0.0.1:99999/v1", "port 99999"),
        ("http://[::1:8000/v1", "not a valid URL"),
        ("http:///v1", "names no host"),
    ],
)
def test_unusable_base_urls_are_model_errors(url: str, match: str) -> None:
    with pytest.raises(ModelError, match=match):
        load_model("openai:test", base_url=url)
