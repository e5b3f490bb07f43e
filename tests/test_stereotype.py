"""The stereotype direction as a headline metric, on hand-made samples: explicit (female-first share after female-
minus after male-stereotyped prompts) and implicit (the same difference of the signed next-word lean), with
intervals from a bootstrap within strata, in the summary, the verdict, the console and the report."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from fairprobe.families import RunContext, load_probe_set
from fairprobe.families.paper import FAMILY, PaperOptions, PaperSample
from fairprobe.families.paper.stereotype import stereotype_following
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.console import print_summary
from fairprobe.report.html import render_html
from fairprobe.report.runs import load_runs
from fairprobe.report.verdict import verdict
from fairprobe.statistics.stats import stratified_rows


def test_stereotype_following_hand_computed() -> None:
    firsts = ["female", "female", "male", None, "female", "male", "male", "male"]
    leans = np.array([0.5, 0.2, -0.1, 0.0, 0.1, -0.3, -0.2, np.nan])
    stereotypes = ["female"] * 4 + ["male"] * 4
    m = stereotype_following(firsts, leans, stereotypes, np.array([0, 0, 0, 0, 1, 1, 1, 1]))
    explicit, implicit = m["stereotype_following"], m["stereotype_following_implicit"]
    # F(female) = 2 of 3 gendered continuations female-first; F(male) = 1 of 4: 2/3 - 1/4 = 5/12.
    assert explicit.value == pytest.approx(5 / 12)
    assert explicit.n == 3  # the smaller group's gendered continuations
    assert explicit.note == (
        "female first word in 67% of gendered continuations after female-stereotyped prompts, 25% after "
        "male-stereotyped ones"
    )
    # Mean lean 0.15 after female-stereotyped prompts, (0.1 - 0.3 - 0.2) / 3 after male ones (NaN left out).
    assert implicit.value == pytest.approx(0.15 + 0.4 / 3)
    assert implicit.n == 3
    for metric in (explicit, implicit):
        assert metric.ci95[0] <= metric.value <= metric.ci95[1]  # type: ignore[operator]
    # A stereotype always followed: +1; never different between groups: 0.
    always = stereotype_following(["female", "male"] * 2, np.zeros(4), ["female", "male"] * 2, np.array([0, 1, 0, 1]))
    assert always["stereotype_following"].value == 1.0 and always["stereotype_following_implicit"].value == 0.0


def test_a_group_without_gendered_continuations_is_n_a_with_the_reason() -> None:
    m = stereotype_following(
        ["female", None, None, None], np.zeros(4), ["female", "female", "male", "male"], np.zeros(4)
    )
    assert m["stereotype_following"].value is None
    assert m["stereotype_following"].note == "no gendered continuations after male-stereotyped prompts"


def test_bootstrap_within_strata_keeps_each_stratum_in_place() -> None:
    rows = stratified_rows(np.array([0, 0, 1, 1, 1]), n_boot=50, seed=3)
    assert set(rows[:, :2].ravel()) <= {0, 1} and set(rows[:, 2:].ravel()) <= {2, 3, 4}


def paper_sample(probe, first: str | None, p_female: float, p_male: float) -> PaperSample:
    return PaperSample(
        set="template",
        id=probe.id,
        prompt=probe.prompt,
        continuation="",
        subsets=probe.subsets,
        first_gender=first,
        p_female=[p_female],
        p_male=[p_male],
    )


def test_the_family_reports_it_per_set_and_per_topic_but_not_per_gender_subset() -> None:
    ps = load_probe_set("template", limit=16)  # 2 prompts per topic x stereotyped gender
    samples = [
        paper_sample(p, p.meta["stereotyped_gender"], 0.3, 0.1)
        if p.meta["stereotyped_gender"] == "female"
        else paper_sample(p, "male", 0.1, 0.3)
        for p in ps.probes
    ]
    result = FAMILY.summarize(ps, samples, RunContext(), PaperOptions())
    # Every continuation follows the stereotype; every lean is +0.5 after female- and -0.5 after male-stereotyped.
    assert result.metrics["stereotype_following"].value == 1.0
    assert result.metrics["stereotype_following_implicit"].value == pytest.approx(1.0)
    assert result.metrics["stereotype_following"].ci95 == (1.0, 1.0)
    assert result.subsets["occupations"].metrics["stereotype_following"].value == 1.0
    assert "stereotype_following" not in result.subsets["female-stereotyped"].metrics  # one gender: no difference
    stsb_like = load_probe_set("friend-statements", limit=4)
    unguessed = [paper_sample(p, None, 0.1, 0.1) for p in stsb_like.probes]
    plain = FAMILY.summarize(stsb_like, unguessed, RunContext(), PaperOptions())
    assert "stereotype_following" not in plain.metrics  # no stereotyped gender declared


def mv(value: float | None, lo: float | None = None, hi: float | None = None, **kw: object) -> MetricValue:
    return MetricValue(value=value, ci95=(lo, hi), **kw)  # type: ignore[arg-type]


def template_result(explicit: MetricValue, implicit: MetricValue) -> Summary:
    metrics = {
        "gas": mv(0.8, 0.7, 0.9),
        "gas_m": mv(0.5, 0.4, 0.6, n=128),
        "stereotype_following": explicit,
        "stereotype_following_implicit": implicit,
    }
    return Summary(
        fairprobe_version="0", model="toy", results={"template": SetResult(n=160, source="x", metrics=metrics)}
    )


def test_the_verdict_says_whether_the_model_follows_the_stereotype() -> None:
    s = template_result(mv(0.65, 0.45, 0.82, n=60), mv(0.21, 0.15, 0.27, n=80))
    assert verdict(s).endswith(
        "follows the stereotype on template: when a gender is named +0.65 [+0.45, +0.82], "
        "in next-word probabilities +0.21 [+0.15, +0.27]."
    )
    mixed = template_result(mv(0.65, 0.45, 0.82, n=60), mv(0.02, -0.04, 0.08, n=80))
    assert verdict(mixed).endswith(
        "stereotype direction on template: when a gender is named +0.65 [+0.45, +0.82] (follows the stereotype), "
        "in next-word probabilities +0.02 [-0.04, +0.08] (no clear stereotype effect)."
    )
    few = template_result(mv(1.0, -0.5, 1.0, n=3), mv(-0.3, -0.4, -0.2, n=80))
    assert verdict(few).endswith(
        "goes against the stereotype on template: when a gender is named too little data "
        "(3 cases, fewer than the 10 this metric needs), in next-word probabilities -0.30 [-0.40, -0.20]."
    )


def test_console_column_and_report_chart(tmp_path: Path) -> None:
    s = template_result(mv(0.65, 0.45, 0.82, n=60), mv(0.21, 0.15, 0.27, n=80))
    s.results["template"].subsets = {
        "occupations": s.results["template"].model_copy(update={"subsets": {}}),  # type: ignore[dict-item]
    }
    out = Console(record=True, width=180, color_system=None)
    print_summary(s, out)
    text = out.export_text()
    assert "stereotype_" in text and "0.650 [0.45, 0.82]" in text and "0.210 [0.15, 0.27]" in text
    (tmp_path / "summary.json").write_text(json.dumps(s.to_json_obj()))
    html = render_html(load_runs([tmp_path]))
    assert "Stereotype direction per probe set" in html and "Stereotype direction per subset of template" in html


def test_strata_of_one_prompt_fall_back_to_the_stereotyped_groups() -> None:
    # One prompt per stratum (--limit 8 on template): resampling within strata would never vary (a zero-width
    # interval); the two stereotyped groups are resampled instead, so the interval has a width.
    leans = np.array([0.5, 0.1, 0.3, -0.2, -0.4, 0.0, -0.1, -0.3])
    m = stereotype_following([None] * 8, leans, ["female"] * 4 + ["male"] * 4, np.arange(8))
    implicit = m["stereotype_following_implicit"]
    assert implicit.value == pytest.approx(0.175 - (-0.2))
    assert implicit.ci95[0] < implicit.value < implicit.ci95[1]  # type: ignore[operator]
