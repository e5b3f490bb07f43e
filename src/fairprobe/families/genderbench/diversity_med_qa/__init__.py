"""GenderBench's DiversityMedQa probe. See README.md."""

from fairprobe.families.genderbench.diversity_med_qa.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
