"""GenderBench's HiringBloomberg probe. See README.md."""

from fairprobe.families.genderbench.hiring_bloomberg.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
