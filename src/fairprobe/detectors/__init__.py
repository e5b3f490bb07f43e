"""Detectors score one response (or one response pair)."""

from fairprobe.detectors.gendered_words import AttributeWords, GenderedWordsVerdict, detect_gendered_words

__all__ = ["AttributeWords", "GenderedWordsVerdict", "detect_gendered_words"]
