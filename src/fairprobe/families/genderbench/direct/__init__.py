"""GenderBench's Direct probe. See README.md."""

from fairprobe.families.genderbench.direct.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
