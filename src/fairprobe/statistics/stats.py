"""Confidence intervals shared by every metric: Wilson for proportions, percentile bootstrap otherwise."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy import stats

from fairprobe.records import MetricValue

N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 20240217


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Wilson score interval for a binomial proportion; (None, None) when n is 0."""
    if n == 0:
        return (None, None)
    z = float(stats.norm.ppf(0.5 + confidence / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # At 0 or n successes the bound is exactly 0 or 1 (the float formula leaves ~1e-18).
    lo = 0.0 if successes == 0 else max(0.0, float(centre - half))
    hi = 1.0 if successes == n else min(1.0, float(centre + half))
    return (lo, hi)


def proportion(successes: int, n: int) -> MetricValue:
    """A share with its Wilson 95% interval."""
    return MetricValue(value=None if n == 0 else successes / n, ci95=wilson_interval(successes, n))


def bootstrap_rows(n: int, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Resampling indices (n_boot, n), fixed-seeded so the same data always gives the same interval."""
    return np.random.default_rng(seed).integers(0, n, size=(n_boot, n))


def bootstrap_statistic(
    values: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
    n_boot: int = N_BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
) -> MetricValue:
    """A statistic over prompts with its 95% percentile-bootstrap interval (resampling prompts).

    `statistic` maps an array (..., n, ...) resampled along axis -1 of the leading dims to one value
    per replicate; the default is the mean. A statistic that is undefined on the data (NaN) is n/a
    (value None); replicates where it is undefined are left out of the interval.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    if n == 0:
        return MetricValue(value=None)
    stat = statistic or (lambda v: v.mean(axis=1))
    point = float(stat(values[None, ...])[0])
    if not np.isfinite(point):
        return MetricValue(value=None)
    replicates = stat(values[bootstrap_rows(n, n_boot, seed)])
    replicates = replicates[np.isfinite(replicates)]
    lo, hi = np.percentile(replicates, [2.5, 97.5])
    return MetricValue(value=point, ci95=(float(lo), float(hi)))


def paired_bootstrap_difference(
    a: np.ndarray, b: np.ndarray, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> MetricValue:
    """Mean of b - a over the same prompts with a paired bootstrap 95% interval."""
    return bootstrap_statistic(
        np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64), n_boot=n_boot, seed=seed
    )


def exact_mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b and c."""
    if b + c == 0:
        return 1.0
    return float(stats.binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue)


def paired_bootstrap_p(a: np.ndarray, b: np.ndarray, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> float:
    """Two-sided paired bootstrap p-value of mean(b - a) = 0: twice the smaller tail of the resampled means.

    (count + 1) / (n_boot + 1) per tail, so the smallest p it gives is about 2 / n_boot, never 0.
    """
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if len(diff) == 0 or not diff.any():
        return 1.0
    means = diff[bootstrap_rows(len(diff), n_boot, seed)].mean(axis=1)
    tail = min(int((means <= 0).sum()), int((means >= 0).sum()))
    return min(1.0, 2 * (tail + 1) / (n_boot + 1))


def holm_adjust(pvalues: list[float | None]) -> list[float | None]:
    """Holm-Bonferroni adjusted p-values of one family of tests (None stays None), in the input's order."""
    known = [(p, i) for i, p in enumerate(pvalues) if p is not None]
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, (p, i) in enumerate(sorted(known)):
        running = max(running, min(1.0, (len(known) - rank) * p))
        out[i] = running
    return out
