"""Sampling that survives a busy server: a request's time limit follows the tokens it asks for and the server's
measured rate (unless -M timeout= fixes it), a try that timed out gets twice the time, a failure's backoff pauses
every request (no retry adds load meanwhile), and sampled replies that arrived are kept when a later one fails."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from fairprobe.cache import Cache
from fairprobe.models import GenerationConfig
from fairprobe.models import pace as pace_module
from fairprobe.models.api import RetryPolicy, open_endpoint
from fairprobe.models.cached import CachedBackend
from fairprobe.models.pace import Pace
from openai_servers import scripted


def test_a_time_limit_follows_the_tokens_asked_and_the_slowest_measured_rate() -> None:
    pace = Pace(None)
    assert pace.limit(0) == 120.0 and pace.limit(300) == 120.0 + 300 / 2.0  # 2 tokens/s before any timing
    pace.measured(100, 10.0)  # 10 tokens/s, trusted to a quarter: 2.5
    pace.measured(4, 0.01)  # too short to time the generation: ignored
    assert pace.limit(300) == 120.0 + 300 / 2.5 and pace.limit(300, timeouts=2) == 4 * (120.0 + 300 / 2.5)
    pace.measured(300, 60.0)  # a slower reply (5 tokens/s) sets the rate
    assert pace.limit(300) == 120.0 + 300 / 1.25
    assert Pace(900.0).limit(300, timeouts=3) == 900.0  # -M timeout= is the user's: kept as set


def fast_pace(monkeypatch, base: float) -> None:
    """Limits of `base` seconds plus 100 tokens a second, so a test waits seconds, not minutes."""
    monkeypatch.setattr(pace_module, "BASE_SECONDS", base)
    monkeypatch.setattr(pace_module, "ASSUMED_RATE", 100.0)


def test_a_long_reply_gets_the_time_its_tokens_need(monkeypatch) -> None:
    fast_pace(monkeypatch, 0.5)
    with scripted(lambda n, b: "slow") as (url, seen):  # every answer takes 1.5 s
        model = open_endpoint("test", base_url=url, retry=RetryPolicy(attempts=1), implicit="topk")
        (reply,) = model.generate(["p"], GenerationConfig(max_new_tokens=200))  # 0.5 + 200 / 100 = 2.5 s
        assert reply.error is None and seen.count == 1
        fixed = open_endpoint("test", base_url=url, retry=RetryPolicy(attempts=1), implicit="topk", timeout=0.5)
        with pytest.raises(Exception, match=r"no answer from .* within 0.5 s; gave up after 1 attempts"):
            fixed.generate(["p"], GenerationConfig(max_new_tokens=200))


def test_a_try_that_timed_out_gets_twice_the_time(monkeypatch) -> None:
    fast_pace(monkeypatch, 1.0)
    with scripted(lambda n, b: "slow") as (url, seen):  # 1.5 s: over the first try's 1.01 s, under 2.02 s
        model = open_endpoint("test", base_url=url, retry=RetryPolicy(attempts=3, base_delay=0.01), implicit="topk")
        (reply,) = model.generate(["p"], GenerationConfig(max_new_tokens=1))
    assert reply.error is None and seen.count == 2


def test_a_replys_rate_is_measured() -> None:
    with scripted(latency=0.2) as (url, _):
        model = open_endpoint("test", base_url=url, implicit="topk")
        model.generate(["p"], GenerationConfig(max_new_tokens=40))
    (rate,) = model.pace.rates
    assert 40 / 1.0 < rate <= 40 / 0.2  # 40 tokens (the fake's usage) in 0.2 s and a little more


def test_a_failures_backoff_pauses_every_request() -> None:
    """Two requests at once; the first is refused (500) and waits 0.2-0.4 s; the requests sent after it (other
    prompts') wait that pause out too instead of loading the server meanwhile. The answers take 0.15 s longer than
    the refusal, so the refusal is read first however busy the machine is (the order is the test's, not the
    scheduler's)."""
    arrivals: list[float] = []
    lock = threading.Lock()

    def script(number: int, body: dict) -> str:
        with lock:
            arrivals.append(time.monotonic())
        if number != 0:
            time.sleep(0.15)
        return "500" if number == 0 else "ok"

    retry = RetryPolicy(attempts=3, base_delay=0.4, max_delay=0.4)
    with scripted(script, latency=0.02) as (url, seen):
        model = open_endpoint("test", base_url=url, retry=retry, implicit="topk", concurrency=2)
        replies = model.generate([f"p{i}" for i in range(6)], GenerationConfig())
    assert all(r.error is None for r in replies) and seen.count == 7
    assert all(t >= arrivals[0] + 0.19 for t in arrivals[2:])  # only the one already in flight went before


def test_sampled_replies_that_arrived_are_kept_when_a_later_one_fails(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    sampled = GenerationConfig(temperature=1.0, max_new_tokens=20)
    prompts, seeds = ["p1", "p2", "p3", "p4"], [11, 12, 13, 14]
    retry = RetryPolicy(attempts=2, base_delay=0.01)
    with scripted(lambda n, b: "500" if b["prompt"] == "p3" else "ok") as (url, _):
        served = open_endpoint("test", base_url=url, concurrency=1, retry=retry, implicit="topk")
        with pytest.raises(Exception, match="gave up after 2 attempts"):
            CachedBackend(served, cache).generate(prompts, sampled, seeds=seeds)
    assert cache.stats().entries == 2  # p1 and p2 arrived before p3 gave up (p4 was never sent)
    with scripted() as (url, seen):
        served = open_endpoint("test", base_url=url, concurrency=1, retry=retry, implicit="topk")
        CachedBackend(served, cache).generate(prompts, sampled, seeds=seeds)
    assert [b["prompt"] for b in seen.bodies] == ["p3", "p4"] and [b["seed"] for b in seen.bodies] == [13, 14]
