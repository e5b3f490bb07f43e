"""The shared cache: the SQLite store, the CachedBackend wrapper, and runs that ask the model nothing twice."""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import exact_scores, fake_loglikelihood
from fairprobe.cache import Cache, cache_key
from fairprobe.cli import app
from fairprobe.errors import ConfigError
from fairprobe.models import Completion, GenerationConfig
from fairprobe.models.api import RetryPolicy
from fairprobe.models.base import ScoreRequest, Scores
from fairprobe.models.cached import CachedBackend
from fairprobe.records import ChatMessage
from fairprobe.runner import RunOptions, read_samples, run
from openai_servers import scripted

WORDS = (" she", " he", " her", " his")


class CountingBackend:
    """A backend whose answer depends on prompt and seed; counts the prompts it is asked."""

    name = "counting"
    has_chat_template = False

    def __init__(self) -> None:
        self.asked: list[str] = []

    def identity(self) -> dict[str, Any]:
        return {"id": "counting"}

    def generate(self, prompts, config: GenerationConfig, score=None) -> list[Completion]:
        self.asked.extend(prompts)
        out = []
        for i, p in enumerate(prompts):
            scores = None if score is None else exact_scores([1 / (3 + len(p))] * len(score[i]))
            error = "malformed response: no choices" if "broken" in p else None
            out.append(Completion(text=f"{p}|{config.seed}", scores=scores, error=error))
        return out

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        self.asked.extend(str(r.prompt) for r in requests)
        return fake_loglikelihood(requests, 0.25)


def test_store_round_trip_stats_and_clear(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    key = cache_key({"a": 1, "b": [1, 2]})
    assert key == cache_key({"b": [1, 2], "a": 1})  # canonical JSON: key order does not matter
    cache.put(key, {"verdict": "yes", "p": 0.1 + 0.2}, "judge", "openai:judge")
    cache.put_many([("k1", 1), ("k2", 2)], "generation", "m")
    assert cache.get(key) == {"verdict": "yes", "p": 0.1 + 0.2}  # floats come back bit for bit
    assert cache.get_many(["k1", "k2", "nope"]) == {"k1": 1, "k2": 2}
    stats = cache.stats()
    assert (stats.entries, stats.by_kind, stats.by_model) == (
        3,
        {"generation": 2, "judge": 1},
        {"m": 2, "openai:judge": 1},
    )
    with sqlite3.connect(cache.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert cache.clear("m") == 2 and cache.stats().entries == 1
    assert cache.clear() == 1 and cache.get(key) is None


def test_unusable_cache_paths_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cache path is a folder"):
        Cache(tmp_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigError, match=f"cache database {junk} is damaged or unreadable"):
        Cache(junk)


def test_concurrent_writers_from_threads(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")

    def write(t: int) -> None:
        for i in range(50):
            cache.put(f"{t}-{i}", i, "generation", "m")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Cache(tmp_path / "c.sqlite").stats().entries == 400


def test_cached_backend_asks_only_misses_and_returns_identical_values(tmp_path: Path) -> None:
    inner = CountingBackend()
    model = CachedBackend(inner, Cache(tmp_path / "c.sqlite"))
    greedy = GenerationConfig(seed=1)
    first = model.generate(["a", "bb"], greedy, [WORDS] * 2)
    again = model.generate(["bb", "ccc", "a"], greedy.model_copy(update={"seed": 2}), [WORDS] * 3)
    assert inner.asked == ["a", "bb", "ccc"]  # greedy answers do not depend on the seed
    assert [c.text for c in again] == ["bb|1", "ccc|2", "a|1"]
    assert again[0].scores == first[1].scores  # the scores read in the same call come back bit for bit
    assert (model.hits, model.misses) == (2, 3)
    model.generate(["a"], greedy, None)  # without continuations to score: another question
    sampled = GenerationConfig(temperature=0.7, seed=5)
    model.generate(["a"], sampled, [WORDS])
    model.generate(["a"], sampled, [WORDS])
    model.generate(["a"], sampled.model_copy(update={"seed": 6}), [WORDS])  # sampling: the seed is part of the key
    assert inner.asked == ["a", "bb", "ccc", "a", "a", "a"]
    # loglikelihood answers are cached too, by prompt and continuations (no decoding parameters).
    asked = [ScoreRequest("a", ("(a)", "(b)")), ScoreRequest([ChatMessage(role="user", content="a")], ("(a)",))]
    scored = model.loglikelihood(asked)
    assert model.loglikelihood(asked[::-1]) == scored[::-1]
    assert inner.asked[6:] == ["a", str(asked[1].prompt)] and scored[0].continuations[0].logprob == math.log(0.25)


def test_model_args_are_part_of_the_key_but_the_api_key_is_not(tmp_path: Path) -> None:
    inner = CountingBackend()
    cache = Cache(tmp_path / "c.sqlite")
    CachedBackend(inner, cache).generate(["a"], GenerationConfig())
    CachedBackend(inner, cache, {"api_key": "sk-1"}).generate(["a"], GenerationConfig())
    assert inner.asked == ["a"]  # no args and an API key alone: the same question
    CachedBackend(inner, cache, {"revision": "v2", "api_key": "sk-2"}).generate(["a"], GenerationConfig())
    CachedBackend(inner, cache, {"revision": "v2"}).generate(["a"], GenerationConfig())
    assert inner.asked == ["a", "a"]  # another revision is another model


def test_errors_are_not_cached(tmp_path: Path) -> None:
    inner = CountingBackend()
    model = CachedBackend(inner, Cache(tmp_path / "c.sqlite"))
    assert model.generate(["broken"], GenerationConfig())[0].error
    model.generate(["broken"], GenerationConfig())
    assert inner.asked == ["broken", "broken"]


def _options(url: str, out: Path, cache: Path, words: Path | None = None, **kw: Any) -> RunOptions:
    base = {"model": "openai:test", "probes": ["template"], "limit": 6, "out": out, "cache": cache}
    base.update(model_args={"base_url": url, "implicit": "topk"}, probe_options={"words": str(words)} if words else {})
    return RunOptions(**{**base, **kw})


def test_rerun_more_prompts_and_rescoring_cost_no_repeated_calls(tmp_path: Path) -> None:
    cache = tmp_path / "c.sqlite"
    words = json.loads((Path(__file__).parents[1] / "src/fairprobe/data/attribute_words.json").read_text())
    words["detection"]["female"].append("kind")  # another detector, same probability pairs
    rescore = tmp_path / "words.json"
    rescore.write_text(json.dumps(words))
    with scripted() as (url, seen):
        # One call per prompt: the continuation, with the words' next-word scores read from it.
        first = run(_options(url, tmp_path / "a", cache))
        assert seen.count == 6
        second = run(_options(url, tmp_path / "b", cache))
        assert seen.count == 6  # the same suite again: no server call
        run(_options(url, tmp_path / "c", cache, limit=8))
        assert seen.count == 8  # two more prompts: two calls
        rescored = run(_options(url, tmp_path / "d", cache, words=rescore))
        assert seen.count == 8  # re-scoring with another detector: no call
        run(_options(url, tmp_path / "e", cache, use_cache=False))
        assert seen.count == 14  # --no-cache asks again
    assert first.to_json_obj() == second.to_json_obj()
    assert rescored.results["template"].n == 6
    rescored_words = [s.words_found for s in read_samples(tmp_path / "d" / "samples.jsonl")]
    assert ["she", "kind"] in rescored_words  # the new detector saw the cached continuations


def test_answers_paid_for_are_kept_when_a_later_request_fails(tmp_path: Path) -> None:
    from fairprobe.models.api import open_endpoint

    cache = Cache(tmp_path / "c.sqlite")
    with scripted(lambda n, b: "ok" if n < 2 else "500") as (url, _):
        model = CachedBackend(
            open_endpoint(
                "test",
                base_url=url,
                concurrency=1,
                retry=RetryPolicy(attempts=2, base_delay=0.01),
                implicit="topk",
            ),
            cache,
        )
        with pytest.raises(Exception, match="gave up after 2 attempts"):
            model.generate(["p1", "p2", "p3", "p4"], GenerationConfig())
    assert cache.stats().entries == 2


def test_cache_cli_stats_and_clear(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    Cache(path).put_many([("k1", 1), ("k2", 2)], "generation", "openai:test")

    def cli(*args: str) -> str:
        done = CliRunner().invoke(app, ["cache", *args, "--cache", str(path)], terminal_width=400)
        assert done.exit_code == 0, done.output
        return done.output

    stats = cli("stats")
    assert f"{path}: 2 entries" in stats and "openai:test" in stats
    assert "deleted 2 entries" in cli("clear")
    assert ": 0 entries" in cli("stats")
