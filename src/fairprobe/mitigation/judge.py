"""Did the fix work, and at what cost? Every declared metric of every set, a variant against Original.

Nothing here names a family or a metric: a family declares, per metric (`families/base.py` `Metric`), the paired
test (`paired`: exact McNemar on per-item 0/1 indicators, paired bootstrap of per-item values, or, for a set-level
metric such as a gap between groups of items, "resample": the family's `resample` recomputes it on the same
resampled items in both runs, `statistics/resampled.py`), how to read one value per item from its records
(`per_prompt`), which way is better (`better`), whether it is a cost (`cost`:
an accuracy, answers in the asked format) and whether decoding settings can change it at all (`decoding_free`).
Each test compares the same items (matched by id), items where either value is undefined (NaN) left out.

Holm's correction runs over the whole table: every test of every variant, set and metric, bias and cost (drift
and perplexity included), so "significant" means significant after looking at all of them. A significant change
is then read in the metric's own direction: better, worse, or (a metric with no good direction) changed; the rest
is "no clear change". A paired bootstrap over fewer items than the metric's `min_n` is "too little data" (an exact
McNemar test is valid at any size).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from fairprobe.families.base import Family, Metric
from fairprobe.records import Sample, SetResult
from fairprobe.statistics.pairwise import bootstrap_test, holm, mcnemar_test
from fairprobe.statistics.resampled import SET_BOOTSTRAP, WeightedMetrics, resampled_tests

ALPHA = 0.05
# A paired bootstrap over fewer items than its metric's `min_n` (this many for drift and perplexity) is read as
# "too little data" and left out of Holm's family: resampling two items finds no replicate crossing 0 and would
# report a p-value at the floor.
MIN_ITEMS = 10
# The tests whose replicates need enough items to mean anything (an exact McNemar test is valid at any size).
BOOTSTRAPS = ("paired bootstrap", SET_BOOTSTRAP)
# Where a row keeps its tests against Original: the family's compared metrics, its other paired metrics, the drift
# measures and the perplexity test.
TEST_KEYS = ("vs_original", "other_tests", "drift_vs_original")
PERPLEXITY_TEST = "perplexity_test"


def paired_metrics(family: Family) -> list[Metric]:
    """The metrics of a family that declare a paired test: with their per-item values, or recomputed on resampled
    items (`paired="resample"`, where the family can resample its set)."""
    return [
        m
        for m in family.declared()
        if m.paired
        and "*" not in m.name
        and (m.per_prompt is not None if m.paired != "resample" else family.resample is not None)
    ]


def matched(original: Sequence[Sample], variant: Sequence[Sample]) -> tuple[list[Sample], list[Sample]]:
    """The records of both runs on the same items, matched by id (by position where ids repeat)."""
    ids = [s.id for s in original]
    if len(set(ids)) != len(ids):
        n = min(len(original), len(variant))
        return list(original[:n]), list(variant[:n])
    index = {s.id: s for s in variant}
    pairs = [(s, index[s.id]) for s in original if s.id in index]
    return [a for a, _ in pairs], [b for _, b in pairs]


# What a metric's test says when no item has a value in both runs (nothing parsed, or no value per item), or when a
# set-level metric is undefined on the paired items in a run (one group of items absent, nothing parsed).
NO_PAIRED_ITEMS = "no item has a value in both runs"
UNDEFINED_ON_ITEMS = "the metric is undefined on the paired items in a run"
# Per run, the family's metrics of its (matched) records as functions of item weights (`Family.resample`).
Resampler = Callable[[Sequence[Sample]], WeightedMetrics]


def paired_test(kind: str | None, a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """The paired test of per-item values (NaN where undefined, dropped with its partner); with no item that has
    both, a test of 0 items (too little data). McNemar tests also keep their discordant counts (`original_only`,
    `method_only`, `p_mcnemar`); a metric declared for McNemar whose items are probabilities (exact mode's
    expected indicators) gets the paired bootstrap instead, since there is no 0/1 pair to count."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    known = np.isfinite(a) & np.isfinite(b)
    if not known.any():
        return {"test": "none", "n": 0, "p": None, "note": NO_PAIRED_ITEMS}
    a, b = a[known], b[known]
    if kind == "mcnemar" and np.isin(np.concatenate([a, b]), (0.0, 1.0)).all():
        out = mcnemar_test(a, b).to_json()
        ab, bb = a.astype(bool), b.astype(bool)
        out.update(original_only=int((ab & ~bb).sum()), method_only=int((~ab & bb).sum()), p_mcnemar=out["p"])
    else:
        out = bootstrap_test(a, b).to_json()
    out["relative_change"] = None if not a.mean() else float(b.mean() / a.mean() - 1)
    return out


def resampled(
    names: list[str], runs: tuple[list[Sample], list[Sample]], resamplers: tuple[Resampler, Resampler] | None
) -> dict[str, dict[str, Any]]:
    """The paired bootstrap over items of set-level metrics, recomputed by the family on the same resampled items
    in both runs; a test of 0 items where the family cannot resample here or a metric is undefined in a run."""
    if not names:
        return {}
    if resamplers is None or not runs[0]:
        return {name: {"test": "none", "n": 0, "p": None, "note": NO_PAIRED_ITEMS} for name in names}
    weighted = (resamplers[0](runs[0]), resamplers[1](runs[1]))
    start = weighted[0](np.ones((1, len(runs[0]))))
    out: dict[str, dict[str, Any]] = {}
    for name, found in resampled_tests(weighted, len(runs[0]), names).items():
        if found is None or found.difference.value is None:
            out[name] = {"test": "none", "n": 0, "p": None, "note": UNDEFINED_ON_ITEMS}
            continue
        before = float(start[name][0])
        out[name] = {**found.to_json(), "relative_change": found.difference.value / before if before else None}
    return out


def metric_tests(
    family: Family,
    runs: tuple[Sequence[Sample], Sequence[Sample]],
    results: tuple[SetResult, SetResult],
    unchanged: str | None = None,
    resamplers: tuple[Resampler, Resampler] | None = None,
) -> dict[str, dict[str, Any]]:
    """Every paired metric of a set that Original's result holds: its test, what it is (cost, better) and its
    value before and after. `unchanged` (a decoding-only variant's reason) replaces the tests of decoding-free
    metrics; `resamplers` give each run's set-level metrics on resampled items (`paired="resample"`)."""
    original, variant = matched(*runs)
    before, after = results
    infos = [m for m in paired_metrics(family) if m.name in before.metrics]
    skip = {m.name for m in infos if unchanged is not None and m.decoding_free}
    sets = resampled(
        [m.name for m in infos if m.paired == "resample" and m.name not in skip], (original, variant), resamplers
    )
    out: dict[str, dict[str, Any]] = {}
    for info in infos:
        if info.name in skip:
            test: dict[str, Any] = {"unchanged_by_design": unchanged}
        elif info.name in sets:
            test = sets[info.name]
        else:
            per_item = info.per_prompt
            assert per_item is not None
            test = paired_test(info.paired, per_item(original), per_item(variant))
        moved = after.metrics.get(info.name)
        test.update(
            cost=info.cost,
            better=info.better,
            min_n=info.min_n,
            before=before.metrics[info.name].value,
            after=None if moved is None else moved.value,
        )
        out[info.name] = test
    return out


def raw_p(test: dict[str, Any]) -> float | None:
    """A test's own p-value (None for an untested difference)."""
    for key in ("p_mcnemar", "p"):
        if test.get(key) is not None:
            return float(test[key])
    return None


def difference(test: dict[str, Any]) -> float | None:
    """A test's difference variant - Original (a number, or the value of a stored interval)."""
    diff = test.get("difference")
    return diff.get("value") if isinstance(diff, dict) else diff


def effect(test: dict[str, Any]) -> float | None:
    """The change toward better (positive: better): -difference where lower is better, +difference where higher
    is, the fall in |value| where zero is; None for a metric with no good direction."""
    diff = difference(test)
    better = test.get("better", "none")
    if diff is None or better == "none":
        return None
    if better == "zero":
        before, after = test.get("before"), test.get("after")
        return None if before is None or after is None else abs(before) - abs(after)
    return -diff if better == "lower" else diff


def too_little(test: dict[str, Any]) -> bool:
    """A test of no paired items (or of a set-level metric undefined on them), or a paired bootstrap over fewer
    items than its metric's `min_n`."""
    if test.get("note") in (NO_PAIRED_ITEMS, UNDEFINED_ON_ITEMS):
        return True
    return test.get("test") in BOOTSTRAPS and test.get("n", 0) < test.get("min_n", MIN_ITEMS)


def reading(test: dict[str, Any]) -> str:
    """better / worse / changed (no good direction) / no clear change / unchanged by design / too little data, by
    the Holm p."""
    if test.get("unchanged_by_design"):
        return "unchanged by design"
    if too_little(test):
        return "too little data"
    p = test.get("p_holm")
    if p is None or p >= ALPHA:
        return "no clear change"
    gain = effect(test)
    if test.get("better", "none") == "none":
        return "changed"
    return "no clear change" if not gain else "better" if gain > 0 else "worse"


def row_tests(row: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every test of a variant's row by measure name."""
    for key in TEST_KEYS:
        yield from row.get(key, {}).items()
    if PERPLEXITY_TEST in row:
        yield "perplexity", row[PERPLEXITY_TEST]


def add_holm(result: dict[str, Any]) -> None:
    """Holm over the whole table (every variant, set and test with enough items), then each test's reading."""
    tests = [
        test
        for res in result["sets"].values()
        for name, row in res["methods"].items()
        if name != result["method_order"][0]
        for _, test in row_tests(row)
    ]
    family = [t for t in tests if not too_little(t)]
    for test, adjusted in zip(family, holm([raw_p(t) for t in family]), strict=True):
        if adjusted is not None:
            test["p_holm"] = adjusted
    for test in tests:
        test["reading"] = reading(test)
        test["effect"] = effect(test)


def variant_verdict(result: dict[str, Any], variant: str) -> dict[str, Any]:
    """What a variant did, bias and cost: the significant changes of each kind, and one sentence saying both."""
    found: dict[str, dict[str, list[str]]] = {"bias": {}, "cost": {}}
    tested = {"bias": 0, "cost": 0}
    for set_name, res in result["sets"].items():
        for measure, test in row_tests(res["methods"][variant]):
            kind = "cost" if test.get("cost") else "bias"
            tested[kind] += "p_holm" in test
            if too_little(test):
                found[kind].setdefault("too little data", []).append(f"{set_name} {measure}")
            if test.get("reading") in ("better", "worse", "changed"):
                found[kind].setdefault(test["reading"], []).append(f"{set_name} {measure}")
    return {**found, "tested": tested, "sentence": verdict_sentence(variant, found, tested)}


def _listed(items: list[str]) -> str:
    return ", ".join(items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")


def verdict_sentence(variant: str, found: dict[str, dict[str, list[str]]], tested: dict[str, int]) -> str:
    """'Instruction: bias better on 2 of 30 tests (...), worse on none; cost: worse on 1 of 8 (...).'"""
    parts = []
    for kind in ("bias", "cost"):
        seen = found[kind]
        if not tested[kind]:
            few = seen.get("too little data", [])
            parts.append(
                f"{kind}: too little data ({len(few)} tests on too few items)" if few else f"{kind}: not measured"
            )
            continue
        words = [
            f"{how} on {len(seen[how])} ({_listed(seen[how])})"
            for how in ("better", "worse", "changed")
            if seen.get(how)
        ]
        parts.append(f"{kind} of {tested[kind]} tests: " + ("; ".join(words) if words else "no clear change"))
    return f"{variant}: " + "; ".join(parts) + " (Holm-corrected over the whole table, p < 0.05)."
