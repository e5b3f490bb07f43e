"""GenderBench's Inventories probe. See README.md."""

from fairprobe.families.genderbench.inventories.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
