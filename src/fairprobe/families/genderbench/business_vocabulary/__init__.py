"""GenderBench's BusinessVocabulary probe. See README.md."""

from fairprobe.families.genderbench.business_vocabulary.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
