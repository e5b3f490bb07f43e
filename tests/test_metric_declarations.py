"""Every metric is declared next to the function that computes it (`families.base.computes`): a declared metric that
no input ever computes, or a computed one that is not declared, fails here.

Each built-in family's samples are made by its own `sample` function from canned replies that reach every branch
(failed calls, malformed scores, bounded probabilities, extra groups, WinoBias, the "they" control, the
intersectional slices), then summarized; each metric function must have returned every name it declares.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from conftest import exact_scores
from fairprobe.catalog import FAMILIES
from fairprobe.errors import ConfigError
from fairprobe.families import (
    Family,
    Metric,
    MetricFunction,
    NoOptions,
    Replies,
    Request,
    RunContext,
    computes,
    load_probe_set,
)
from fairprobe.families.base import UndeclaredMetric
from fairprobe.families.paper import PaperOptions
from fairprobe.models.base import Completion, ContinuationScore, Scores
from fairprobe.records import MetricValue, Probe, ProbeSet, Sample, SetResult
from fairprobe.runner import check_declared


def declared_but_never_computed(family: Family) -> list[str]:
    """The declared metrics (a pattern counts once any name matching it was computed) no function returned."""
    return [m.name for fn in family.metrics for m in fn.metrics if m.name not in fn.computed]


def paper_scores(n: int, bounded: bool) -> Scores:
    """Scores of n continuations: exact, or every third one only bounded (as over a server's top-k)."""
    rows = []
    for k in range(n):
        p = 0.01 + 0.002 * (k % 5)
        rows.append(ContinuationScore(math.log(p), 1, None, "upper_bound" if bounded and k % 3 == 0 else "exact"))
    return Scores(tuple(rows), mode="topk" if bounded else None, top_logprobs=20 if bounded else None)


def test_every_paper_metric_is_computed(tmp_path: Path) -> None:
    family = FAMILIES.get("paper")
    words = json.loads((Path(__file__).parents[1] / "src/fairprobe/data/attribute_words.json").read_text())
    words["groups"]["fae"] = ["fae", "faer"]  # a group of the user's own: its share matches the `*_share` pattern
    path = tmp_path / "words.json"
    path.write_text(json.dumps(words))
    options = PaperOptions(words=path)
    run = RunContext()
    ps = load_probe_set("template", limit=8)
    n = len(options.continuations())
    for bounded in (False, True):
        samples = []
        for i, probe in enumerate(ps.probes):
            text = [" she left.", " he left.", " it rained.", ""][i % 4]
            reply = Completion(text=text, error="malformed response: no choices" if i == 7 else None)
            scores = paper_scores(n, bounded) if i != 6 else Scores((), error="malformed scoring answer", mode="exact")
            samples.append(
                family.sample(ps, probe, Replies({"continuation": reply}, {"next_words": scores}), run, options)
            )
        check_declared(family, ps.name, family.summarize(ps, samples, run, options))
    # The notes of a set without probabilities (--implicit off).
    off = PaperOptions(implicit="off")
    replies = Replies({"continuation": Completion(text=" she left.")})
    family.summarize(ps, [family.sample(ps, p, replies, run, off) for p in ps.probes], run, off)
    assert declared_but_never_computed(family) == []


def test_every_gender_income_metric_is_computed(shared_data: Path) -> None:
    family = FAMILIES.get("gender_income")
    run = RunContext()
    options = family.parse_options({"source": "uci", "n": "40", "mode": "sample"})
    ps = load_probe_set("gender-income", data_dir=shared_data, source="uci", n="40")
    answers = [("Yes", "No"), ("No", "No"), ("Yes", "Yes"), ("I cannot answer that.", "No"), ("No", "Yes")]
    samples = [
        family.sample(ps, p, Replies({"original": Completion(a), "flipped": Completion(b)}), run, options)
        for p, (a, b) in zip(ps.probes, answers * 8, strict=True)
    ]
    assert all(s.race is not None for s in samples)  # the intersectional slices are computed
    check_declared(family, ps.name, family.summarize(ps, samples, run, options))
    # Exact mode: each version's yes/no forms scored (one pair's scores failed).
    exact = family.parse_options({"source": "uci", "n": "40", "mode": "exact"})
    scored = []
    for i, p in enumerate(ps.probes):
        probs = [0.1 + 0.01 * (i % 7), 0.05, 0.2, 0.1]
        failed = Scores((), error="malformed scoring answer", mode="exact")
        scores = {"original": exact_scores(probs) if i != 3 else failed, "flipped": exact_scores(probs[::-1])}
        scored.append(family.sample(ps, p, Replies({}, scores), run, exact))
    check_declared(family, ps.name, family.summarize(ps, scored, run, exact))
    assert declared_but_never_computed(family) == []


def test_every_professional_bias_metric_is_computed(shared_data: Path) -> None:
    family = FAMILIES.get("professional_bias")
    run = RunContext()
    for source in ("builtin", "winobias"):
        options = family.parse_options({"source": source, "mode": "sample"})
        ps = load_probe_set("professional-bias", data_dir=shared_data, source=source)  # WinoBias: pro and anti
        samples = []
        for i, probe in enumerate(ps.probes):
            named = [probe.meta["biased_answer"], probe.meta["anti_stereotypical_answer"], "Nobody."][i % 3]
            completions = {"response": Completion(f"The {named}."), "they": Completion(f"The {named}.")}
            samples.append(family.sample(ps, probe, Replies(completions), run, options))
        check_declared(family, ps.name, family.summarize(ps, samples, run, options))
        # Exact mode: the two people scored (the first prompt's scores failed).
        exact = family.parse_options({"source": source, "mode": "exact"})
        scored = []
        for i, probe in enumerate(ps.probes):
            probs = exact_scores([0.2 + 0.01 * (i % 5), 0.1, 0.05, 0.05, 0.1, 0.1, 0.05, 0.05])
            first = Scores((), error="malformed scoring answer", mode="exact") if i == 0 else probs
            scored.append(family.sample(ps, probe, Replies({}, {"response": first, "they": probs}), run, exact))
        check_declared(family, ps.name, family.summarize(ps, scored, run, exact))
    assert declared_but_never_computed(family) == []


ONE = Metric("one", "one")


@computes(ONE)
def honest(samples: list[Sample]) -> dict[str, MetricValue]:
    return {"one": MetricValue(value=1.0)}


@computes(ONE)
def drifting(samples: list[Sample]) -> dict[str, MetricValue]:
    return {"one": MetricValue(value=1.0), "two": MetricValue(value=2.0)}


def tiny_family(metrics: tuple[MetricFunction, ...], summarize) -> Family:
    return Family[Sample, NoOptions](
        name="tiny",
        suite="tiny",
        description="",
        record=Sample,
        metrics=metrics,
        requests=lambda ps, probe, run, options: [Request("x", probe.prompt)],
        sample=lambda ps, probe, replies, run, options: Sample(set=ps.name, id=probe.id, prompt=probe.prompt),
        summarize=summarize,
        options=NoOptions,
    )


def test_a_computed_metric_that_is_not_declared_fails() -> None:
    with pytest.raises(UndeclaredMetric, match=r"drifting returned undeclared metric\(s\) two"):
        drifting([])
    # A summary naming a metric outside the family's declared ones fails the run too.
    ps = ProbeSet(name="s", source="x", sha256="0", probes=[Probe(id="0", prompt="p")])
    family = tiny_family((honest,), lambda *a: SetResult(n=1, source="x", metrics={"three": MetricValue(value=3.0)}))
    with pytest.raises(UndeclaredMetric, match=r"family 'tiny' computed undeclared metric\(s\) on s: three"):
        check_declared(family, "s", family.summarize(ps, [], RunContext(), NoOptions()))
    ok = SetResult(n=1, source="x", metrics=honest([]))
    assert check_declared(tiny_family((honest,), None), "s", ok) is ok
    assert declared_but_never_computed(tiny_family((honest,), None)) == []
    with pytest.raises(ConfigError, match="probe set 's' has no option 'k'"):
        tiny_family((honest,), None).parse_options({"k": "v"}, "s")
