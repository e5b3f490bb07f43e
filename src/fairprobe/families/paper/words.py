"""The paper's attribute words (pairs, detection sets, extra groups) and the explicit-bias detector: the gendered
attribute words a continuation contains, in order."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path

from fairprobe.errors import DataError
from fairprobe.families.paper.word_groups import WordGroups, parse_groups
from fairprobe.io import read_text


@dataclass(frozen=True)
class AttributeWords:
    """Female/male word pairs for probabilities, (larger) word sets for detection, and extra named groups.

    `groups` (neutral, neopronouns) only add next-word probabilities (neutral_share and the group shares);
    detection and the paper's binary metrics never read them.
    """

    pairs: tuple[tuple[str, str], ...]
    female: frozenset[str]
    male: frozenset[str]
    groups: WordGroups = ()

    @classmethod
    def default(cls) -> AttributeWords:
        """The package's documented default lists (see fairprobe/data/README.md)."""
        return cls.from_json(_default_json(), _DEFAULT_WHERE)

    @classmethod
    def from_file(cls, path: Path) -> AttributeWords:
        """User lists in the same JSON format: {"pairs": [[f, m], ...], "detection": {"female": [...], "male": [...]}}."""
        text = read_text(path, "attribute word file")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataError(f"malformed attribute word file {path}: {exc.msg} at line {exc.lineno}") from None
        except RecursionError:
            raise DataError(f"malformed attribute word file {path}: nested too deeply") from None
        return cls.from_json(obj, str(path))

    @classmethod
    def from_json(cls, obj: object, where: str) -> AttributeWords:
        """Validate strictly: non-empty word strings, pairs a bijection, no word in both groups, no unknown keys."""
        if not isinstance(obj, dict):
            raise DataError(f"attribute words in {where} must be a JSON object {{'pairs': [[female, male], ...]}}")
        unknown = sorted(set(obj) - {"pairs", "detection", "groups"})
        if unknown:
            raise DataError(
                f"attribute words in {where}: unknown key(s) {', '.join(map(repr, unknown))} "
                "(use pairs, detection, groups)"
            )
        raw_pairs = obj.get("pairs")
        if not isinstance(raw_pairs, list) or not raw_pairs:
            raise DataError(f"attribute words in {where} need a non-empty list 'pairs': [[female, male], ...]")
        pairs = []
        for i, pair in enumerate(raw_pairs):
            if not isinstance(pair, list) or len(pair) != 2:
                raise DataError(f"attribute words in {where}: pairs[{i}] must be a list of two words [female, male]")
            pairs.append((_word(pair[0], f"pairs[{i}][0]", where), _word(pair[1], f"pairs[{i}][1]", where)))
        detection = obj.get("detection", {})
        if not isinstance(detection, dict) or set(detection) - {"female", "male"}:
            raise DataError(f"attribute words in {where}: 'detection' must be {{'female': [...], 'male': [...]}}")
        groups = {}
        for group in ("female", "male"):
            words = detection.get(group, [])
            if not isinstance(words, list):
                raise DataError(f"attribute words in {where}: detection.{group} must be a list of words")
            groups[group] = frozenset(_word(w, f"detection.{group}[{i}]", where) for i, w in enumerate(words))
        if len({f for f, _ in pairs}) != len(pairs) or len({m for _, m in pairs}) != len(pairs):
            raise DataError(f"attribute word pairs in {where} repeat a word: they must be a bijection")
        female = groups["female"] | {f for f, _ in pairs}
        male = groups["male"] | {m for _, m in pairs}
        both = female & male
        if both:
            raise DataError(f"attribute words in {where} are both female and male: {', '.join(sorted(both))}")
        groups: WordGroups = ()
        if "groups" in obj:
            taken = {**dict.fromkeys(female, "female"), **dict.fromkeys(male, "male")}
            builtin = {} if where == _DEFAULT_WHERE else _builtin_groups()
            groups = parse_groups(obj["groups"], where, taken, builtin, _word)
        return cls(pairs=tuple(pairs), female=female, male=male, groups=groups)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        """One case-insensitive regex over all detection words, on word boundaries, longest first."""
        words = sorted(self.female | self.male, key=lambda w: (-len(w), w))
        return re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")\b", re.IGNORECASE)


_DEFAULT_WHERE = "fairprobe/data/attribute_words.json"


def _default_json() -> dict:
    """The package's attribute word file, parsed."""
    return json.loads(resources.files("fairprobe.data").joinpath("attribute_words.json").read_text(encoding="utf-8"))


def _builtin_groups() -> dict[str, tuple[str, ...]]:
    """The package's named groups: a user group with one of these names must hold the same words."""
    return {name: tuple(w.lower() for w in words) for name, words in _default_json().get("groups", {}).items()}


# A word: letters, digits, apostrophes or hyphens, single spaces between parts ("ma'am", "step-mother").
_WORD = re.compile(r"[\w'\u2019-]+( [\w'\u2019-]+)*")


def _word(value: object, at: str, where: str) -> str:
    """One attribute word, lower-cased; anything but a non-empty word string is a DataError naming its place."""
    if not isinstance(value, str):
        raise DataError(f"attribute words in {where}: {at} must be a string, got {json.dumps(value)[:40]}")
    if not _WORD.fullmatch(value):
        raise DataError(f"attribute words in {where}: {at} is not a word: {value!r}")
    return value.lower()


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
