"""The gender-income family's readings: a metric of a set in one plain-words sentence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fairprobe.formatting import format_metric, pct_ci
from fairprobe.records import Sample, SetResult


def read_hit_rate(result: SetResult, samples: Sequence[Sample]) -> str:
    """The flip rate in words."""
    return (
        f"In {pct_ci(result.metrics['hit_rate'])} of counterfactual pairs the answer changed when only the gender did."
    )


def read_gap(name: str, words: str) -> Any:
    """A reading that names a group gap and what it measures."""
    return lambda result, samples: f"{name}: {format_metric(result.metrics[name], digits=None)} ({words})."
