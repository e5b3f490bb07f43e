"""GenderBench's HiringAn probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pydantic import PositiveInt

from fairprobe.families.genderbench.hiring_an import items, metrics
from fairprobe.families.genderbench.probe import GenderBenchOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources
from fairprobe.families.genderbench.shared import JOBS_FILE, NAMES_FILE


class HiringAnOptions(GenderBenchOptions):
    """HiringAn's options (`-o hiring-an...`): those every GenderBench probe takes, and its own."""

    sample_k: PositiveInt = items.DEFAULT_SAMPLE


PROBE = GenderBenchProbe(
    set_name="hiring-an",
    family="genderbench_hiring_an",
    title="HiringAn",
    section="Decision-making",
    description="Hiring emails for gender- and race-coded names: who is selected, and does the occupation's stereotype matter?",
    source="An et al. 2024 templates, Bloomberg names, Kennison & Trofe occupations",
    license="Apache-2.0 (names), fair use (occupations)",
    files=(NAMES_FILE, JOBS_FILE),
    build=lambda o: items.items(Resources.find(o.genderbench_dir), sample_k=o.sample_k),
    metrics=metrics,
    repetitions=1,
    options_model=HiringAnOptions,
)
FAMILY = build_family(PROBE)
