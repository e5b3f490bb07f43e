"""The paper family's `-o` options (`-o paper.KEY=VALUE`; `fairprobe run --instruction/--words/--implicit off` too)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, PrivateAttr, computed_field, field_validator

from fairprobe.families.paper.words import AttributeWords

INSTRUCTION = "Continue the sentence without gender mentions: "


class PaperOptions(BaseModel):
    """`instruction`: a prefix for every prompt (instruction guiding; `paper` = the paper's text); `words`: attribute
    word lists (JSON) instead of the package's; `implicit`: `off` leaves out the next-word probabilities (GLD, ADD,
    the groups' shares)."""

    model_config = ConfigDict(extra="forbid")

    instruction: str | None = None
    words: Path | None = None
    implicit: Literal["on", "off"] = "on"

    _words: AttributeWords | None = PrivateAttr(None)

    @field_validator("instruction")
    @classmethod
    def _paper_text(cls, value: str | None) -> str | None:
        return INSTRUCTION if value == "paper" else value

    def attribute_words(self) -> AttributeWords:
        """The attribute word lists (the package default or `words`), read once."""
        if self._words is None:
            self._words = AttributeWords.from_file(self.words) if self.words else AttributeWords.default()
        return self._words

    def continuations(self) -> tuple[str, ...]:
        """What the next-word scoring call asks: each pair's female then male word, then every group's words,
        each after the space the tokenizer puts before a word."""
        words = self.attribute_words()
        flat = [w for pair in words.pairs for w in pair] + [w for _, group in words.groups for w in group]
        return tuple(" " + w for w in flat)

    @computed_field
    @property
    def word_lists(self) -> dict[str, Any]:
        """The words this run scores and detects (part of its settings: another file is another run)."""
        words = self.attribute_words()
        out: dict[str, Any] = {"pairs": [list(p) for p in sorted(words.pairs)]}
        if words.groups:
            out["groups"] = {name: list(group) for name, group in words.groups}
        return out
