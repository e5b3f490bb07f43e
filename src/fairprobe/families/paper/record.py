"""The paper family's sample record: one continuation with its detector verdict and next-word probabilities."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from fairprobe.records import Sample


def known_sum(probs: list[float | None]) -> float:
    """Sum of the known probabilities (an API's top-k leaves some words unknown: null)."""
    return float(sum(p for p in probs if p is not None))


class PaperSample(Sample):
    """A continuation, the gendered words found, the first gender named, and P(female)/P(male) per word pair.

    An unknown probability (outside an API's top-k) is null, never 0; `p_known`, `p_upper`, `implicit`,
    `top_logprobs`, `unscored_words` and `scoring_error` say how an API's probabilities were read.
    """

    optional: ClassVar[tuple[str, ...]] = (
        "p_female",
        "p_male",
        "p_known",
        "implicit",
        "top_logprobs",
        "p_upper",
        "unscored_words",
        "scoring_error",
        "p_groups",
        "p_groups_upper",
        "likeliest_group",
    )

    continuation: str
    words_found: list[str] = Field(default_factory=list)
    first_gender: str | None = None
    p_female: list[float | None] | None = None
    p_male: list[float | None] | None = None
    p_known: list[list[bool]] | None = None
    implicit: str | None = None
    top_logprobs: int | None = None
    p_upper: list[Any] | None = None
    unscored_words: int | None = None
    scoring_error: str | None = None
    # The extra gender groups (neutral, neopronouns): each group's word probabilities (null = unknown, bounded
    # by p_groups_upper) and the group likeliest as the next word (`undecided` where bounds leave it open).
    p_groups: dict[str, list[float | None]] | None = None
    p_groups_upper: dict[str, list[float]] | None = None
    likeliest_group: str | None = None

    def failure(self) -> str | None:
        """The failed call, or the failed scoring of a continuation that came (asked again on a rerun)."""
        return self.error or self.scoring_error

    def reply_text(self) -> str:
        """The continuation."""
        return self.continuation

    def found_words(self) -> list[str]:
        """The gendered words found in the continuation."""
        return self.words_found

    def verdict_text(self) -> str:
        """Which gender's word came first, 'no gendered word', or 'error'."""
        if self.error:
            return "error"
        return f"{self.first_gender} first" if self.first_gender else "no gendered word"

    def likeliest_group_name(self) -> str:
        """The gender group likeliest as the next word (female, male, neutral, a neopronoun group)."""
        return self.likeliest_group or ""

    def word_prob_sums(self) -> tuple[float, float] | None:
        """Known next-word probability of the female and of the male words."""
        if self.p_female is None or self.p_male is None:
            return None
        return known_sum(self.p_female), known_sum(self.p_male)
