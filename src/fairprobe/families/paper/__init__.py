"""The paper family (Dong et al. 2024): conditional generation on neutral prompts; GAS, GLD, ADD. See README.md."""

from fairprobe.families.paper import sets as sets  # registers the probe sets
from fairprobe.families.paper.family import FAMILY
from fairprobe.families.paper.options import INSTRUCTION, PaperOptions
from fairprobe.families.paper.record import PaperSample

__all__ = ["FAMILY", "INSTRUCTION", "PaperOptions", "PaperSample"]
