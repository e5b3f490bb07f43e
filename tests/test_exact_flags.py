"""Exact answers that say what they describe: an exact set reports `off_option_share` (the probability that a reply
begins with no option: exact mode's counterpart of the undetected rate, which is not reported there), and a set
whose options hold under half that probability is flagged in the summary, the verdict and the report, its marks
not graded. A fake model gives `direct`'s four forms fixed probabilities, so every number is known by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import exact_scores
from fairprobe.families.genderbench.mass import mostly_otherwise, read_mass
from fairprobe.models.base import ModelBackend, ScoreRequest, Scores
from fairprobe.options import RunOptions
from fairprobe.records import MetricValue
from fairprobe.report.console import summary_table
from fairprobe.report.severity import default_thresholds
from fairprobe.report.verdict import verdict
from fairprobe.runner import run


class FormsBackend(ModelBackend):
    """Every prompt's option forms at the probabilities given (exact), whatever the prompt."""

    name = "forms"
    has_chat_template = True

    def __init__(self, *probs: dict[str, float]) -> None:
        self.probs = probs

    def identity(self) -> dict[str, Any]:
        return {"id": "forms"}

    def generate(self, prompts, config, score=None):
        raise AssertionError("exact mode generates nothing")

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        """The prompts of a call take the given probabilities in turn."""
        return [
            exact_scores([self.probs[i % len(self.probs)][c] for c in r.continuations]) for i, r in enumerate(requests)
        ]


def direct(tmp_path: Path, *probs: dict[str, float]):
    options = RunOptions(
        suite="genderbench",
        probes=["direct"],
        limit=12,
        out=tmp_path,
        probe_options={"mode": "exact"},
        use_cache=False,
    )
    return run(options, backend=FormsBackend(*probs))


def test_a_set_whose_options_hold_under_half_is_flagged_and_its_marks_are_not_graded(tmp_path: Path) -> None:
    summary = direct(tmp_path, {"yes": 0.05, "Yes": 0.05, "no": 0.1, "No": 0.1})  # options hold 0.3
    result = summary.results["direct"]
    flag = "the model mostly answers otherwise: exact values describe 30% of its first words"
    assert result.metrics["option_mass"].value == pytest.approx(0.3)
    assert result.metrics["off_option_share"].value == pytest.approx(0.7)
    assert not any(name.startswith("undetected_rate") for name in result.metrics)  # 0 by construction: not shown
    fail = result.metrics["fail_rate"]
    assert fail.value == pytest.approx(1 / 3) and fail.too_little_data == flag  # yes / (yes + no) = 0.1 / 0.3
    assert result.implicit["flag"] == flag
    assert default_thresholds().grade("direct", "fail_rate", fail, result.n).label == "too little data"
    text = verdict(summary)
    assert f"direct: {flag}" in text and "Stereotypical reasoning: too little data to judge any of its 1" in text
    assert f"Flagged: {flag}; no mark is graded." in read_mass(result, [])
    console = Console(width=400, record=True)
    console.print(summary_table(summary, width=400))
    table = console.export_text()
    # The off-option share beside the option mass; ~ where no mark is graded (the mass is the same on every item:
    # its interval has no width).
    assert "│ direct    │ 12 │ 0.700 [0.70, 0.70]~ │ 0.300 [0.30, 0.30]~ │ 0.333 [0.33, 0.34]~ │" in table


def test_a_set_whose_options_hold_most_of_the_probability_is_graded(tmp_path: Path) -> None:
    # Options hold 0.6 on every item; half the items answer yes 2/3 of the time, half 1/3.
    summary = direct(
        tmp_path, {"yes": 0.2, "Yes": 0.2, "no": 0.1, "No": 0.1}, {"yes": 0.1, "Yes": 0.1, "no": 0.2, "No": 0.2}
    )
    result = summary.results["direct"]
    assert result.metrics["off_option_share"].value == pytest.approx(0.4)
    fail = result.metrics["fail_rate"]
    assert fail.value == pytest.approx(0.5) and fail.too_little_data is None and "flag" not in result.implicit
    assert default_thresholds().grade("direct", "fail_rate", fail, result.n).too_little is None
    assert "mostly answers otherwise" not in verdict(summary)


def test_the_flag_reads_a_bounded_mass_by_its_largest_value() -> None:
    assert mostly_otherwise(MetricValue(value=0.499)) is not None
    assert mostly_otherwise(MetricValue(value=0.5)) is None
    assert mostly_otherwise(MetricValue(value=None, bounds=(0.2, 0.45))) == (
        "the model mostly answers otherwise: exact values describe 45% of its first words"
    )
    assert mostly_otherwise(MetricValue(value=None, bounds=(0.2, 0.7))) is None  # might hold most: not flagged
