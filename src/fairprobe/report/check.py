"""The CI gate: a run fails when a metric's 95% interval leaves its allowed range, or its mark is too bad.

Bounds are judged on the interval, never the point alone: `--max` on the upper 95% bound, `--min` on the lower
one, `--abs-max` on the larger absolute end (for signed metrics such as `implicit_lean`); `--mark-max B` on the
worst mark the interval allows, for every marked metric of the checked sets, graded as the report grades it. The
gate fails closed on anything it cannot judge: a metric that is n/a or unavailable, one that rests on too little
data, one the summary lacks although its family computes it for the set, a check with nothing to judge, or a
damaged summary is a failure or an error, never "skipped". A metric known only by bounds (GLD over a top-k
server) is judged on those bounds' 95% interval and says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fairprobe.errors import ConfigError, DataError
from fairprobe.families import family_of_set, metric_info
from fairprobe.formatting import format_number
from fairprobe.io import parse_pairs
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.leaderboard import comparison_runs
from fairprobe.report.runs import load_summary
from fairprobe.report.severity import MARKS, Thresholds, default_thresholds, too_little_data

Kind = Literal["max", "min", "abs-max"]
# Bounds by metric as a mapping: values are numbers (the API) or the text after `=` (the command line).
Limits = Mapping[str, float | str] | None


@dataclass(frozen=True)
class Bound:
    """One numeric gate: `--max gas=0.3` is Bound("max", "gas", 0.3)."""

    kind: Kind
    metric: str
    limit: float

    def end(self, lo: float, hi: float) -> float:
        """The end of an interval this bound judges: upper, lower, or the larger absolute one."""
        return hi if self.kind == "max" else lo if self.kind == "min" else max(abs(lo), abs(hi))

    def holds(self, x: float) -> bool:
        """Whether that end is within the bound."""
        return x >= self.limit if self.kind == "min" else x <= self.limit

    def describe(self, x: float) -> str:
        """'upper 95% bound 0.349 > max 0.300' (or within it)."""
        end = {"max": "upper 95% bound", "min": "lower 95% bound", "abs-max": "largest |95% bound|"}[self.kind]
        op = (">=" if self.holds(x) else "<") if self.kind == "min" else ("<=" if self.holds(x) else ">")
        return f"{end} {format_number(x)} {op} {self.kind} {format_number(self.limit)}"


@dataclass
class CheckResult:
    """Failures (one line each), the number of checks that held, and notes on how some were judged."""

    failures: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every check held."""
        return not self.failures

    def message(self) -> str:
        """The one-line verdict printed after the failures and notes."""
        total = len(self.failures) + len(self.passed)
        if self.ok:
            return f"check passed: {total} check(s) held"
        return f"check failed: {len(self.failures)} of {total} check(s) failed"


def bounds_of(maximum: Limits = None, minimum: Limits = None, abs_max: Limits = None) -> list[Bound]:
    """Bounds from `{metric: value}` mappings (`--max`, `--min`, `--abs-max`; the Python API's `maximum`,
    `minimum`, `abs_max`); a value that is not a finite number is a ConfigError."""
    bounds = []
    for kind, given in (("max", maximum), ("min", minimum), ("abs-max", abs_max)):
        for name, value in (given or {}).items():
            shown = str(value).strip()
            try:
                limit = float(value)
            except (TypeError, ValueError):
                raise ConfigError(f"--{kind} {name}: threshold must be a number, got {shown!r}") from None
            if not math.isfinite(limit):
                raise ConfigError(f"--{kind} {name}: threshold must be finite, got {shown!r}")
            bounds.append(Bound(kind, name, limit))  # type: ignore[arg-type]
    return bounds


def parse_bounds(
    maximum: list[str] | None, minimum: list[str] | None = None, abs_max: list[str] | None = None
) -> list[Bound]:
    """`--max`, `--min` and `--abs-max` NAME=VALUE items as bounds; a malformed item or non-finite value is a
    ConfigError."""
    pairs = [
        parse_pairs(items, f"--{kind}", "METRIC=VALUE")
        for kind, items in (("max", maximum), ("min", minimum), ("abs-max", abs_max))
    ]
    return bounds_of(*pairs)


def parse_mark(value: str | None) -> str | None:
    """`--mark-max B`: one of A, B, C, D (the Python API's `mark_max="B"`)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"--mark-max must be one of {', '.join(MARKS)}, got {value!r}")
    mark = value.strip().upper()
    if mark not in MARKS:
        raise ConfigError(f"--mark-max must be one of {', '.join(MARKS)}, got {value!r}")
    return mark


# The values a metric can take when its family does not say; a summary outside them is damaged or forged.
UNIT = (0.0, 1.0)
# Rounding the interval bounds may leave the point estimate a hair outside them.
TOLERANCE = 1e-9


def metric_range(name: str, set_name: str | None = None) -> tuple[float, float]:
    """The allowed values of a metric: as its family declares, else shares and rates in [0, 1], else any number."""
    info = metric_info(set_name, name)
    if info is not None and info.value_range is not None:
        return info.value_range
    if name.endswith(("_share", "_rate")):
        return UNIT
    return (-math.inf, math.inf)


def metric_problem(name: str, m: MetricValue, set_name: str | None = None, whole: bool = True) -> str | None:
    """What is wrong with a metric's value, interval and bounds (NaN, infinite, inverted, outside its range), or
    None. A bounded metric's bounds may be open (null where the data leave a side unbounded), never inverted.
    `whole=False` (a subset's metric, which the gate does not judge) leaves its interval's ends out of the range
    check: a small slice's normal-approximation interval may reach past the metric's range."""
    lo, hi = m.ci95
    b_lo, b_hi = m.bounds if m.bounds is not None else (None, None)
    numbers = {"value": m.value, "lower bound": lo, "upper bound": hi, "lower limit": b_lo, "upper limit": b_hi}
    for what, x in numbers.items():
        if x is not None and not math.isfinite(x):
            return f"{what} is {x}"
    if m.value is not None and (lo is None) != (hi is None):
        return "interval has only one bound"
    if m.value is not None and m.bounds is not None:
        return "has both a value and bounds"
    for ends, what in (((lo, hi), "interval"), ((b_lo, b_hi), "bounds")):
        if ends[0] is not None and ends[1] is not None and ends[0] > ends[1]:
            return f"{what} is inverted [{format_number(ends[0])}, {format_number(ends[1])}]"
    if lo is not None and hi is not None and m.value is not None and not lo - TOLERANCE <= m.value <= hi + TOLERANCE:
        return f"value {format_number(m.value)} lies outside its interval [{format_number(lo)}, {format_number(hi)}]"
    low, high = metric_range(name, set_name)
    for what, x in numbers.items():
        if (
            (whole or what not in ("lower bound", "upper bound"))
            and x is not None
            and not low - TOLERANCE <= x <= high + TOLERANCE
        ):
            return (
                f"{what} {format_number(x)} is outside the metric's range [{format_number(low)}, {format_number(high)}]"
            )
    return None


def set_problems(label: str, set_name: str, result: SetResult) -> list[str]:
    """Every damaged metric of a set, overall and per subset, as 'set/metric: what is wrong'."""
    parts = [("", result.metrics), *((f"[{k}]", sub.metrics) for k, sub in result.subsets.items())]
    return [
        f"{label}{set_name}{where}/{name}: {problem}"
        for where, metrics in parts
        for name, m in metrics.items()
        if (problem := metric_problem(name, m, set_name, whole=not where)) is not None
    ]


def unjudgeable(set_name: str, name: str, m: MetricValue, result: SetResult) -> str | None:
    """Why the gate cannot judge a metric (n/a, unavailable, too little data), or None."""
    if m.value is None and m.bounds is None:
        return f"cannot be judged: n/a ({m.note})" if m.note else "cannot be judged: n/a on this data"
    if interval(m) is None:
        return "cannot be judged: its bounds are open (the data leave a side unbounded)"
    if m.value is not None:
        why = too_little_data(set_name, name, m, m.n if m.n is not None else result.n)
        if why is not None:
            return f"cannot be judged: too little data ({why})"
    return None


def interval(m: MetricValue) -> tuple[float, float, str] | None:
    """The interval a bound is judged on, and how: the 95% CI, the 95% CI of a bounded metric's bounds, or the
    value alone when the metric carries no interval; None for a bounded metric whose bounds are left open."""
    lo, hi = m.ci95
    if lo is not None and hi is not None:
        return lo, hi, " (judged on its bounds: the data leave it between them)" if m.value is None else ""
    if m.value is not None:
        return m.value, m.value, " (no interval: judged on its value)"
    b_lo, b_hi = m.bounds if m.bounds is not None else (None, None)
    if b_lo is None or b_hi is None:
        return None
    return b_lo, b_hi, " (judged on its bounds)"


def expected_metrics(set_name: str, result: SetResult) -> set[str]:
    """The metrics a set's summary should hold: those its family declares by name in each metric function that
    computed any of its metrics here or that declares the family's headline, save those that declare what they
    `needs` (a function returns its other marked metrics together, n/a where the data do not give them)."""
    family = family_of_set(set_name)
    if family is None:
        return set()
    expected: set[str] = set()
    for fn in family.metrics:
        names = {m.name for m in fn.metrics if "*" not in m.name}
        if names & set(result.metrics) or family.headline in names:
            expected |= {m.name for m in fn.metrics if m.name in names and m.needs is None}
    return expected


class Gate:
    """Every check of one `fairprobe check` call over the chosen sets of one or more runs."""

    def __init__(self, bounds: list[Bound], mark_max: str | None = None, thresholds: Thresholds | None = None) -> None:
        if not bounds and mark_max is None:
            raise ConfigError("give at least one --max, --min or --abs-max METRIC=VALUE, or --mark-max MARK")
        self.bounds = bounds
        self.mark_max = mark_max
        self.thresholds = thresholds or default_thresholds()
        self.result = CheckResult()
        self.damaged: list[str] = []

    def _record(self, where: str, ok: bool, text: str) -> None:
        if ok:
            self.result.passed.append(where)
        else:
            self.result.failures.append(f"FAIL {where}: {text}")

    def check_bound(self, where: str, set_name: str, bound: Bound, m: MetricValue, result: SetResult) -> None:
        """One numeric bound on one metric of one set."""
        why = unjudgeable(set_name, bound.metric, m, result)
        found = interval(m)
        if why is not None or found is None:
            return self._record(where, False, why or "")
        lo, hi, how = found
        x = bound.end(lo, hi)
        value = f" (value {format_number(m.value)})" if m.value is not None and m.ci95[0] is not None else ""
        self._record(where, bound.holds(x), bound.describe(x) + value + how)
        if how and bound.holds(x):
            self.result.notes.append(f"NOTE {where}: {bound.describe(x)}{how}")

    def check_mark(self, where: str, set_name: str, name: str, m: MetricValue, result: SetResult) -> None:
        """The mark gate on one marked metric: the worst mark its interval (or bounds) allows, graded as the report
        grades it (`Threshold.span`: the bands' own shape, two-sided bands around a centre included)."""
        threshold = self.thresholds.for_metric(set_name, name)
        assert threshold is not None and self.mark_max is not None
        why = unjudgeable(set_name, name, m, result)
        found = interval(m)
        if why is not None or found is None:
            return self._record(where, False, why or "")
        lo, hi, how = found
        worst = threshold.span(lo, hi, threshold.mark_of(lo if m.value is None else m.value))[1]
        ok = MARKS.index(worst) <= MARKS.index(self.mark_max)
        text = f"worst mark its 95% interval allows {worst} {'<=' if ok else '>'} mark-max {self.mark_max}{how}"
        self._record(where, ok, text)

    def check_set(self, label: str, set_name: str, result: SetResult) -> None:
        """Every bound and the mark gate on one set. Damaged metrics (any of the set's) are collected for one
        error; a metric the check names, or a marked one, that the set's family computes but the summary lacks
        fails (a stripped summary must not pass)."""
        self.damaged.extend(set_problems(label, set_name, result))
        expected = expected_metrics(set_name, result)
        named = {b.metric for b in self.bounds} & (set(result.metrics) | expected)
        marked = {k for k in result.metrics if self.mark_max and self.thresholds.for_metric(set_name, k)}
        marked |= {k for k in expected if self.mark_max and self.thresholds.for_metric(set_name, k)}
        if not result.metrics:
            self._record(f"{label}{set_name}", False, "the summary holds no metric for this set")
        for name in sorted(named | marked):
            where = f"{label}{set_name} {name}"
            m = result.metrics.get(name)
            if m is None:
                self._record(where, False, "missing from the summary (its family computes it for this set)")
                continue
            if metric_problem(name, m, set_name) is not None:
                continue
            for bound in (b for b in self.bounds if b.metric == name):
                self.check_bound(
                    where + ("" if bound.kind == "max" else f" ({bound.kind})"), set_name, bound, m, result
                )
            if name in marked:
                self.check_mark(where + " (mark)", set_name, name, m, result)

    def signed_notes(self, sets: dict[str, SetResult]) -> None:
        """A note where `--max` bounds a signed metric's upper end only."""
        for bound in self.bounds:
            info = next((metric_info(s, bound.metric) for s in sets if bound.metric in sets[s].metrics), None)
            if bound.kind == "max" and info is not None and info.better == "zero":
                self.result.notes.append(
                    f"NOTE {bound.metric} is signed: --max bounds its upper end only; --abs-max bounds both ends"
                )


def chosen_sets(summary: Summary, sets: list[str] | None) -> dict[str, SetResult]:
    """The sets a check covers (all by default); an unknown name is a ConfigError."""
    chosen = sets or list(summary.results)
    unknown = [s for s in chosen if s not in summary.results]
    if unknown:
        raise ConfigError(f"probe set(s) not in this run: {', '.join(unknown)}; it has {', '.join(summary.results)}")
    return {s: summary.results[s] for s in chosen}


def check_runs(summaries: dict[str, Summary], gate: Gate, sets: list[str] | None = None) -> CheckResult:
    """Run the gate over one run or every model of a comparison (`summaries` by label; one run: label '').

    Unknown set or metric names are ConfigErrors (a typo must not pass a gate silently); a NaN, infinite,
    inverted or out-of-range value or interval is a DataError naming set and metric (the gate fails closed).
    """
    chosen = {label: chosen_sets(summary, sets) for label, summary in summaries.items()}
    available = sorted({k for by_set in chosen.values() for r in by_set.values() for k in r.metrics})
    missing = [b.metric for b in gate.bounds if b.metric not in available]
    if missing:
        raise ConfigError(f"unknown metric(s) {', '.join(missing)}; the checked sets have {', '.join(available)}")
    for label, by_set in chosen.items():
        for set_name, result in by_set.items():
            gate.check_set(f"{label}: " if label else "", set_name, result)
    if gate.damaged:
        raise DataError(
            f"summary cannot be checked, {len(gate.damaged)} metric(s) are not valid numbers: {'; '.join(gate.damaged)}"
        )
    if not gate.result.failures and not gate.result.passed:
        gate.result.failures.append("FAIL nothing to check: the summary holds no metric the check covers")
    gate.signed_notes({s: r for by_set in chosen.values() for s, r in by_set.items()})
    return gate.result


def check_folder(folder: Path, gate: Gate, sets: list[str] | None = None) -> CheckResult:
    """The gate over a run folder, or over every model of a many-models comparison folder (labelled by model)."""
    runs = comparison_runs(folder)
    if runs is None:
        return check_runs({"": load_summary(folder)}, gate, sets)
    summaries: dict[str, Summary] = {}
    for run in runs:
        summary = load_summary(run)
        summaries[summary.model if summary.model not in summaries else str(run)] = summary
    return check_runs(summaries, gate, sets)


def check_summary(
    summary: Summary,
    limits: dict[str, float] | None = None,
    sets: list[str] | None = None,
    minimum: dict[str, float] | None = None,
    abs_max: dict[str, float] | None = None,
    mark_max: str | None = None,
    thresholds: Thresholds | None = None,
) -> CheckResult:
    """The gate on one run's summary: `limits` are the --max bounds, `minimum` the --min ones, `abs_max` the
    --abs-max ones, `mark_max` the worst mark allowed (A-D)."""
    gate = Gate(bounds_of(limits, minimum, abs_max), parse_mark(mark_max), thresholds)
    return check_runs({"": summary}, gate, sets)
