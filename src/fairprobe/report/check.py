"""The CI gate: a run fails when a metric's upper 95% bound exceeds its allowed maximum."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairprobe.errors import ConfigError, DataError
from fairprobe.families import metric_info
from fairprobe.formatting import format_number
from fairprobe.io import parse_pairs
from fairprobe.records import MetricValue, Summary


@dataclass(frozen=True)
class CheckResult:
    """Failures (one line each), passes and metrics skipped for want of an interval."""

    failures: list[str]
    passed: list[str]
    skipped: list[str]

    @property
    def ok(self) -> bool:
        """True when no metric's upper bound exceeds its maximum."""
        return not self.failures

    def message(self) -> str:
        """The one-line verdict printed after the failures."""
        skipped = (
            f"; {len(self.skipped)} skipped (n/a or no interval: {', '.join(self.skipped)})" if self.skipped else ""
        )
        if self.ok:
            return f"check passed: {len(self.passed)} metric bound(s) within their maximum{skipped}"
        return f"check failed: {len(self.failures)} of {len(self.failures) + len(self.passed)} metric bound(s) above their maximum{skipped}"


def parse_limits(items: list[str]) -> dict[str, float]:
    """`--max NAME=VALUE` items -> {name: value}; a malformed item or a non-finite value is a ConfigError."""
    limits: dict[str, float] = {}
    for name, value in parse_pairs(items, "--max", "METRIC=VALUE").items():
        try:
            limit = float(value)
        except ValueError:
            raise ConfigError(f"--max {name}: threshold must be a number, got {value.strip()!r}") from None
        if not math.isfinite(limit):
            raise ConfigError(f"--max {name}: threshold must be finite, got {value.strip()!r}")
        limits[name] = limit
    if not limits:
        raise ConfigError("give at least one --max METRIC=VALUE")
    return limits


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


def metric_problem(name: str, m: MetricValue, set_name: str | None = None) -> str | None:
    """What is wrong with a metric's value and interval (NaN, infinite, inverted, outside its range), or None."""
    lo, hi = m.ci95
    numbers = {"value": m.value, "lower bound": lo, "upper bound": hi}
    for what, x in numbers.items():
        if x is not None and not math.isfinite(x):
            return f"{what} is {x}"
    if (lo is None) != (hi is None):
        return "interval has only one bound"
    if lo is not None and hi is not None:
        if lo > hi:
            return f"interval is inverted [{format_number(lo)}, {format_number(hi)}]"
        if m.value is not None and not lo - TOLERANCE <= m.value <= hi + TOLERANCE:
            return (
                f"value {format_number(m.value)} lies outside its interval [{format_number(lo)}, {format_number(hi)}]"
            )
    low, high = metric_range(name, set_name)
    for what, x in numbers.items():
        if x is not None and not low - TOLERANCE <= x <= high + TOLERANCE:
            return (
                f"{what} {format_number(x)} is outside the metric's range [{format_number(low)}, {format_number(high)}]"
            )
    return None


def check_summary(summary: Summary, limits: dict[str, float], sets: list[str] | None = None) -> CheckResult:
    """Compare every limited metric's upper 95% bound in every chosen set with its maximum.

    Unknown set or metric names are ConfigErrors (a typo must not pass a gate silently); a NaN, infinite,
    inverted or out-of-range value or interval is a DataError naming set and metric (the gate fails closed).
    """
    chosen = sets or list(summary.results)
    unknown = [s for s in chosen if s not in summary.results]
    if unknown:
        raise ConfigError(f"probe set(s) not in this run: {', '.join(unknown)}; it has {', '.join(summary.results)}")
    available = sorted({k for s in chosen for k in summary.results[s].metrics})
    missing = [name for name in limits if name not in available]
    if missing:
        raise ConfigError(f"unknown metric(s) {', '.join(missing)}; the checked sets have {', '.join(available)}")
    failures: list[str] = []
    passed: list[str] = []
    skipped: list[str] = []
    damaged: list[str] = []
    for set_name in chosen:
        metrics = summary.results[set_name].metrics
        for name, limit in limits.items():
            m = metrics.get(name)
            if m is None:
                continue
            problem = metric_problem(name, m, set_name)
            if problem is not None:
                damaged.append(f"{set_name}/{name}: {problem}")
                continue
            upper = m.ci95[1]
            if upper is None or m.value is None:
                skipped.append(f"{set_name}/{name}" + (" n/a" if m.value is None else ""))
            elif upper > limit:
                failures.append(
                    f"FAIL {set_name} {name}: upper 95% bound {format_number(upper)} > max {format_number(limit)} "
                    f"(value {format_number(m.value)})"
                )
            else:
                passed.append(f"{set_name}/{name}")
    if damaged:
        raise DataError(
            f"summary cannot be checked, {len(damaged)} metric(s) are not valid numbers: {'; '.join(damaged)}"
        )
    return CheckResult(failures, passed, skipped)
