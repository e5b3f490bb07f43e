"""GenderBench's DiscriminationTamkin probe. See README.md."""

from fairprobe.families.genderbench.discrimination_tamkin.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
