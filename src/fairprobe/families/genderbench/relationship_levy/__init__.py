"""GenderBench's RelationshipLevy probe. See README.md."""

from fairprobe.families.genderbench.relationship_levy.family import FAMILY, PROBE

__all__ = ["FAMILY", "PROBE"]
