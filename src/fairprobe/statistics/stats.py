"""Confidence intervals shared by every metric: Wilson for proportions, percentile bootstrap otherwise."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fairprobe.records import MetricValue

N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 20240217


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float | None, float | None]:
    """Wilson score interval for a binomial proportion; (None, None) when n is 0."""
    if n == 0:
        return (None, None)
    from scipy import stats  # half a second to import: loaded when a metric needs it, not by every command

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


def stratified_rows(strata: np.ndarray, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """Resampling indices (n_boot, n) that resample each stratum (items with equal codes) within itself, so every
    replicate keeps the strata's sizes (a stratified draw is resampled as it was drawn)."""
    strata = np.asarray(strata)
    rng = np.random.default_rng(seed)
    rows = np.empty((n_boot, len(strata)), dtype=np.int64)
    for code in np.unique(strata):
        members = np.flatnonzero(strata == code)
        rows[:, members] = members[rng.integers(0, len(members), size=(n_boot, len(members)))]
    return rows


WIDENED = (
    "interval widened to hold the value: the percentile bootstrap of a statistic such as a maximum can lie "
    "wholly on one side of it"
)


# Fewer items than this whose resamples all give one value (an interval of zero width) show no spread, not certainty.
FLAT_ITEMS = 30


def interval_value(point: float, lo: float, hi: float, n: int) -> MetricValue:
    """A value with its percentile-bootstrap interval, made honest: an interval that misses the value is widened to
    hold it (with a note saying so: resampled maxima lie above the maximum of the data), and an interval of zero
    width from fewer than FLAT_ITEMS items (every resample gave the same value) is flagged as too little data
    rather than shown as certainty."""
    if not (np.isfinite(lo) and np.isfinite(hi)):  # no resample where the statistic is defined
        return MetricValue(value=point)
    note = WIDENED if not lo <= point <= hi else None
    lo, hi = min(lo, point), max(hi, point)
    flat = None
    if lo == hi and n < FLAT_ITEMS:
        flat = f"every resample of the {n} item{'s' if n != 1 else ''} gives {point:.3g}: no spread to judge"
    return MetricValue(value=point, ci95=(lo, hi), note=note, too_little_data=flat)


def bootstrap_statistic(
    values: np.ndarray,
    statistic: Callable[[np.ndarray], np.ndarray] | None = None,
    n_boot: int = N_BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
    strata: np.ndarray | None = None,
) -> MetricValue:
    """A statistic over prompts with its 95% percentile-bootstrap interval (resampling prompts), widened to hold
    the value where it misses it, flagged as too little data where it has no width (`interval_value`).

    `statistic` maps an array (..., n, ...) resampled along axis -1 of the leading dims to one value
    per replicate; the default is the mean. A statistic that is undefined on the data (NaN) is n/a
    (value None); replicates where it is undefined are left out of the interval. With `strata` (one code
    per prompt) prompts are resampled within their stratum.
    """
    values = np.asarray(values, dtype=np.float64)
    n = values.shape[0]
    if n == 0:
        return MetricValue(value=None)
    stat = statistic or (lambda v: v.mean(axis=1))
    point = float(stat(values[None, ...])[0])
    if not np.isfinite(point):
        return MetricValue(value=None)
    rows = bootstrap_rows(n, n_boot, seed) if strata is None else stratified_rows(strata, n_boot, seed)
    replicates = stat(values[rows])
    replicates = replicates[np.isfinite(replicates)]
    lo, hi = np.percentile(replicates, [2.5, 97.5])
    return interval_value(point, float(lo), float(hi), n)


def folded(lo: float, hi: float, centre: float = 0.0) -> tuple[float, float]:
    """The interval of |x - centre| for x in [lo, hi]: it starts at 0 whenever [lo, hi] holds the centre.

    An absolute value's interval is derived this way from its signed quantity's interval, never by bootstrapping
    the absolute value (whose replicates cannot fall below 0, which biases the interval away from zero).
    """
    ends = sorted((abs(lo - centre), abs(hi - centre)))
    return (0.0 if lo <= centre <= hi else ends[0], ends[1])


def max_abs_metric(
    values: np.ndarray,
    differences: Callable[[np.ndarray], np.ndarray],
    n_boot: int = N_BOOTSTRAP,
    seed: int = BOOTSTRAP_SEED,
) -> MetricValue:
    """max_k |d_k| over signed differences d_k (two groups' rates: a DP or EO difference), with a 95% interval.

    `differences` maps values (..., n, c) to (..., K) signed differences, NaN where one is undefined (left
    out of the max). The interval comes from simultaneous bootstrap intervals d_k +- q (q: the 95% quantile of
    max_k |d*_k - d_k| over the replicates), folded at 0 and maxed over k; bootstrapping max_k |d_k| itself
    would bias the interval away from 0.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.shape[0] == 0:
        return MetricValue(value=None)
    point = differences(values[None, ...])[0]
    if not np.isfinite(point).any():
        return MetricValue(value=None)
    replicates = differences(values[bootstrap_rows(values.shape[0], n_boot, seed)])
    deviation = np.where(np.isfinite(replicates), np.abs(replicates - point), np.nan)
    deviation = deviation[np.isfinite(deviation).any(axis=1)]
    q = float(np.quantile(np.nanmax(deviation, axis=1), 0.95)) if len(deviation) else 0.0
    ends = np.array([folded(d - q, d + q) for d in point[np.isfinite(point)]])
    return MetricValue(value=float(np.nanmax(np.abs(point))), ci95=(float(ends[:, 0].max()), float(ends[:, 1].max())))


def exact_mcnemar(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b and c."""
    if b + c == 0:
        return 1.0
    from scipy import stats

    return float(stats.binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue)
