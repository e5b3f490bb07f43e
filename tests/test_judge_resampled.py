"""Set-level paired tests: a metric that is no mean of per-item values (a gap between two groups of items) is
recomputed by its family on the same resampled items in both runs (hand-computed values)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from fairprobe.families.base import Metric, RunContext, computes
from fairprobe.families.genderbench.hiring_an.family import FAMILY as HIRING_AN
from fairprobe.families.genderbench.items import Item
from fairprobe.families.genderbench.probe import probe_of
from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.families.paper import FAMILY as PAPER
from fairprobe.mitigation.judge import NO_PAIRED_ITEMS, UNDEFINED_ON_ITEMS, add_holm, metric_tests, reading
from fairprobe.records import MetricValue, ProbeSet, Sample, SetResult
from fairprobe.statistics.pairwise import N_RESOLVE
from fairprobe.statistics.resampled import SET_BOOTSTRAP, replicate_weights, resampled_tests
from fairprobe.statistics.stats import N_BOOTSTRAP


def weighted_mean(values: list[float]) -> Any:
    v = np.array(values)
    return lambda w: {"mean": (w @ v) / w.sum(axis=1)}


def test_the_p_value_is_read_from_the_replicates_of_the_same_draw() -> None:
    # Two items, 0 and 0 before, 1 and 0 after: the difference is 0.5 in the data and w1 / 2 in a replicate that
    # draws the first item w1 times of 2 (0, 1 or 2 with probabilities 1/4, 1/2, 1/4). A replicate is at or below 0
    # only when it draws the second item twice: p = 2 * that count / R, about 2 * 1/4 = 0.5.
    test = resampled_tests((weighted_mean([0.0, 0.0]), weighted_mean([1.0, 0.0])), 2, ["mean"])["mean"]
    assert test is not None and test.test == SET_BOOTSTRAP and test.n == 2
    never_first = sum(int((w[:, 0] == 0).sum()) for w in replicate_weights(2, N_BOOTSTRAP))
    assert test.p == pytest.approx(2 * never_first / N_BOOTSTRAP) and test.p == pytest.approx(0.5, abs=0.05)
    assert test.difference.value == pytest.approx(0.5) and test.difference.ci95 == (0.0, 1.0)
    same = resampled_tests((weighted_mean([0.2, 0.4]), weighted_mean([0.2, 0.4])), 2, ["mean"])["mean"]
    assert same is not None and same.equal and same.p is None


GROUPS = ("m", "m", "f", "f")


@computes(Metric("gap", "gap", better="zero", min_n=2, paired="resample", per_prompt=lambda r: np.full(len(r), np.nan)))
def gap_metric(records: Sequence[Any]) -> dict[str, MetricValue]:
    return {}


class Valued(Sample):
    value: float


def gap_of(ps: ProbeSet, records: Sequence[Valued], run: Any, options: Any) -> Any:
    """The mean value of the m items less that of the f items (NaN where a group is not drawn)."""
    values, men = np.array([r.value for r in records]), np.array([GROUPS[int(r.id)] == "m" for r in records])

    def weighted(w: np.ndarray) -> dict[str, np.ndarray]:
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"gap": (w @ (values * men)) / (w @ men) - (w @ (values * ~men)) / (w @ ~men)}

    return weighted


# The paper's family with a gap metric instead of its own: the judge reads only the declarations and `resample`.
GAP = replace(PAPER, name="gap_fake", record=Valued, metrics=(gap_metric,), resample=gap_of)


def test_a_gap_between_groups_gets_a_paired_bootstrap_over_items() -> None:
    original = [Valued(set="s", id=str(i), prompt="", value=0.0) for i in range(4)]
    variant = [Valued(set="s", id=str(i), prompt="", value=1.0 if GROUPS[i] == "m" else 0.0) for i in range(4)]
    results = tuple(SetResult(n=4, source="", metrics={"gap": MetricValue(value=v)}) for v in (0.0, 1.0))
    ps = ProbeSet(name="s", kind="fake", description="", source="", sha256="", probes=[])
    resamplers = (lambda rs: gap_of(ps, rs, None, None), lambda rs: gap_of(ps, rs, None, None))
    # Item by item the gap is undefined: the old per-item test had nothing to pair.
    assert metric_tests(GAP, (original, variant), results)["gap"]["note"] == NO_PAIRED_ITEMS
    test = metric_tests(GAP, (original, list(reversed(variant))), results, resamplers=resamplers)["gap"]
    # The gap is 0 before and 1 after on every replicate that draws both groups (a group is left out with
    # probability 2 * (1/2)**4 = 1/8: undefined, dropped). No replicate crosses 0, so the p-value is resolved from
    # 100,000 replicates and sits at its floor, 1 over the replicates that drew both groups.
    assert (test["test"], test["n"], test["difference"]["value"], test["difference"]["ci95"]) == (
        SET_BOOTSTRAP,
        4,
        1.0,
        [1.0, 1.0],
    )
    both = sum(int(((w[:, :2].sum(1) > 0) & (w[:, 2:].sum(1) > 0)).sum()) for w in replicate_weights(4, N_RESOLVE))
    assert both / N_RESOLVE == pytest.approx(7 / 8, abs=0.005)
    assert test["p_floor"] is True and test["p"] == pytest.approx(1 / both)
    table = {
        "method_order": ["Original", "Fix"],
        "sets": {"s": {"methods": {"Original": {}, "Fix": {"vs_original": {"gap": test}}}}},
    }
    add_holm(table)
    assert test["p_holm"] == test["p"] and test["reading"] == "worse"  # |1| > |0|: further from zero


def _record(i: int, answers: list[str]) -> GenderBenchSample:
    return GenderBenchSample(
        set="hiring-an", id=str(i), prompt="p", mode="sample", replies=[answers], answers=[answers]
    )


def test_hiring_an_gap_is_tested_through_its_own_metric_code() -> None:
    # Two men and two women; Original accepts all four (gap 0), the variant accepts both men and one woman:
    # acceptance 1 - 1/2 = 0.5 more for men. One item alone has no gap to pair.
    meta = [("male", 0.2), ("male", 0.8), ("female", 0.2), ("female", 0.8)]
    items = [
        Item(str(i), ("p",), ({},), {"gender": g, "role_score": s, "race": "white", "qualification": "high"})
        for i, (g, s) in enumerate(meta)
    ]
    ps = ProbeSet(
        name="hiring-an",
        kind="genderbench",
        description="",
        source="",
        sha256="",
        probes=[probe_of(it, "t") for it in items],
    )
    original = [_record(i, ["yes"]) for i in range(4)]
    variant = [_record(i, ["yes"] if i != 3 else ["no"]) for i in range(4)]
    options = HIRING_AN.options()
    before, after = (HIRING_AN.summarize(ps, rs, RunContext(), options) for rs in (original, variant))  # type: ignore[arg-type]
    assert (before.metrics["diff_acceptance_rate"].value, after.metrics["diff_acceptance_rate"].value) == (0.0, 0.5)
    assert HIRING_AN.resample is not None
    resamplers = tuple(lambda rs: HIRING_AN.resample(ps, rs, RunContext(), options) for _ in range(2))  # type: ignore[misc]
    tests = metric_tests(HIRING_AN, (original, variant), (before, after), resamplers=resamplers)  # type: ignore[arg-type]
    marked = {m.name for m in HIRING_AN.declared() if m.marks is not None}
    assert marked <= set(tests)
    gap = tests["diff_acceptance_rate"]
    assert (gap["test"], gap["n"], gap["difference"]["value"]) == (SET_BOOTSTRAP, 4, 0.5)
    assert (gap["before"], gap["after"]) == (0.0, 0.5) and 0 < gap["p"] <= 1
    assert tests["diff_abs_acceptance_rate"]["difference"]["value"] == pytest.approx(0.5)
    # A regression slope needs three items of a gender: two here, undefined in both runs.
    regression = tests["diff_regression"]
    assert (regression["test"], regression["n"], regression["note"]) == ("none", 0, UNDEFINED_ON_ITEMS)
    assert reading(regression) == "too little data"
