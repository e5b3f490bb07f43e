"""GenderBench's JobsLum probe. See README.md."""

from fairprobe.families.genderbench.jobs_lum.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
