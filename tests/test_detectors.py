"""Gendered-word detector: word boundaries, contractions, order, and user word files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fairprobe.errors import DataError
from fairprobe.families.paper.words import AttributeWords, detect_gendered_words

WORDS = AttributeWords.default()


def found(text: str) -> list[str]:
    """The attribute words the default lists find in a text."""
    return detect_gendered_words(text, WORDS).words


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("she's a great cook", ["she"]),
        ("She’s a great cook", ["she"]),  # curly apostrophe
        ("He'll be there", ["he"]),
        ("He’ll be there", ["he"]),
        ("HIS dog barked", ["his"]),
        ("his/her choice", ["his", "her"]),
        ("her mother-in-law", ["her", "mother"]),
        ("a he-man", ["he", "man"]),
        ("Sheila likes chemistry and Hershey bars", []),
        ("the other theme is there", []),
        ("Shelly heard them help hers", ["hers"]),
        ("they went home, themselves", []),
        ("(she)", ["she"]),
        ("Yes, ma'am, Mrs. Smith and Mr. Jones", ["ma'am", "mrs", "mr"]),
        ("yes ma’am", ["ma'am"]),
        ("Women and men", ["women", "men"]),
        ("", []),
    ],
)
def test_word_boundaries_and_contractions(text: str, words: list[str]) -> None:
    assert found(text) == words


def test_first_gender_is_the_first_word_found() -> None:
    v = detect_gendered_words("They said he and his sister left; she stayed.", WORDS)
    assert v.words == ["he", "his", "sister", "she"]
    assert v.first_gender == "male"
    v = detect_gendered_words("Her brother called him.", WORDS)
    assert v.first_gender == "female"
    assert detect_gendered_words("They are kind.", WORDS).first_gender is None


def test_default_lists_are_a_bijection() -> None:
    assert len(WORDS.pairs) == 20
    assert ("she", "he") in WORDS.pairs and ("girlfriend", "boyfriend") in WORDS.pairs
    assert not WORDS.female & WORDS.male
    assert {"him", "hers"} <= WORDS.male | WORDS.female


def write(tmp_path: Path, content: str) -> Path:
    path = tmp_path / "words.json"
    path.write_text(content, encoding="utf-8")
    return path


def test_custom_word_file(tmp_path: Path) -> None:
    path = write(
        tmp_path, json.dumps({"pairs": [["Queen", "King"]], "detection": {"female": ["ma'am"], "male": ["sir"]}})
    )
    words = AttributeWords.from_file(path)
    assert words.pairs == (("queen", "king"),)
    assert words.female == {"queen", "ma'am"} and words.male == {"king", "sir"}
    v = detect_gendered_words("Sir, the QUEEN is here", words)
    assert (v.words, v.first_gender) == (["sir", "queen"], "male")
    # Without detection lists the pairs are the detection sets.
    assert AttributeWords.from_file(write(tmp_path, '{"pairs": [["she", "he"]]}')).male == {"he"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"pairs": [["she", "he"]', "malformed attribute word file"),
        ('{"pairs": []}', "non-empty list 'pairs'"),
        ('{"pairs": [["she", "he"], ["she", "him"]]}', "bijection"),
        ('{"pairs": [["she", "he"], ["her", "he"]]}', "bijection"),
        ('{"pairs": [["she", "he"]], "detection": {"female": ["he"]}}', "both female and male: he"),
        ('{"words": ["she"]}', "unknown key"),
        ('{"pairs": [["she", "he", "it"]]}', "must be"),
        ('["she", "he"]', "must be"),
    ],
)
def test_custom_word_file_errors(tmp_path: Path, content: str, message: str) -> None:
    path = write(tmp_path, content)
    with pytest.raises(DataError, match=message) as info:
        AttributeWords.from_file(path)
    assert "\n" not in str(info.value)
    assert str(path) in str(info.value)


def test_missing_word_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        AttributeWords.from_file(tmp_path / "nope.json")
