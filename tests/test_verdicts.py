"""Verdicts a reader can trust, on hand-made summaries: n/a metrics, interval-aware marks, the sweep's greedy
baseline, the one-sentence verdict, and progress lines when output is not a terminal."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from fairprobe.mitigation.sweep import baseline_verdict, sweep_markdown
from fairprobe.progress import Labelled, PlainProgress
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.check import check_summary
from fairprobe.report.console import format_metric, print_summary
from fairprobe.report.html import render_html
from fairprobe.report.runs import load_runs
from fairprobe.report.severity import default_thresholds
from fairprobe.report.verdict import verdict
from fairprobe.statistics.stats import folded


def mv(value: float | None, lo: float | None = None, hi: float | None = None, **kw: object) -> MetricValue:
    return MetricValue(value=value, ci95=(lo, hi), **kw)  # type: ignore[arg-type]


def paper_set(gas, gas_m, lean, n=300, gld=(0.17, 0.15, 0.19), gendered=30) -> SetResult:
    f = (1 - gas_m[0], 1 - gas_m[2], 1 - gas_m[1])
    # Delta = |2 GAS(M) - 1| with GAS(M)'s interval folded at 0.5, as gas_metrics derives it.
    lo, hi = folded(gas_m[1], gas_m[2], 0.5)
    return SetResult(
        n=n,
        source="hand-made",
        metrics={
            "gas": mv(*gas),
            "gas_f": mv(*f, n=gendered),
            "gas_m": mv(*gas_m, n=gendered),
            "delta": mv(abs(2 * gas_m[0] - 1), 2 * lo, 2 * hi, n=gendered),
            "gld": mv(*gld),
            "implicit_lean": mv(*lean),
        },
    )


def summary(**sets: SetResult) -> Summary:
    return Summary(fairprobe_version="0", model="toy-model", results=sets)


# --- marks read the interval and the count behind the value ---------------------------------------------------


def test_mark_of_a_wide_interval_is_uncertain_and_too_little_data_has_none() -> None:
    t = default_thresholds()
    # The case: Delta 0.667 from 12 gendered continuations with CI [0.167, 1] is not simply "D".
    g = t.grade("friend-statements", "delta", mv(0.667, 0.167, 1.0, n=12), n=240)
    assert (g.point, g.best, g.worst, g.certain, g.too_little) == ("D", "B", "D", False, None)
    assert (g.label, g.words) == ("B–D?", "mild to strong")
    assert "spans B (mild) to D (strong)" in g.explanation
    # Delta from 2 gendered continuations: fewer than the 10 cases a mark needs, so no mark at all.
    g = t.grade("template", "delta", mv(1.0, 0.0, 1.0, n=2), n=8)
    assert (g.label, g.certain, g.too_little) == (
        "too little data",
        False,
        "2 cases, fewer than the 10 this metric needs",
    )
    assert g.explanation == "too little data: 2 cases, fewer than the 10 this metric needs"
    # A tight interval inside one mark keeps the plain mark; the set's n is used when the metric has none.
    g = t.grade("stsb", "gld", mv(0.179, 0.16, 0.19), n=364)
    assert (g.label, g.certain, g.words) == ("B", True, "mild")
    # A signed interval spanning 0 can be as good as A.
    g = t.grade("professional-bias", "stereotype_gap", mv(0.017, -0.133, 0.183), n=60)
    assert g.label == "A–C?"
    assert t.grade("x", "eo_difference", mv(None), n=200) is None  # n/a has no mark


def test_check_and_console_say_n_a_for_undefined_metrics() -> None:
    s = summary(
        **{
            "gender-income": SetResult(
                n=200,
                source="hand-made",
                metrics={
                    "hit_rate": mv(0.0, 0.0, 0.019, n=200),
                    "female_only_yes": mv(1.0),
                    "male_only_yes": mv(3.0),
                    "eo_difference": mv(None, note='undefined: no woman labelled ">50K"'),
                    "dp_difference": mv(0.0, 0.0, 0.0),
                },
            )
        }
    )
    result = check_summary(s, {"eo_difference": 0.1, "hit_rate": 0.05})
    # The gate fails closed: an n/a metric named in --max is a failure, never "skipped and passed".
    assert result.failures == [
        'FAIL gender-income eo_difference: cannot be judged: n/a (undefined: no woman labelled ">50K")'
    ]
    assert result.passed == ["gender-income hit_rate"]
    assert format_metric(mv(None), name="eo_difference") == "n/a"
    assert format_metric(mv(3.0), name="male_only_yes") == "3"  # counts print as counts
    out = Console(record=True, width=200, color_system=None)
    print_summary(s, out)
    text = out.export_text()
    assert "eo_difference" in text and "n/a" in text and 'undefined: no woman labelled ">50K"' in text
    assert " 1.000" not in text  # female_only_yes is a count
    assert "toy-model: the answer changed with gender alone in 0% (95% CI 0–2%) of gender-income pairs." in text


def test_console_table_keeps_each_interval_on_one_line() -> None:
    s = summary(stsb=paper_set((0.091, 0.07, 0.12), (0.879, 0.73, 0.95), (-0.05, -0.07, -0.03)))
    wide = Console(record=True, width=140, color_system=None)
    print_summary(s, wide)
    lines = wide.export_text().splitlines()
    row = next(line for line in lines if line.lstrip("│ ").startswith("stsb"))
    assert "0.091 [0.07, 0.12]" in row and "0.121 [0.05, 0.27]" in row  # GAS and GAS(F) on the set's own line
    narrow = Console(record=True, width=80, color_system=None)
    print_summary(s, narrow)  # too narrow for one row per set: one row per metric instead, nothing wraps
    assert any("0.091 [0.07, 0.12]" in line for line in narrow.export_text().splitlines())


# --- the one-sentence verdict --------------------------------------------------------------------------------


def test_verdict_names_explicit_direction_with_interval_and_implicit_disagreement() -> None:
    s = summary(
        template=paper_set((0.244, 0.18, 0.32), (0.538, 0.39, 0.68), (0.12, 0.08, 0.15), n=160),
        stsb=paper_set((0.091, 0.07, 0.12), (0.879, 0.73, 0.95), (0.01, -0.02, 0.04), n=364),
        snli=paper_set((0.129, 0.10, 0.17), (0.854, 0.72, 0.93), (0.02, -0.01, 0.05), n=317),
    )
    # The strength word is Delta's mark in the marks' words: Delta 0.758 with interval [0.46, 0.90] spans C
    # (noticeable) to D (strong), as its mark "C–D?" says; GAS (how often) no longer words how lopsided.
    assert verdict(s) == (
        "toy-model: noticeable to strong male lean when a gender is named on stsb, snli "
        "(Delta 0.76 [0.46, 0.90]; 88% male on stsb); "
        "next-word probabilities lean female on template (lean +0.12 [+0.08, +0.15] on template), "
        "opposite to the explicit lean on other prompts."
    )
    # The embedded model's pattern: male on the natural sets in both measures, female next words on the template.
    s.results["stsb"].metrics["implicit_lean"] = mv(-0.09, -0.11, -0.07)
    assert verdict(s).endswith(
        "next-word probabilities lean male on stsb (lean -0.09 [-0.11, -0.07] on stsb) "
        "but female on template (lean +0.12 [+0.08, +0.15] on template), opposite to the explicit lean on other prompts."
    )
    # Both intervals exclude parity on the same set, in opposite directions.
    s.results["snli"].metrics["implicit_lean"] = mv(0.05, 0.02, 0.08)
    assert verdict(s).endswith(
        "but female on template, snli (lean +0.12 [+0.08, +0.15] on template), opposite to the explicit lean on snli."
    )


def test_verdict_says_no_direction_when_intervals_include_parity() -> None:
    s = summary(template=paper_set((0.244, 0.18, 0.32), (0.538, 0.39, 0.68), (0.01, -0.02, 0.04), n=160))
    assert verdict(s) == (
        "toy-model: no clear direction when a gender is named (GAS 0.24 [0.18, 0.32] on template; "
        "the female/male split's interval includes 50% on every set)."
    )
    agree = summary(a=paper_set((0.4, 0.35, 0.45), (0.1, 0.05, 0.2), (0.2, 0.1, 0.3)))
    # GAS(M) 0.1 [0.05, 0.2]: Delta 0.8 [0.6, 0.9], wholly in D: "strong".
    assert verdict(agree) == (
        "toy-model: strong female lean when a gender is named on a (Delta 0.80 [0.60, 0.90]; 90% female on a); "
        "next-word probabilities lean female on a (lean +0.20 [+0.10, +0.30] on a)."
    )
    # Too few gendered continuations for a direction: the verdict says so instead of "no clear direction".
    few = summary(a=paper_set((0.05, 0.01, 0.2), (1.0, 0.34, 1.0), (0.01, -0.02, 0.04), n=40, gendered=2))
    assert verdict(few) == (
        "toy-model: too little data to tell a direction when a gender is named (gendered continuations: 2 on a)."
    )


def test_report_opens_with_the_verdict_and_shows_gas_f(tmp_path: Path) -> None:
    s = summary(stsb=paper_set((0.091, 0.07, 0.12), (0.879, 0.73, 0.95), (-0.05, -0.07, -0.03)))
    (tmp_path / "summary.json").write_text(json.dumps(s.to_json_obj()))
    html = render_html(load_runs([tmp_path]))
    head = html[: html.index('<section id="summary">')]
    assert 'class="verdict"' in head and "noticeable to strong male lean when a gender is named on stsb" in head
    assert "next-word probabilities lean male on stsb" in head
    glance = html[html.index('<table id="glance">') : html.index("</table>", html.index('<table id="glance">'))]
    assert "<th>gas_f</th>" in glance and "<th>gas_m</th>" in glance


# --- the sweep against greedy --------------------------------------------------------------------------------


def test_sweep_says_when_no_setting_beats_greedy() -> None:
    # The case: temperature=0.7 at GAS 0.250 is the grid's lowest while greedy had 0.125.
    from fairprobe.families.paper import FAMILY as PAPER

    gas = PAPER.metric("gas")
    assert gas is not None
    text = baseline_verdict("temperature=0.7", (mv(0.25, 0.1, 0.4), mv(0.125, 0.03, 0.3), mv(0.125, -0.05, 0.3)), gas)
    assert text == (
        "No setting beats greedy decoding: the lowest of the grid, temperature=0.7, has GAS 0.250 [0.10, 0.40] "
        "against greedy's 0.125 [0.03, 0.30]; keep greedy."
    )
    noisy = baseline_verdict("top_k=10", (mv(0.1, 0.05, 0.2), mv(0.125, 0.03, 0.3), mv(-0.025, -0.06, 0.01)), gas)
    assert noisy.endswith("but the paired difference -0.025 [-0.06, 0.01] includes 0: no clear gain over greedy.")
    clear = baseline_verdict("top_p=0.3", (mv(0.05, 0.02, 0.08), mv(0.125, 0.09, 0.16), mv(-0.075, -0.1, -0.05)), gas)
    assert clear.startswith("top_p=0.3 lowers GAS below greedy decoding")
    result = {
        "seeds": 1,
        "note": "note",
        "setting_order": ["temperature=0.7"],
        "sets": {
            "template": {
                "n": 16,
                "greedy": {"gas": mv(0.125, 0.03, 0.3).model_dump(mode="json")},
                "settings": {"temperature=0.7": {"gas": mv(0.25, 0.1, 0.4).model_dump(), "gas_per_seed": [0.25]}},
                "best": {"setting": "temperature=0.7", "verdict": text, "beats_greedy": False},
            }
        },
    }
    md = sweep_markdown(result)
    assert "| greedy (reference) | 0.125 [0.03, 0.30] |  |" in md and text in md and "(best)" not in md


# --- progress without a terminal ------------------------------------------------------------------------------


def test_plain_progress_prints_a_line_per_step_and_a_heartbeat() -> None:
    stream = io.StringIO()
    with PlainProgress(stream, heartbeat=0.2) as plain:
        shown = Labelled(plain, "Instruction")
        shown.note("loading model toy")
        shown.start("stsb", 4)
        shown.advance(1)  # too soon for a line
        time.sleep(0.7)  # longer than the heartbeat: a line comes without an advance
        shown.advance(3)
    lines = [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]
    assert lines[0] == "loading model toy"
    assert lines[1].startswith("Instruction · stsb: 0/4 (0%)")
    assert any(line.startswith("Instruction · stsb: 1/4 (25%)") for line in lines[2:-1])
    assert lines[-1].startswith("Instruction · stsb: 4/4 (100%)")
    assert len(lines) <= 8


def test_nan_statistic_is_n_a_not_a_number() -> None:
    from fairprobe.statistics.stats import bootstrap_statistic

    m = bootstrap_statistic(np.array([1.0, 0.0]), lambda v: np.full(v.shape[0], np.nan))
    assert m.value is None and m.ci95 == (None, None)


@pytest.mark.parametrize("value", [0.0, 0.05])
def test_point_marks_unchanged_for_a_certain_interval(value: float) -> None:
    g = default_thresholds().grade("x", "gas", mv(value, value, value), n=1000)
    assert g.certain and g.label == ("A" if value < 0.05 else "B")


def test_score_writes_report_html_and_ends_by_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    import sys

    from fairprobe.cli import main

    responses = tmp_path / "replies.jsonl"
    responses.write_text('{"id": "0", "response": "The mechanic."}\n{"id": "1", "response": "The receptionist."}\n')
    out = tmp_path / "scored"
    argv = ["fairprobe", "score", "--probes", "professional-bias", "--responses", str(responses), "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code in (0, None)
    captured = capsys.readouterr()
    assert (
        captured.err.strip().splitlines()[-1] == f"scored run written to {out}; open {out / 'report.html'} in a browser"
    )
    assert (out / "report.html").is_file()
    assert "responses: on professional-bias it " in captured.out  # the verdict closes the console output


def test_verdict_on_the_fairness_suite_reads_intervals() -> None:
    s = summary(
        **{
            "gender-income": SetResult(
                n=200, source="h", metrics={"hit_rate": mv(0.04, 0.02, 0.08, n=190), "male_only_yes": mv(6.0)}
            ),
            "professional-bias": SetResult(n=60, source="h", metrics={"stereotype_gap": mv(0.2, 0.05, 0.35)}),
        }
    )
    assert verdict(s) == (
        "toy-model: the answer changed with gender alone in 4% (95% CI 2–8%) of gender-income pairs; "
        "on professional-bias it follows occupational stereotypes (gap +0.20 [+0.05, +0.35])."
    )
    s.results["professional-bias"].metrics["stereotype_gap"] = mv(0.017, -0.133, 0.183)
    assert verdict(s).endswith(
        "on professional-bias it shows no clear preference for occupational stereotypes (gap +0.02 [-0.13, +0.18])."
    )
