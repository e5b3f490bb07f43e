"""A paired bootstrap of set-level metrics: metrics that are not a mean of per-item values (a gap between the
rates of two groups of items, a regression slope over items, a share of pooled answers), tested on the same items
in two runs.

Each replicate draws the n items with replacement once, as item weights (how often each item was drawn), and
recomputes the metric under those same weights in both runs; the test reads the replicates' differences B - A:
its percentile 95% interval (widened to hold the difference in the data) and the two-sided p-value 2 k / R, k the smaller number of replicates at or below 0
and at or above 0, R the replicates where the metric is defined in both runs. As in `pairwise.bootstrap_p`, a
p-value that 2,000 replicates cannot resolve (fewer than 10 cross 0) is computed again from 100,000, and one
where none crosses is stored as 1/R with `p_floor`. A difference within EQUAL_TOLERANCE in the data and in every
replicate is equal (not tested).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from fairprobe.records import MetricValue
from fairprobe.statistics.pairwise import EQUAL_TOLERANCE, N_RESOLVE, RESOLVE_BELOW, PairedTest
from fairprobe.statistics.stats import BOOTSTRAP_SEED, N_BOOTSTRAP

# A set's metrics as functions of item weights: weights (B, n) -> {name: one value per row (B,), NaN where undefined}.
WeightedMetrics = Callable[[np.ndarray], Mapping[str, np.ndarray]]
SET_BOOTSTRAP = "paired bootstrap of the set metric"
CHUNK = 64


def replicate_weights(n: int, n_boot: int = N_BOOTSTRAP, seed: int = BOOTSTRAP_SEED) -> Iterator[np.ndarray]:
    """Bootstrap replicates as item weights (how often each of n items is drawn in n draws), a chunk at a time (the
    same draws as GenderBench's intervals, `families/genderbench/weighted.py`)."""
    rng = np.random.default_rng(seed)
    done = 0
    while done < n_boot:
        size = min(CHUNK, n_boot - done)
        yield rng.multinomial(n, np.full(n, 1.0 / n), size=size).astype(np.float64)
        done += size


def replicate_differences(
    runs: tuple[WeightedMetrics, WeightedMetrics], n: int, names: Sequence[str], n_boot: int
) -> dict[str, np.ndarray]:
    """Per metric, B - A on each of n_boot replicates, both runs weighted by the same draw (NaN where undefined)."""
    a, b = runs
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for w in replicate_weights(n, n_boot):
        before, after = a(w), b(w)
        for name in names:
            parts[name].append(np.asarray(after[name], dtype=np.float64) - np.asarray(before[name], dtype=np.float64))
    return {name: np.concatenate(chunks) for name, chunks in parts.items()}


def tail(d: np.ndarray) -> tuple[int, int]:
    """The smaller number of finite replicates at or below 0 and at or above 0, and how many are finite."""
    d = d[np.isfinite(d)]
    return min(int((d <= 0).sum()), int((d >= 0).sum())), len(d)


def resampled_tests(
    runs: tuple[WeightedMetrics, WeightedMetrics], n: int, names: Sequence[str]
) -> dict[str, PairedTest | None]:
    """The paired bootstrap of each named set-level metric over the same n items in both runs (A then B); None for a
    metric undefined on the items as they are in either run, or in every replicate."""
    ones = np.ones((1, n))
    a, b = runs[0](ones), runs[1](ones)
    observed = {name: float(np.asarray(b[name])[0] - np.asarray(a[name])[0]) for name in names}
    defined = [name for name in names if np.isfinite(observed[name])]
    draws = replicate_differences(runs, n, defined, N_BOOTSTRAP) if defined else {}
    unresolved = [name for name in defined if tail(draws[name])[1] > 0 and tail(draws[name])[0] < RESOLVE_BELOW]
    resolved = replicate_differences(runs, n, unresolved, N_RESOLVE) if unresolved else {}
    out: dict[str, PairedTest | None] = dict.fromkeys(names)
    for name in defined:
        d = draws[name][np.isfinite(draws[name])]
        if not len(d):
            continue
        lo, hi = np.percentile(d, [2.5, 97.5])
        diff = MetricValue(value=observed[name], ci95=(float(min(lo, observed[name])), float(max(hi, observed[name]))))
        if abs(observed[name]) <= EQUAL_TOLERANCE and np.all(np.abs(d) <= EQUAL_TOLERANCE):
            out[name] = PairedTest(f"equal within {EQUAL_TOLERANCE:g}", n, diff, None, equal=True)
            continue
        k, r = tail(resolved.get(name, draws[name]))
        floor = k == 0
        out[name] = PairedTest(SET_BOOTSTRAP, n, diff, 1.0 / r if floor else min(1.0, 2.0 * k / r), p_floor=floor)
    return out
