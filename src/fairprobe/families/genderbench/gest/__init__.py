"""GenderBench's Gest probe. See README.md."""

from fairprobe.families.genderbench.gest.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
