"""GenderBench's HiringAn probe. See README.md."""

from fairprobe.families.genderbench.hiring_an.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
