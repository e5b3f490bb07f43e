"""Paired tests on the same prompts (two models, or a method against Original) and Holm's correction.

A binary per-prompt outcome (a continuation names a gender; a reply is a stereotype hit) is compared with
the exact McNemar test on the discordant prompts; a continuous one (per-prompt GLD, ADD, neutral share, a drift
measure) with a paired bootstrap: the mean difference B - A over the shared prompts, its percentile 95%
interval, and the two-sided p-value 2 k / R, k the smaller number of the R replicate means at or below 0 and at
or above 0.

p-values that mean something:
- resolved where the effect is large: 2,000 replicates give the interval; when fewer than 10 of them cross 0,
  the p-value is computed again from 100,000, so a large effect's p lies far below any Holm threshold instead
  of at the floor of 2,000 replicates. When no replicate crosses 0 the p-value is only known to be below 1/R:
  it is stored as 1/R with `p_floor`, shown as "< 1e-05", and Holm's correction uses 1/R;
- differences under a stated tolerance are equal: when every per-prompt difference is within EQUAL_TOLERANCE
  (float noise of batching and padding, 1e-7 on probabilities), nothing is tested (no p-value, not counted
  in Holm's family) and the difference is reported as equal.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairprobe.records import MetricValue
from fairprobe.statistics.stats import BOOTSTRAP_SEED, N_BOOTSTRAP, bootstrap_rows, exact_mcnemar

# Per-prompt differences within this are float noise (two runs of one model differ by ~1e-7), never an effect.
EQUAL_TOLERANCE = 1e-6
# Replicates for a p-value that 2,000 cannot resolve (fewer than RESOLVE_BELOW of them cross 0).
N_RESOLVE = 100_000
RESOLVE_BELOW = 10
_CHUNK = 10_000


@dataclass(frozen=True)
class PairedTest:
    """One paired test: which test, on how many shared prompts, the difference B - A and its p-value.

    `p_floor`: no replicate crossed 0, so p < 1/R and `p` holds 1/R. `equal`: every per-prompt difference is
    within EQUAL_TOLERANCE: not tested, `p` is None.
    """

    test: str
    n: int
    difference: MetricValue
    p: float | None
    p_floor: bool = False
    equal: bool = False

    def to_json(self) -> dict[str, object]:
        """The test as compare.json and leaderboard.json store it (the flags only when set)."""
        out: dict[str, object] = {"test": self.test, "n": self.n, "difference": self.difference.model_dump(mode="json")}
        out["p"] = self.p
        if self.p_floor:
            out["p_floor"] = True
        if self.equal:
            out["equal"] = True
        return out


def mcnemar_test(a: np.ndarray, b: np.ndarray) -> PairedTest:
    """Exact McNemar on paired 0/1 outcomes; the difference is the share of B minus the share of A."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    diff = paired_difference(a.astype(np.float64), b.astype(np.float64))
    return PairedTest("exact McNemar", len(a), diff, exact_mcnemar(only_a, only_b) if len(a) else None)


def paired_difference(a: np.ndarray, b: np.ndarray) -> MetricValue:
    """Mean of b - a over the same prompts with its paired percentile-bootstrap 95% interval."""
    d = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if len(d) == 0:
        return MetricValue(value=None)
    replicates = d[bootstrap_rows(len(d))].mean(axis=1)
    lo, hi = np.percentile(replicates, [2.5, 97.5])
    return MetricValue(value=float(d.mean()), ci95=(float(lo), float(hi)))


def crossings(d: np.ndarray, n_boot: int, seed: int = BOOTSTRAP_SEED) -> int:
    """The smaller number of bootstrap replicate means of d at or below 0 and at or above 0, over n_boot replicates."""
    rng = np.random.default_rng(seed)
    below = above = 0
    for start in range(0, n_boot, _CHUNK):
        size = min(_CHUNK, n_boot - start)
        means = d[rng.integers(0, len(d), size=(size, len(d)))].mean(axis=1)
        below += int((means <= 0).sum())
        above += int((means >= 0).sum())
    return min(below, above)


def bootstrap_p(d: np.ndarray) -> tuple[float, bool]:
    """Two-sided paired bootstrap p-value of mean(d) = 0, resolved with more replicates where it is small; and
    whether it sits at the floor (no replicate crossed 0: p < 1/R, returned as 1/R)."""
    n_boot = N_BOOTSTRAP
    tail = crossings(d, n_boot)
    if tail < RESOLVE_BELOW:
        n_boot = N_RESOLVE
        tail = crossings(d, n_boot)
    if tail == 0:
        return 1.0 / n_boot, True
    return min(1.0, 2.0 * tail / n_boot), False


def bootstrap_test(a: np.ndarray, b: np.ndarray) -> PairedTest:
    """Paired bootstrap of the mean difference b - a over the same prompts (equal within tolerance: untested)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    diff = paired_difference(a, b)
    d = b - a
    if len(d) == 0:
        return PairedTest("paired bootstrap", 0, diff, None)
    if np.all(np.abs(d) <= EQUAL_TOLERANCE):
        return PairedTest(f"equal within {EQUAL_TOLERANCE:g}", len(d), diff, None, equal=True)
    p, floor = bootstrap_p(d)
    return PairedTest("paired bootstrap", len(d), diff, p, p_floor=floor)


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
