"""GenderBench's Isear probe. See README.md."""

from fairprobe.families.genderbench.isear.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
