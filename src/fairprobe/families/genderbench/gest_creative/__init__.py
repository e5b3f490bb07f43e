"""GenderBench's GestCreative probe. See README.md."""

from fairprobe.families.genderbench.gest_creative.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
