"""Pairwise tests between two models on the same prompts, and Holm's correction over a family of tests.

A binary per-prompt outcome (a continuation names a gender; a reply is a stereotype hit) is compared with
the exact McNemar test on the discordant prompts; a continuous one (per-prompt GLD, ADD, neutral share)
with a paired bootstrap: the mean difference B - A over the shared prompts, its percentile 95% interval,
and the two-sided p-value 2 min(k_le + 1, k_ge + 1) / (B + 1) over the B bootstrap replicates (k_le of them
at or below 0, k_ge at or above; the +1 keeps a p-value from reading as exactly 0 on finite replicates).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairprobe.records import MetricValue
from fairprobe.statistics.stats import BOOTSTRAP_SEED, N_BOOTSTRAP, bootstrap_rows, exact_mcnemar


@dataclass(frozen=True)
class PairedTest:
    """One model-vs-model test: which test, on how many shared prompts, the difference B - A and its p-value."""

    test: str
    n: int
    difference: MetricValue
    p: float | None


def mcnemar_test(a: np.ndarray, b: np.ndarray) -> PairedTest:
    """Exact McNemar on paired 0/1 outcomes; the difference is the share of B minus the share of A."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    diff = bootstrap_paired(a.astype(np.float64), b.astype(np.float64))[0]
    return PairedTest("exact McNemar", len(a), diff, exact_mcnemar(only_a, only_b) if len(a) else None)


def bootstrap_paired(
    a: np.ndarray, b: np.ndarray, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> tuple[MetricValue, float | None]:
    """Mean of b - a with its paired percentile-bootstrap 95% interval and two-sided bootstrap p-value."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if len(d) == 0:
        return MetricValue(value=None), None
    replicates = d[bootstrap_rows(len(d), n_boot, seed)].mean(axis=1)
    lo, hi = np.percentile(replicates, [2.5, 97.5])
    below, above = int((replicates <= 0).sum()), int((replicates >= 0).sum())
    p = min(1.0, 2.0 * (min(below, above) + 1) / (len(replicates) + 1))
    return MetricValue(value=float(d.mean()), ci95=(float(lo), float(hi))), p


def bootstrap_test(a: np.ndarray, b: np.ndarray) -> PairedTest:
    """Paired bootstrap of the mean difference b - a over the same prompts."""
    diff, p = bootstrap_paired(a, b)
    return PairedTest("paired bootstrap", len(np.asarray(a)), diff, p)


def holm(pvalues: list[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values (None stays None and is not counted in the family)."""
    present = [i for i, p in enumerate(pvalues) if p is not None]
    ps = np.array([pvalues[i] for i in present], dtype=np.float64)
    order = np.argsort(ps, kind="stable")
    m = len(ps)
    adjusted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * ps[order]))
    out: list[float | None] = [None] * len(pvalues)
    for rank, k in enumerate(order):
        out[present[k]] = float(adjusted[rank])
    return out
