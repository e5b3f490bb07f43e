"""Paired tests of exact-mode answers: a metric declared for McNemar whose per-item values are probabilities (exact
mode's expected indicators) is tested by the paired bootstrap, and the fairness families give those probabilities
per item, so a comparison in exact mode tests the values it reports (not the argmax answers, which may not move)."""

from __future__ import annotations

import numpy as np
import pytest

from fairprobe.families.gender_income.metrics import correct_of_pairs, hits_of_pairs
from fairprobe.families.gender_income.record import PairSample
from fairprobe.families.professional_bias.metrics import hits_of_prompts
from fairprobe.families.professional_bias.record import CoreferenceSample
from fairprobe.mitigation.judge import paired_test


def pair(po: float | None, pf: float | None, label: str = "yes", hit: bool = False) -> PairSample:
    """A gender-income pair as exact mode records it (P(yes) of both prompts) or, with None, as sample mode does."""
    return PairSample.model_construct(
        error=None, p_yes_original=po, p_yes_flipped=pf, label=label, hit=hit, verdict="agree", answer_original="no"
    )


def test_gender_income_items_read_exactly_are_the_expected_hit_and_accuracy() -> None:
    samples = [pair(0.8, 0.5), pair(0.1, 0.3, label="no"), pair(None, None, label="no", hit=True)]
    # 0.8 * 0.5 + 0.2 * 0.5 = 0.5; 0.1 * 0.7 + 0.9 * 0.3 = 0.34; a sampled pair keeps its 0/1 hit.
    assert hits_of_pairs(samples) == pytest.approx([0.5, 0.34, 1.0])
    # P(yes) for a "yes" label, 1 - P(yes) for "no"; the sampled pair answered "no" to a "no" label.
    assert correct_of_pairs(samples) == pytest.approx([0.8, 0.9, 1.0])


def test_professional_bias_items_read_exactly_are_the_stereotyped_share() -> None:
    samples = [
        CoreferenceSample.model_construct(error=None, q_options=[0.7, 0.3], hit=False),
        CoreferenceSample.model_construct(error=None, q_options=None, hit=True),
    ]
    assert hits_of_prompts(samples) == pytest.approx([0.7, 1.0])


def test_a_mcnemar_metric_with_expected_values_gets_the_paired_bootstrap() -> None:
    before = np.array([0.2, 0.4, 0.3, 0.5, 0.1, 0.2, 0.3, 0.4, 0.2, 0.3])
    after = before + 0.1
    test = paired_test("mcnemar", before, after)
    assert test["test"] == "paired bootstrap"
    assert test["difference"]["value"] == pytest.approx(0.1)
    assert test["p"] < 0.01 and "p_mcnemar" not in test
    indicators = paired_test("mcnemar", np.array([1, 0, 0, 1.0]), np.array([0, 0, 0, 1.0]))
    assert indicators["test"] == "exact McNemar" and indicators["original_only"] == 1


def test_the_p_yes_gap_is_tested_per_pair() -> None:
    from fairprobe.families.gender_income.exact import P_YES_GAP

    male = pair(0.7, 0.4).model_copy(update={"sex_original": "Male"})
    female = pair(0.3, 0.6).model_copy(update={"sex_original": "Female"})
    assert P_YES_GAP.paired == "bootstrap"
    assert P_YES_GAP.per_prompt is not None
    # male first: 0.7 - 0.4; female first: the flipped (male) version's 0.6 - 0.3.
    assert P_YES_GAP.per_prompt([male, female, pair(None, None)]) == pytest.approx([0.3, 0.3, np.nan], nan_ok=True)
