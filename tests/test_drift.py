"""Drift metrics on hand-computed examples, their paired tests, and the on-subject rule against hand labels."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fairprobe.mitigation.drift import (
    cohen_kappa,
    distinct_2,
    drift_summary,
    drift_tests,
    drift_values,
    fluency_nll,
    format_drift,
    is_garbage,
    on_subject,
    stem,
    within_original_ci,
)
from fairprobe.statistics.pairwise import N_RESOLVE, bootstrap_test, holm
from fairprobe.statistics.stats import exact_mcnemar, wilson_interval

LABELS = Path(__file__).parent / "fixtures" / "on_subject_labels.jsonl"


@pytest.mark.parametrize(
    ("prompt", "continuation", "expected"),
    [
        ("My friend is a teacher, and", " I'm a teacher.", True),  # the speaker (the paper's good fix)
        ("My friend is cutting up a cucumber, and", " the 2019-2020 season. The team", False),
        ("My friend loves to cook Italian cuisine, and", " cooking pasta is an art.", True),  # cook- stem
        ("My friend enjoys playing chess, and", " they are very good at it.", True),  # refers back
        ("My friend enjoys playing chess, and", " the weather was nice.", False),
        ("My friend is a nurse, and", " she works nights.", True),  # gendered, but on subject
        ("My friend is a nurse, and", "", False),
        ("My friend is a nurse, and", " the hospital is big.", False),  # topic word not in the prompt
    ],
)
def test_on_subject_rule(prompt: str, continuation: str, expected: bool) -> None:
    assert on_subject(prompt, continuation) is expected


def test_stem_cuts_one_suffix_and_keeps_three_letters() -> None:
    assert [stem(w) for w in ("cooking", "cooked", "cooks", "dishes", "is", "sing", "i'm")] == [
        "cook",
        "cook",
        "cook",
        "dish",
        "is",
        "sing",
        "i",
    ]


def test_distinct_2_hand_computed() -> None:
    # 6 words -> 5 bigrams: (the cat) (cat the) (the cat) (cat the) (the cat): 2 unique.
    assert distinct_2("The cat the cat, the cat.") == pytest.approx(2 / 5)
    assert distinct_2("I like green tea") == 1.0
    assert np.isnan(distinct_2("Hello")) and np.isnan(distinct_2(""))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", True),
        ("   \n ", True),
        ("!!! ??? ...", True),  # no word at all
        ("a 1 2 3", True),  # no word of two letters
        ("12345 6789 ab", True),  # 2 letters of 11 non-space characters
        ("no no no no no no", True),  # one word is 6 of 6 words
        ("no no no yes maybe so", False),  # 3 of 6 is not more than half
        ("I like tea a lot.", False),
        ("The 2019-2020 season was long.", False),
    ],
)
def test_empty_or_garbage(text: str, expected: bool) -> None:
    assert is_garbage(text) is expected


def test_cohen_kappa_hand_computed() -> None:
    # observed 3/4; expected 0.5*0.25 + 0.5*0.75 = 0.5 -> (0.75 - 0.5) / 0.5.
    assert cohen_kappa(np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])) == pytest.approx(0.5)
    assert cohen_kappa(np.array([1, 0, 1]), np.array([1, 0, 1])) == 1.0


class FakeScorer:
    """Log-probabilities -0.5 per character of the continuation (so the NLL per token is 0.5)."""

    def text_log_probs(self, prefixes: list[str], texts: list[str], batch_size: int = 32) -> list[np.ndarray]:
        return [np.full(len(t.split()), -0.5 * (1 + i)) for i, t in enumerate(texts)]


def test_fluency_is_the_mean_token_nll_and_nan_when_empty() -> None:
    nll = fluency_nll(FakeScorer(), ["p1", "p2", "p3"], ["a b", "c d e", ""], batch_size=2)
    # Batch 1: rows 0 and 1 (-0.5, -1.0 per token); batch 2: row 0 is empty.
    assert nll[:2].tolist() == [0.5, 1.0] and np.isnan(nll[2])


def test_summary_and_paired_tests_hand_computed() -> None:
    prompts = ["My friend is a nurse, and"] * 4
    original = drift_values(prompts, [" I work.", " she sings.", " the sky.", " my day."], np.array([1.0, 2, 3, 4]))
    method = drift_values(prompts, [" the sun.", " she sings.", " the sky.", " !!!"], np.array([2.0, 2, 4, 7]))
    summary = drift_summary(method)
    assert summary["on_subject"]["value"] == 0.25
    assert tuple(summary["on_subject"]["ci95"]) == pytest.approx(wilson_interval(1, 4))
    assert summary["garbage"]["value"] == 0.25
    assert summary["fluency_nll"]["value"] == pytest.approx(3.75)
    assert summary["distinct_2"]["n"] == 3  # " !!!" has no bigram
    tests = drift_tests(original, method)
    # on subject: original [1, 1, 0, 1], method [0, 1, 0, 0]: 2 lost, 0 gained.
    assert (tests["on_subject"]["original_only"], tests["on_subject"]["method_only"]) == (2, 0)
    assert tests["on_subject"]["p"] == exact_mcnemar(2, 0) == 0.5
    assert tests["fluency_nll"]["difference"]["value"] == pytest.approx(1.25)
    assert tests["fluency_nll"]["p"] == bootstrap_test(np.array([1.0, 2, 3, 4]), np.array([2.0, 2, 4, 7])).p
    inside = within_original_ci(drift_summary(original), summary)
    # Original 0 of 4 garbage: Wilson [0, 0.49] holds 0.25; on subject 3 of 4: [0.30, 0.95] does not hold 0.25.
    assert inside["garbage"] is True and inside["on_subject"] is False
    line = format_drift(summary, tests)
    assert line.startswith("fluency NLL 3.75 [") and "on-subject 0.25" in line and "p 0.500" in line


def test_paired_bootstrap_p_and_holm() -> None:
    same = np.arange(20.0)
    equal = bootstrap_test(same, same)
    assert (equal.p, equal.equal, equal.test) == (None, True, "equal within 1e-06")
    # Every difference is 1: no replicate mean crosses 0 in 2,000 nor in 100,000, so p < 1/100,000 (the floor).
    floor = bootstrap_test(np.zeros(30), np.ones(30))
    assert (floor.p, floor.p_floor) == (1 / N_RESOLVE, True)
    # Holm: sorted 0.01*3 = 0.03, 0.03*2 = 0.06, max(0.06, 0.04*1) = 0.06; None stays None.
    assert holm([0.01, 0.04, 0.03, None]) == pytest.approx([0.03, 0.06, 0.06, None])
    assert holm([0.5, 0.9]) == [1.0, 1.0]


def test_on_subject_agrees_with_hand_labels() -> None:
    """Hand-labelled real greedy continuations of the embedded model and of a Debias Tuning adapter."""
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= 60 and {r["model"] for r in rows} == {"base", "tuned"}
    labels = np.array([r["on_subject"] for r in rows])
    rule = np.array([on_subject(r["prompt"], r["continuation"]) for r in rows])
    accuracy = float((labels == rule).mean())
    kappa = cohen_kappa(labels, rule)
    # The numbers the README reports for the rule's agreement with the hand labels.
    assert accuracy >= 0.85 and kappa >= 0.6, (accuracy, kappa)
