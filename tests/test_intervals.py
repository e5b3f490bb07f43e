"""Intervals honest at small n and significance that means something, on hand-made counts: Delta's interval from
GAS(F)'s, absolute differences from their signed intervals, the "too little data" badge, the p-value floor and its
resolution, equal-within-tolerance and "unchanged by design"."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console
from scipy import stats

from fairprobe.families.gender_income.metrics import decodingtrust_metrics, pair_metrics
from fairprobe.families.paper import FAMILY as PAPER
from fairprobe.families.paper import PaperSample
from fairprobe.families.paper.metrics import gas_metrics
from fairprobe.families.professional_bias.metrics import professional_metrics
from fairprobe.families.professional_bias.they_control import they_control_metrics
from fairprobe.formatting import format_p
from fairprobe.mitigation.judge import metric_tests
from fairprobe.mitigation.variants import UNCHANGED_BY_DESIGN, decoding_only
from fairprobe.models import GenerationConfig
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.console import print_summary
from fairprobe.report.html import render_html
from fairprobe.report.runs import load_runs
from fairprobe.report.severity import default_thresholds
from fairprobe.report.tables import significance
from fairprobe.report.verdict import verdict
from fairprobe.runner import RunOptions
from fairprobe.statistics.pairwise import N_RESOLVE, bootstrap_test, holm
from fairprobe.statistics.stats import folded, wilson_interval

Z = 1.959963984540054


def test_delta_interval_from_two_gendered_continuations_includes_zero() -> None:
    m = gas_metrics(["female", "female", None])
    # Wilson for 2 of 2: lower (p + z^2/2n - z sqrt(z^2/4n^2)) / (1 + z^2/n) with p = 1, n = 2; upper 1.
    lower = (1 + Z**2 / 4 - Z * np.sqrt(Z**2 / 16)) / (1 + Z**2 / 2)
    assert m["gas_f"].ci95 == pytest.approx((lower, 1.0))
    assert lower == pytest.approx(0.3424, abs=1e-4) and lower < 0.5
    # GAS(F)'s interval holds 0.5, so Delta = |2 GAS(F) - 1| = 1 gets [0, 1], never the old [1, 1].
    assert (m["delta"].value, m["delta"].ci95) == (1.0, pytest.approx((0.0, 1.0)))


def test_delta_interval_agrees_with_gas_f_on_the_issues_case() -> None:
    # The issue: Delta 0.111 [0.111, 0.778] beside GAS(F) [0.267, 0.811], which includes 0.5: 5 of 9 female-first.
    m = gas_metrics(["female"] * 5 + ["male"] * 4)
    lo, hi = wilson_interval(5, 9)
    assert (lo, hi) == pytest.approx((0.2667, 0.8112), abs=1e-4)
    assert m["delta"].value == pytest.approx(1 / 9)
    assert m["delta"].ci95 == pytest.approx((0.0, 2 * (hi - 0.5)))
    # Wholly female: GAS(F) 20 of 20 -> [0.839, 1]: Delta [2 (0.839 - 0.5), 1].
    all_female = gas_metrics(["female"] * 20)
    assert all_female["delta"].ci95 == pytest.approx((2 * (wilson_interval(20, 20)[0] - 0.5), 1.0))


def test_folded_interval_hand_computed() -> None:
    assert folded(-0.2, 0.5) == (0.0, 0.5)
    assert folded(0.1, 0.3) == (0.1, 0.3)
    assert folded(-0.4, -0.1) == (0.1, 0.4)
    assert folded(0.2, 0.9, centre=0.5) == (0.0, 0.4)


def test_dp_difference_interval_is_not_biased_away_from_zero() -> None:
    # 8 records: women (sex 0) say yes 2 of 4, men 1 of 4: DP = |0.5 - 0.25| = 0.25.
    answers = ["yes", "yes", "no", "no", "yes", "no", "no", "no"]
    labels = ["yes", "no", "yes", "no", "yes", "no", "yes", "no"]
    sexes = ["Female"] * 4 + ["Male"] * 4
    m = decodingtrust_metrics(answers, labels, sexes)
    assert m["dp_difference"].value == pytest.approx(0.25)
    # The signed gap's interval holds 0 at this size, so |gap|'s starts at 0 (a bootstrap of |gap| could not).
    assert m["dp_difference"].ci95[0] == 0.0 and m["dp_difference"].ci95[1] >= 0.25
    assert m["dp_difference"].too_little_data is None


def test_every_answer_the_same_is_too_little_data_not_a_healthy_zero() -> None:
    # The issue's case: "Yes" to every income prompt, accuracy 0.45: DP = EO = 0 by construction.
    labels = ["yes"] * 9 + ["no"] * 11
    m = decodingtrust_metrics(["yes"] * 20, labels, ["Female", "Male"] * 10)
    assert m["accuracy"].value == pytest.approx(0.45)
    for name in ("dp_difference", "eo_difference"):
        assert m[name].value == 0.0 and m[name].too_little_data == 'every answer was "yes"'
        grade = default_thresholds().grade("gender-income", name, m[name], 20)
        assert grade is not None and (grade.label, grade.certain) == ("too little data", False)
    pairs = pair_metrics(["same"] * 20, ["Female"] * 20, ["yes"] * 20, ["yes"] * 20)
    assert pairs["hit_rate"].value == 0.0 and pairs["hit_rate"].too_little_data == 'every answer was "yes"'
    summary = Summary(
        fairprobe_version="0",
        model="toy",
        results={"gender-income": SetResult(n=20, source="x", metrics={**m, **pairs})},
    )
    assert verdict(summary) == (
        'toy: the gender-income flip rate says nothing about gender (every answer was "yes", so no answer could flip).'
    )
    out = Console(record=True, width=200, color_system=None)
    print_summary(summary, out)
    assert "0.000 [0.00, 0.00]~" in out.export_text()  # no colour, the ~ of too little data


def test_no_named_occupation_is_too_little_data() -> None:
    m = professional_metrics([None, None, None], ["nurse"] * 3, ["doctor"] * 3)
    assert m["hit_rate"].value == 0.0 and m["hit_rate"].too_little_data == "no reply named either occupation"
    # Gemma's case: no reply, with she/he or with they, names an occupation: gender effects of 0 by construction.
    effects = they_control_metrics(
        ["she", "he"], ["f1", "f1"], [None, None], [None, None], ["nurse"] * 2, ["doctor"] * 2, ["nurse"] * 2
    )
    assert effects["gender_effect_she"].value == 0.0
    assert effects["gender_effect_she"].too_little_data == "no reply named either occupation"
    summary = Summary(
        fairprobe_version="0", model="toy", results={"professional-bias": SetResult(n=3, source="x", metrics=m)}
    )
    assert (
        verdict(summary)
        == "toy: professional-bias says nothing about occupational stereotypes (no reply named either occupation)."
    )


def test_the_report_shows_a_grey_badge_instead_of_a_mark(tmp_path: Path) -> None:
    metrics = {
        "gas": MetricValue(value=0.25, ci95=(0.03, 0.7), n=4),
        "delta": MetricValue(value=1.0, ci95=(0.0, 1.0), n=1),
    }
    summary = Summary(fairprobe_version="0", model="toy", results={"a": SetResult(n=4, source="x", metrics=metrics)})
    (tmp_path / "summary.json").write_text(json.dumps(summary.to_json_obj()))
    html = render_html(load_runs([tmp_path]))
    assert '<span class="mark mark-N" title="too little data: 1 case, fewer than the 10 this metric needs">' in html


def test_p_value_floor_is_reported_below_one_over_b() -> None:
    floor = bootstrap_test(np.zeros(40), np.full(40, 0.3))
    assert (floor.p, floor.p_floor) == (1 / N_RESOLVE, True)
    assert format_p(floor.p, floor.p_floor) == "< 1e-05"
    # 24 such tests (the issue's model comparison): Holm gives 2.4e-4, "***", where the 2,000-resample floor gave
    # 2 / 2001 x 24 = 0.024 and only "*".
    adjusted = holm([floor.p] * 24)
    assert adjusted[0] == pytest.approx(24 / N_RESOLVE) and significance(adjusted[0]) == "***"


def test_a_small_p_value_is_resolved_with_more_resamples() -> None:
    # d = 39 ones and one -8: a resampled mean is <= 0 exactly when the -8 is drawn at least 5 times in 40 draws,
    # so the two-sided p-value is 2 P(Binomial(40, 1/40) >= 5) = 0.0062: 2,000 resamples see ~6 such replicates,
    # too few, so 100,000 are drawn.
    d = np.array([1.0] * 39 + [-8.0])
    test = bootstrap_test(np.zeros(40), d)
    expected = 2 * stats.binom.sf(4, 40, 1 / 40)
    assert expected == pytest.approx(0.0062, abs=1e-4)
    assert test.p == pytest.approx(expected, rel=0.1) and not test.p_floor


def test_float_noise_is_equal_never_significant() -> None:
    # The issue's case: temperature 0.3 "significant" on GLD for a difference of 1.9e-7 (batching noise).
    rng = np.random.default_rng(0)
    gld = rng.random(160)
    noise = bootstrap_test(gld, gld + rng.normal(1.9e-7, 5e-8, 160))
    assert (noise.equal, noise.p, noise.test) == (True, None, "equal within 1e-06")
    assert holm([noise.p, 0.01]) == [None, 0.01]  # not counted in Holm's family


def sample(i: int, first: str | None, f: float, m: float) -> PaperSample:
    return PaperSample(set="s", id=str(i), prompt="p", continuation="", first_gender=first, p_female=[f], p_male=[m])


def test_decoding_only_methods_leave_implicit_metrics_unchanged_by_design() -> None:
    base = RunOptions(probes=["template"])
    hyper = base.model_copy(update={"generation": GenerationConfig(temperature=0.3)})
    guided = base.model_copy(update={"probe_options": {"paper.instruction": "x"}})
    assert decoding_only(hyper, base) and not decoding_only(guided, base)
    original = [sample(i, "male" if i % 2 else None, 0.1, 0.3) for i in range(10)]
    method = [sample(i, None, 0.1, 0.3 + 1e-7) for i in range(10)]
    result = SetResult(n=10, source="s", metrics={k: MetricValue(value=0.5) for k in ("gas", "gld", "add")})
    stats_ = metric_tests(PAPER, (original, method), (result, result), UNCHANGED_BY_DESIGN)
    assert stats_["gld"]["unchanged_by_design"] == UNCHANGED_BY_DESIGN == stats_["add"]["unchanged_by_design"]
    assert stats_["gas"]["original_only"] == 5 and stats_["gas"]["method_only"] == 0
    tested = metric_tests(PAPER, (original, method), (result, result))
    assert tested["gld"]["equal"] is True and tested["gld"]["p"] is None  # 1e-7 apart: equal, not tested
