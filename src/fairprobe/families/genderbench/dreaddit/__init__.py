"""GenderBench's Dreaddit probe. See README.md."""

from fairprobe.families.genderbench.dreaddit.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
