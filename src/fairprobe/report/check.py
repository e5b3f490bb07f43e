"""The CI gate: a run fails when a metric's upper 95% bound exceeds its allowed maximum."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairprobe.errors import ConfigError
from fairprobe.records import Summary
from fairprobe.report.tables import format_number


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
    for item in items:
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ConfigError(f"--max must be METRIC=VALUE, got {item!r}")
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


def check_summary(summary: Summary, limits: dict[str, float], sets: list[str] | None = None) -> CheckResult:
    """Compare every limited metric's upper 95% bound in every chosen set with its maximum.

    Unknown set or metric names are ConfigErrors (a typo must not pass a gate silently).
    """
    chosen = sets or list(summary.results)
    unknown = [s for s in chosen if s not in summary.results]
    if unknown:
        raise ConfigError(f"probe set(s) not in this run: {', '.join(unknown)}; it has {', '.join(summary.results)}")
    available = sorted({k for s in chosen for k in summary.results[s].metrics})
    missing = [name for name in limits if name not in available]
    if missing:
        raise ConfigError(f"unknown metric(s) {', '.join(missing)}; the checked sets have {', '.join(available)}")
    failures, passed, skipped = [], [], []
    for set_name in chosen:
        metrics = summary.results[set_name].metrics
        for name, limit in limits.items():
            m = metrics.get(name)
            if m is None:
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
    return CheckResult(failures, passed, skipped)
