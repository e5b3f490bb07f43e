"""Probe-set registry: `@probe_set(name)` registers a loader; `load_probe_set(name)` builds the set."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairprobe.errors import ConfigError, DataError
from fairprobe.records import ProbeSet

Loader = Callable[..., ProbeSet]


@dataclass(frozen=True)
class ProbeSetEntry:
    """A registered probe set: its loader, the suite it belongs to and a one-line description."""

    name: str
    suite: str
    description: str
    offline: bool
    loader: Loader
    rank: int = 0


_REGISTRY: dict[str, ProbeSetEntry] = {}

# `file:PATH` names a user's statement file (paper CSV of predicates or text of statements): paper suite.
FILE_PREFIX = "file:"


def probe_set(
    name: str, suite: str, description: str, offline: bool = False, rank: int = 0
) -> Callable[[Loader], Loader]:
    """Register a probe-set loader (decorator). `offline` sets need no download; `rank` orders a suite's sets."""

    def wrap(fn: Loader) -> Loader:
        _REGISTRY[name] = ProbeSetEntry(name, suite, description, offline, fn, rank)
        return fn

    return wrap


def registered() -> dict[str, ProbeSetEntry]:
    """All registered probe sets by name."""
    import fairprobe.probes  # noqa: F401  (importing the package registers the built-in loaders)

    return dict(_REGISTRY)


def load_probe_set(name: str, data_dir: Path | None = None, limit: int | None = None, **options: Any) -> ProbeSet:
    """Load a probe set by name; an empty set or an unknown name is a DataError."""
    entries = registered()
    if name.startswith(FILE_PREFIX):
        from fairprobe.probes.paper import load_statement_file

        ps = load_statement_file(Path(name.removeprefix(FILE_PREFIX)), name)
    elif name not in entries:
        raise DataError(
            f"unknown probe set {name!r}: choose from {', '.join(sorted(entries))}, or file:PATH for your own statements"
        )
    else:
        check_options(name, entries[name].loader, options)
        ps = entries[name].loader(data_dir=data_dir, **options)
    if not ps.probes:
        raise DataError(f"probe set {name!r} from {ps.source} has no prompts")
    if limit is not None:
        ps = ps.model_copy(update={"probes": ps.probes[:limit]})
    return ps


def check_options(name: str, loader: Loader, options: dict[str, Any]) -> None:
    """Refuse -o keys a probe set's loader does not take (a typo must not crash or pass silently)."""
    params = inspect.signature(loader).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    accepted = sorted(k for k in params if k != "data_dir")
    unknown = sorted(k for k in options if k not in params or k == "data_dir")
    if unknown:
        takes = ", ".join(accepted) if accepted else "no options"
        raise ConfigError(f"probe set {name!r} has no option {', '.join(map(repr, unknown))} (it takes: {takes})")


def suite_sets(suite: str) -> list[str]:
    """Names of the probe sets that make up a suite: by rank, then registration order (the paper's sets first)."""
    entries = [e for e in registered().values() if e.suite == suite]
    return [e.name for e in sorted(entries, key=lambda e: e.rank)]
