"""A suite = how its probe sets are asked (requests), how one probe is scored (sample), and metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fairprobe.models.base import Completion, GenerationConfig, Prompt
from fairprobe.records import MetricValue, Probe, ProbeSet, Sample, SetResult, SubsetResult

if TYPE_CHECKING:
    from fairprobe.runner import RunOptions


@dataclass(frozen=True)
class Request:
    """One model call a probe needs; `key` tells apart the calls of one probe (e.g. original/flipped).

    `words` (pairs) are scored instead of the run's attribute word pairs, and `max_new_tokens` replaces the
    suite's length, for a call that only reads next-word probabilities (e.g. the extra gender groups).
    An `optional` call (a control) may be missing from a responses file that `score` reads.
    """

    key: str
    prompt: Prompt
    words: tuple[tuple[str, str], ...] | None = None
    max_new_tokens: int | None = None
    optional: bool = False


@dataclass(frozen=True)
class Suite:
    """The parts the runner wires for every probe set of a suite."""

    name: str
    needs_word_probs: bool
    generation: Callable[[RunOptions], GenerationConfig]
    requests: Callable[[ProbeSet, Probe, RunOptions], list[Request]]
    sample: Callable[[ProbeSet, Probe, dict[str, Completion], RunOptions], Sample]
    summarize: Callable[[ProbeSet, list[Sample], RunOptions], SetResult]


def summarize_by_subset(
    ps: ProbeSet, samples: list[Sample], metrics: Callable[[list[Sample]], dict[str, MetricValue]]
) -> SetResult:
    """A set's metrics over all its samples and over each subset its samples name."""
    subsets: dict[str, list[Sample]] = {}
    for s in samples:
        for name in getattr(s, "subsets", []) or []:
            subsets.setdefault(name, []).append(s)
    return SetResult(
        n=len(samples),
        source=ps.source,
        metrics=metrics(samples) if samples else {},
        subsets={k: SubsetResult(n=len(v), metrics=metrics(v)) for k, v in sorted(subsets.items())},
    )


_SUITES: dict[str, Suite] = {}


def register_suite(suite: Suite) -> Suite:
    """Add a suite to the registry (the probe-set registry names each set's suite)."""
    _SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> Suite:
    """A registered suite by name."""
    import fairprobe.suites  # noqa: F401  (registers the built-in suites)
    from fairprobe.errors import ConfigError

    if name not in _SUITES:
        raise ConfigError(f"unknown suite {name!r}: choose from {', '.join(sorted(_SUITES))}")
    return _SUITES[name]


def suite_names() -> list[str]:
    """Names of all registered suites."""
    import fairprobe.suites  # noqa: F401

    return sorted(_SUITES)
