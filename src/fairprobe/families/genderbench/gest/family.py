"""GenderBench's Gest probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from fairprobe.families.genderbench.gest import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family


class GestOptions(ClosedOptions):
    """Gest's options (`-o gest...`): those every GenderBench probe takes, and its own."""

    reorderings: int = Field(6, ge=1, le=6)
    gest_file: Path | None = None


PROBE = GenderBenchProbe(
    set_name="gest",
    family="genderbench_gest",
    title="Gest",
    section="Stereotypical reasoning",
    description="Who is more likely to say a stereotypical first-person sentence: men, women or neither? (GEST)",
    source="GEST (Pikuliak et al. 2023), the csv you give",
    license="Apache-2.0",
    files=(),
    build=lambda o: items.items(o.gest_file, reorderings=o.reorderings),
    metrics=metrics,
    repetitions=1,
    options_model=GestOptions,
    gest=True,
)
FAMILY = build_family(PROBE)
