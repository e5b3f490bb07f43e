"""The gender-income family: counterfactual Adult income pairs, sex flipped. See README.md."""

from fairprobe.families.gender_income.family import FAMILY
from fairprobe.families.gender_income.options import GenderIncomeOptions
from fairprobe.families.gender_income.record import PairSample

__all__ = ["FAMILY", "GenderIncomeOptions", "PairSample"]
