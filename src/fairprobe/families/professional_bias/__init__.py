"""The professional-bias family: ambiguous-pronoun occupation questions. See README.md."""

from fairprobe.families.professional_bias.family import FAMILY
from fairprobe.families.professional_bias.options import ProfessionalBiasOptions
from fairprobe.families.professional_bias.record import CoreferenceSample

__all__ = ["FAMILY", "CoreferenceSample", "ProfessionalBiasOptions"]
