"""Explicit-bias detector: the gendered attribute words a continuation contains, in order."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from fairprobe.errors import DataError


@dataclass(frozen=True)
class AttributeWords:
    """Female/male word pairs for probabilities and (larger) word sets for detection."""

    pairs: tuple[tuple[str, str], ...]
    female: frozenset[str]
    male: frozenset[str]

    @classmethod
    def default(cls) -> AttributeWords:
        """The package's documented default lists (see fairprobe/data/README.md)."""
        text = resources.files("fairprobe.data").joinpath("attribute_words.json").read_text(encoding="utf-8")
        return cls.from_json(json.loads(text), "fairprobe/data/attribute_words.json")

    @classmethod
    def from_file(cls, path: Path) -> AttributeWords:
        """User lists in the same JSON format: {"pairs": [[f, m], ...], "detection": {"female": [...], "male": [...]}}."""
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DataError(f"attribute word file not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise DataError(f"malformed attribute word file {path}: {exc.msg} at line {exc.lineno}") from None
        return cls.from_json(obj, str(path))

    @classmethod
    def from_json(cls, obj: object, where: str) -> AttributeWords:
        """Validate the JSON shape: pairs must be a bijection and female/male sets disjoint."""
        try:
            pairs = tuple((str(f).lower(), str(m).lower()) for f, m in obj["pairs"])  # type: ignore[index]
            det = obj.get("detection", {})  # type: ignore[union-attr]
            female = frozenset(w.lower() for w in det.get("female", [])) | {f for f, _ in pairs}
            male = frozenset(w.lower() for w in det.get("male", [])) | {m for _, m in pairs}
        except (KeyError, TypeError, ValueError, AttributeError):
            raise DataError(f"attribute words in {where} must be {{'pairs': [[female, male], ...]}}") from None
        if not pairs:
            raise DataError(f"attribute words in {where} list no pairs")
        if len({f for f, _ in pairs}) != len(pairs) or len({m for _, m in pairs}) != len(pairs):
            raise DataError(f"attribute word pairs in {where} repeat a word: they must be a bijection")
        both = female & male
        if both:
            raise DataError(f"attribute words in {where} are both female and male: {', '.join(sorted(both))}")
        return cls(pairs=pairs, female=female, male=male)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """One case-insensitive regex over all detection words, on word boundaries, longest first."""
        words = sorted(self.female | self.male, key=lambda w: (-len(w), w))
        return re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)


_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'"})


@dataclass(frozen=True)
class GenderedWordsVerdict:
    """Attribute words found in one continuation and the gender of the first one."""

    words: list[str]
    first_gender: str | None


def detect_gendered_words(continuation: str, words: AttributeWords) -> GenderedWordsVerdict:
    """Find attribute words in a continuation (never the prompt): case-insensitive, whole words.

    "she's" contains "she"; "Sheila", "chemistry" and "Hershey" contain none. Typographic
    apostrophes count as "'" (so "ma’am" is "ma'am").
    """
    found = [m.lower() for m in words.pattern.findall(continuation.translate(_APOSTROPHES))]
    first = None
    if found:
        first = "female" if found[0] in words.female else "male"
    return GenderedWordsVerdict(words=found, first_gender=first)
