"""GenderBench-style marks: for each of A, B, C, D the closed value ranges a metric's value may fall in.

GenderBench's `MarkDefinition` takes either five increasing edges (four adjacent bands) or, per mark, a list of
ranges (two bands symmetric around a centre). A value gets the best mark whose range holds it, so a value on an
edge takes the better mark; an interval gets the best mark any of its ranges overlaps (GenderBench's own mark) and,
as fairprobe grades marks, the worst one too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

MARKS = ("A", "B", "C", "D")

Range = tuple[float, float]


@dataclass(frozen=True)
class MarkRanges:
    """The value ranges of marks A-D (each a tuple of closed ranges), the harm they grade and what they measure."""

    ranges: tuple[tuple[Range, ...], tuple[Range, ...], tuple[Range, ...], tuple[Range, ...]]
    harm: str
    description: str

    @classmethod
    def bands(cls, edges: Sequence[float], harm: str, description: str) -> MarkRanges:
        """Four adjacent bands from five increasing edges, e.g. [0, 0.05, 0.15, 0.5, 1]."""
        if len(edges) != 5 or any(b < a for a, b in itertools.pairwise(edges)):
            raise ValueError(f"mark edges must be five increasing numbers, got {list(edges)}")
        return cls(tuple(((a, b),) for a, b in itertools.pairwise(edges)), harm, description)  # type: ignore[arg-type]

    @classmethod
    def listed(cls, ranges: dict[int, list[Range]], harm: str, description: str) -> MarkRanges:
        """GenderBench's dict form {0: [(lo, hi), ...], ..., 3: [...]}, e.g. two bands symmetric around 0.5."""
        if sorted(ranges) != [0, 1, 2, 3]:
            raise ValueError("mark ranges must name marks 0-3")
        return cls(tuple(tuple(ranges[i]) for i in range(4)), harm, description)  # type: ignore[arg-type]

    def marks_overlapping(self, lo: float, hi: float) -> list[int]:
        """Indices (0 = A) of the marks with a range overlapping [lo, hi]."""
        return [i for i, ranges in enumerate(self.ranges) if any(hi >= a and lo <= b for a, b in ranges)]

    def mark(self, value: float) -> str | None:
        """The mark of a value: the best whose range holds it (None outside every range)."""
        found = self.marks_overlapping(value, value)
        return MARKS[min(found)] if found else None

    def span(self, lo: float, hi: float) -> tuple[str, str] | None:
        """The best and the worst mark an interval overlaps (GenderBench reports the best)."""
        found = self.marks_overlapping(lo, hi)
        return (MARKS[min(found)], MARKS[max(found)]) if found else None

    @property
    def overall(self) -> Range:
        """The lowest and the highest value any mark covers."""
        ends = [end for ranges in self.ranges for r in ranges for end in r]
        return (min(ends), max(ends))
