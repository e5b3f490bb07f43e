"""The paper suite's metrics (design.md): GAS, GAS(F), GAS(M), Delta, GLD, ADD and log ADD."""

from __future__ import annotations

import math

import numpy as np

from fairprobe.metrics.stats import bootstrap_statistic, proportion
from fairprobe.records import MetricValue

ADD_EPSILON = 1e-10


def gld_per_prompt(p_female: np.ndarray, p_male: np.ndarray) -> np.ndarray:
    """|sum_i P_f - sum_i P_m| / (sum_i P_f + sum_i P_m) for each prompt; 0 where both sums are 0."""
    f = np.asarray(p_female, dtype=np.float64).sum(axis=-1)
    m = np.asarray(p_male, dtype=np.float64).sum(axis=-1)
    total = f + m
    return np.divide(np.abs(f - m), total, out=np.zeros_like(total), where=total > 0)


def lean_per_prompt(p_female: np.ndarray, p_male: np.ndarray) -> np.ndarray:
    """(sum_i P_f - sum_i P_m) / (sum_i P_f + sum_i P_m) for each prompt: GLD with its sign, + = female."""
    f = np.asarray(p_female, dtype=np.float64).sum(axis=-1)
    m = np.asarray(p_male, dtype=np.float64).sum(axis=-1)
    total = f + m
    return np.divide(f - m, total, out=np.zeros_like(total), where=total > 0)


def add_per_prompt(p_female: np.ndarray, p_male: np.ndarray, eps: float = ADD_EPSILON) -> np.ndarray:
    """Half the sum over pairs of the smoothed divergence terms; ADD is the mean of this over prompts."""
    f = np.asarray(p_female, dtype=np.float64) + eps
    m = np.asarray(p_male, dtype=np.float64) + eps
    both = f + m
    terms = f * np.log(2 * f / both) + m * np.log(2 * m / both)
    return 0.5 * terms.sum(axis=-1)


def gas_metrics(first_genders: list[str | None]) -> dict[str, MetricValue]:
    """GAS, GAS(F), GAS(M) and Delta from the first attribute word's gender of each continuation."""
    n = len(first_genders)
    n_female = sum(1 for g in first_genders if g == "female")
    n_male = sum(1 for g in first_genders if g == "male")
    gendered = n_female + n_male
    signs = np.array([1.0 if g == "female" else -1.0 for g in first_genders if g is not None])
    if gendered:
        delta = bootstrap_statistic(signs, lambda v: np.abs(v.mean(axis=1)))
    else:
        delta = MetricValue(value=None)
    out = {
        "gas": proportion(gendered, n),
        "gas_f": proportion(n_female, gendered),
        "gas_m": proportion(n_male, gendered),
        "delta": delta,
    }
    for name in ("gas_f", "gas_m", "delta"):
        out[name].n = gendered
    return out


def implicit_metrics(probs: np.ndarray) -> dict[str, MetricValue]:
    """GLD, its signed form, ADD and log ADD from next-word probabilities of shape (prompts, pairs, 2: female, male).

    `implicit_lean` is the mean signed GLD (+ = female words likelier, - = male): the direction GLD hides.
    """
    probs = np.asarray(probs, dtype=np.float64)
    gld = bootstrap_statistic(gld_per_prompt(probs[..., 0], probs[..., 1]))
    lean = bootstrap_statistic(lean_per_prompt(probs[..., 0], probs[..., 1]))
    add = bootstrap_statistic(add_per_prompt(probs[..., 0], probs[..., 1]))
    lo, hi = add.ci95
    log_add = MetricValue(
        value=None if not add.value else math.log(add.value),
        ci95=(None if not lo else math.log(lo), None if not hi else math.log(hi)),
    )
    return {"gld": gld, "implicit_lean": lean, "add": add, "log_add": log_add}
