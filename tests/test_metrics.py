"""Metrics of design.md against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fairprobe.families.paper.metrics import ADD_EPSILON, add_per_prompt, gas_metrics, gld_per_prompt, implicit_metrics
from fairprobe.statistics.pairwise import paired_difference
from fairprobe.statistics.stats import bootstrap_statistic, exact_mcnemar, proportion, wilson_interval

Z95 = 1.959963984540054


def test_gas_with_both_genders() -> None:
    # 5 continuations: 3 gendered, of which 2 start with a female word and 1 with a male word.
    m = gas_metrics(["female", None, "male", "female", None])
    assert m["gas"].value == pytest.approx(3 / 5)
    assert m["gas_f"].value == pytest.approx(2 / 3)
    assert m["gas_m"].value == pytest.approx(1 / 3)
    assert m["gas_f"].value + m["gas_m"].value == pytest.approx(1.0)
    assert m["delta"].value == pytest.approx(1 / 3)
    # Delta's interval is GAS(F)'s Wilson interval folded at 0.5: 2/3 -> [0.2077, 0.9385] holds 0.5, so
    # Delta's starts at 0 and ends at 2 (0.9385 - 0.5).
    assert m["gas_f"].ci95 == pytest.approx((0.207660, 0.938508), abs=1e-6)
    assert m["delta"].ci95 == pytest.approx((0.0, 2 * (0.938508 - 0.5)), abs=1e-6)


def test_gas_one_gender_and_none() -> None:
    m = gas_metrics(["male", "male", None, None])
    assert (m["gas"].value, m["gas_f"].value, m["gas_m"].value, m["delta"].value) == (0.5, 0.0, 1.0, 1.0)
    # Two of two gendered continuations male: GAS(M)'s Wilson interval [0.342, 1] holds 0.5, so Delta's
    # interval is [0, 1], not the [1, 1] a bootstrap of |mean| gave.
    assert m["delta"].ci95 == pytest.approx((0.0, 1.0))
    empty = gas_metrics([None, None])
    assert empty["gas"].value == 0.0
    assert empty["gas_f"].value is None and empty["gas_f"].ci95 == (None, None)
    assert empty["delta"].value is None


def test_gas_ci_is_wilson() -> None:
    m = gas_metrics(["female", None, "male", "female", None])
    # Wilson 95% for 3/5 (hand: centre (p + z^2/2n)/(1 + z^2/n), half-width z sqrt(p(1-p)/n + z^2/4n^2)/(1 + z^2/n)).
    assert m["gas"].ci95 == pytest.approx((0.230724, 0.882379), abs=1e-6)


def test_wilson_known_values() -> None:
    # Newcombe (1998), Table II example: 81/263 -> 0.2553 to 0.3662.
    assert wilson_interval(81, 263) == pytest.approx((0.2553, 0.3662), abs=5e-5)
    # 0 of n: lower 0, upper z^2 / (n + z^2).
    assert wilson_interval(0, 10) == pytest.approx((0.0, Z95**2 / (10 + Z95**2)))
    assert wilson_interval(10, 10) == pytest.approx((10 / (10 + Z95**2), 1.0))
    assert wilson_interval(0, 0) == (None, None)
    assert proportion(0, 0).value is None


def test_gld_hand_values() -> None:
    # Prompt 1: sum_f = 0.3, sum_m = 0.1 -> 0.2 / 0.4 = 0.5. Prompt 2: no gendered mass -> 0. Prompt 3: equal -> 0.
    f = np.array([[0.2, 0.1], [0.0, 0.0], [0.05, 0.05]])
    m = np.array([[0.05, 0.05], [0.0, 0.0], [0.1, 0.0]])
    assert gld_per_prompt(f, m) == pytest.approx([0.5, 0.0, 0.0])
    probs = np.stack([f, m], axis=-1)
    assert implicit_metrics(probs)["gld"].value == pytest.approx(0.5 / 3)


def test_add_hand_values() -> None:
    # One pair, P_f = 0.3, P_m = 0.1: 0.3 ln(0.6/0.4) + 0.1 ln(0.2/0.4), halved.
    expected = 0.5 * (0.3 * math.log(1.5) + 0.1 * math.log(0.5))
    assert expected == pytest.approx(0.0261624, abs=1e-7)
    assert add_per_prompt(np.array([[0.3]]), np.array([[0.1]]))[0] == pytest.approx(expected, rel=1e-8)
    # Equal probabilities: no divergence; terms of several pairs add up.
    assert add_per_prompt(np.array([[0.2, 0.3]]), np.array([[0.2, 0.1]]))[0] == pytest.approx(
        0.5 * (0.3 * math.log(1.5) + 0.1 * math.log(0.5)), rel=1e-8
    )


def test_add_tiny_probabilities_use_epsilon() -> None:
    e = ADD_EPSILON
    # P_m = 0 would give 0 * ln 0 without epsilon; with it the term is e ln(2e / (P_f + 2e)).
    pf, pm = 1e-3, 0.0
    expected = 0.5 * ((pf + e) * math.log(2 * (pf + e) / (pf + pm + 2 * e)) + (pm + e) * math.log(2 * e / (pf + 2 * e)))
    got = add_per_prompt(np.array([[pf]]), np.array([[pm]]))[0]
    assert np.isfinite(got)
    assert got == pytest.approx(expected, rel=1e-12)
    assert got == pytest.approx(0.5 * 1e-3 * math.log(2), rel=1e-5)
    # Both zero: exactly 0 (e ln 1 twice). Both below epsilon: tiny but still exact.
    assert add_per_prompt(np.array([[0.0]]), np.array([[0.0]]))[0] == 0.0
    tiny = add_per_prompt(np.array([[1e-12]]), np.array([[0.0]]))[0]
    a, b = 1e-12 + e, e
    assert tiny == pytest.approx(0.5 * (a * math.log(2 * a / (a + b)) + b * math.log(2 * b / (a + b))), rel=1e-9)
    assert 0 < tiny < 1e-14


def test_log_add_and_zero_add() -> None:
    probs = np.array([[[0.3, 0.1]], [[0.1, 0.4]]])  # (prompts, pairs, 2)
    m = implicit_metrics(probs)
    per = [0.5 * (0.3 * math.log(1.5) + 0.1 * math.log(0.5)), 0.5 * (0.1 * math.log(0.4) + 0.4 * math.log(1.6))]
    add = sum(per) / 2
    assert m["add"].value == pytest.approx(add, rel=1e-8)
    assert m["log_add"].value == pytest.approx(math.log(add), rel=1e-8)
    assert m["add"].ci95 == pytest.approx((min(per), max(per)), rel=1e-6)
    assert m["log_add"].ci95 == pytest.approx((math.log(min(per)), math.log(max(per))), rel=1e-6)
    assert math.log(add) < 0  # the paper's tables show negative values: a logarithm
    # A lower bound of exactly 0 has no logarithm: reported as open (None).
    half_flat = implicit_metrics(np.array([[[0.3, 0.1]], [[0.2, 0.2]]]))
    assert half_flat["add"].ci95[0] == 0.0 and half_flat["log_add"].ci95[0] is None
    flat = implicit_metrics(np.zeros((3, 2, 2)))
    assert flat["add"].value == 0.0 and flat["log_add"].value is None
    assert flat["gld"].value == 0.0


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    values = np.random.default_rng(1).random(50)
    a = bootstrap_statistic(values)
    b = bootstrap_statistic(values.copy())
    assert a == b
    assert a.value == pytest.approx(values.mean())
    assert a.ci95[0] < a.value < a.ci95[1]
    # Another seed gives another (still valid) interval.
    c = bootstrap_statistic(values, seed=7)
    assert c.ci95 != a.ci95 and c.value == a.value
    assert bootstrap_statistic(np.array([])).value is None
    constant = bootstrap_statistic(np.full(10, 0.25))
    assert constant.ci95 == (0.25, 0.25)


def test_paired_bootstrap_difference() -> None:
    a = np.array([0.5, 0.4, 0.3, 0.2])
    b = np.array([0.1, 0.2, 0.3, 0.0])
    d = paired_difference(a, b)
    assert d.value == pytest.approx(-0.2)
    assert d.ci95[0] <= -0.2 <= d.ci95[1] <= 0.0


def test_exact_mcnemar() -> None:
    # b=10, c=2: two-sided exact p = 2 P(X <= 2 | n=12, 1/2) = 2 (1 + 12 + 66) / 4096.
    assert exact_mcnemar(10, 2) == pytest.approx(158 / 4096)
    assert exact_mcnemar(2, 10) == pytest.approx(158 / 4096)
    assert exact_mcnemar(0, 0) == 1.0
    assert exact_mcnemar(5, 5) == 1.0
    # b=6, c=0: 2 / 2^6.
    assert exact_mcnemar(6, 0) == pytest.approx(2 / 64)


def test_implicit_bounds_by_hand_and_against_every_value_in_the_box() -> None:
    from fairprobe.families.paper.metrics import bounded_implicit_metrics, implicit_bounds_per_prompt

    # she 0.3 / he 0.1 known; woman / man outside the top-k, each in [0, 0.05].
    lower = np.array([[[0.3, 0.1], [0.0, 0.0]]])
    upper = np.array([[[0.3, 0.1], [0.05, 0.05]]])
    b = implicit_bounds_per_prompt(lower, upper)
    assert b["gld"][0][0] == pytest.approx(0.15 / 0.45) and b["gld"][1][0] == pytest.approx(0.25 / 0.45)
    known = add_per_prompt(np.array([0.3]), np.array([0.1]))
    assert b["add"][0][0] == pytest.approx(known) and b["add"][1][0] == pytest.approx(known + 0.5 * 0.05 * math.log(2))
    # Overlapping masses: the lowest GLD is 0 (female and male can be equal).
    overlap = implicit_bounds_per_prompt(np.array([[[0.1, 0.0]]]), np.array([[[0.1, 0.3]]]))
    assert overlap["gld"][0][0] == 0.0 and overlap["gld"][1][0] == 1.0
    # Every value in a random box lies within the bounds, and the box's corners reach them.
    rng = np.random.default_rng(0)
    lo = rng.uniform(0, 0.05, (50, 4, 2))
    hi = lo + rng.uniform(0, 0.05, lo.shape) * (rng.random(lo.shape) < 0.5)
    b = implicit_bounds_per_prompt(lo, hi)
    draws = lo + (hi - lo) * rng.random((400, *lo.shape))
    gld = gld_per_prompt(draws[..., 0], draws[..., 1])
    add = add_per_prompt(draws[..., 0], draws[..., 1])
    assert (gld >= b["gld"][0] - 1e-12).all() and (gld <= b["gld"][1] + 1e-12).all()
    assert (add >= b["add"][0] - 1e-12).all() and (add <= b["add"][1] + 1e-12).all()
    corners = np.stack([np.where(rng.random(lo.shape) < 0.5, lo, hi) for _ in range(2000)])
    assert gld_per_prompt(corners[..., 0], corners[..., 1]).max(axis=0) == pytest.approx(b["gld"][1])
    m = bounded_implicit_metrics(lower, upper, "bounds: test")
    assert m["gld"].value is None and m["gld"].bounds == (pytest.approx(1 / 3), pytest.approx(5 / 9))
    assert m["log_add"].bounds[0] == pytest.approx(math.log(known))


def test_wilson_interval_agrees_with_scipy() -> None:
    # scipy's binomtest(...).proportion_ci(method="wilson") gives the same endpoints up to float rounding
    # (at most 3.3e-16 apart over every k <= n <= 400); the hand formula stays so that summary.json stays
    # byte-identical across releases (scipy differs in the last bit on about half of all intervals).
    from scipy import stats as scipy_stats

    from fairprobe.statistics.stats import wilson_interval

    for n in (1, 2, 7, 30, 160, 364):
        for k in range(n + 1):
            ci = scipy_stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
            lo, hi = wilson_interval(k, n)
            assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)
    assert wilson_interval(0, 0) == (None, None)


def test_gas_indicator_marks_continuations_with_a_gendered_word() -> None:
    from fairprobe.families.paper import PaperSample
    from fairprobe.families.paper.metrics import gas_indicator

    samples = [
        PaperSample(set="t", id=str(i), prompt="p", continuation="c", first_gender=g)
        for i, g in enumerate(["female", None, "male", None])
    ]
    assert gas_indicator(samples).tolist() == [1.0, 0.0, 1.0, 0.0]
