"""What exact answers say about how much of a model's answers they describe: the options' mass at the first token,
its complement (the off-option share, exact mode's counterpart of the undetected rate), and the flag of a set whose
options hold under half of it (its marks are then not graded)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.families.genderbench.tally import UNDETECTED
from fairprobe.formatting import pct, pct_ci
from fairprobe.records import MetricValue, SetResult


def read_mass(result: SetResult, records: Sequence[Any]) -> str | None:
    """How the answers were read (exact or anchored), how far the model keeps to the answer format, and why auto
    chose the mode."""
    m = result.metrics.get(MASS)
    if m is not None and m.value is None and m.bounds is not None and None not in m.bounds:
        low, high = m.bounds
        return (
            "Answers read from the options' probabilities as the server's top-k logprobs bound them (no "
            f"sampling): every metric is an interval; the options hold {pct(low)} to {pct(high)} of the "
            "probability of how a reply begins."
        )
    if m is None or m.value is None:
        return None
    why = (result.implicit or {}).get("why")
    chosen = f" Mode chosen by {why}." if why else ""
    if records and records[0].mode == "anchored":
        return (
            f"Replies sampled and read where each names an option, the options' probabilities scored there; at "
            f"the reply's start the options hold {pct_ci(m)} of the probability (option_mass).{chosen}"
        )
    flag = mostly_otherwise(m)
    return (
        "Answers read exactly from the options' probabilities (no sampling); the options hold "
        f"{pct_ci(m)} of the probability of how a reply begins, and {pct(1 - m.value)} begins no option "
        f"({OFF}, exact mode's counterpart of the undetected rate)"
        + (f". Flagged: {flag}; no mark is graded." if flag else ".")
        + chosen
    )


MASS = "option_mass"
NO_ANSWER = "no reply could be read: every one was undetected"
# Exact mode's counterpart of the undetected rate: the probability that a reply begins with no option.
OFF = "off_option_share"
# Below this option mass the options describe a minority of the model's answers.
MOSTLY_OTHERWISE = 0.5


def mostly_otherwise(mass: MetricValue | None) -> str | None:
    """The flag of a set whose options hold less than half the probability of how a reply begins (its largest
    possible mass where only bounded), or None."""
    if mass is None:
        return None
    top = mass.value if mass.value is not None else (mass.bounds or (None, None))[1]
    if top is None or top >= MOSTLY_OTHERWISE:
        return None
    return f"the model mostly answers otherwise: exact values describe {pct(top)} of its first words"


def off_option(mass: MetricValue) -> MetricValue:
    """1 - option mass, with its interval (and bounds) turned around."""
    lo, hi = mass.ci95
    flip = (None if hi is None else 1.0 - hi, None if lo is None else 1.0 - lo)
    bounds = None if mass.bounds is None else (flip_end(mass.bounds[1]), flip_end(mass.bounds[0]))
    value = None if mass.value is None else 1.0 - mass.value
    return MetricValue(value=value, ci95=flip, bounds=bounds, note=mass.note, too_little_data=mass.too_little_data)


def flip_end(x: float | None) -> float | None:
    """1 - x (None stays None)."""
    return None if x is None else 1.0 - x


def exact_values(values: dict[str, MetricValue], marks: Sequence[str]) -> dict[str, MetricValue]:
    """An exact set's metrics: the off-option share in place of the undetected rates (0 by construction there),
    and, where the options hold under half the probability, every mark flagged instead of graded."""
    out = {k: v for k, v in values.items() if k not in UNDETECTED}
    out[OFF] = off_option(values[MASS])
    flag = mostly_otherwise(values[MASS])
    for name in marks if flag else ():
        if name in out:
            out[name].too_little_data = flag
    return out


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


def clause(set_name: str, result: SetResult) -> str | None:
    """The verdict's words on an exact set whose options hold under half the probability, and on a set auto read
    anchored for that reason."""
    read = result.implicit or {}
    flag = read.get("flag") or (read.get("why") if read.get("mode") == "anchored" else None)
    return f"{set_name}: {flag}" if flag else None
