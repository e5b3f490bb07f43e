"""The gender-income family's sample record: one counterfactual pair, its two replies and their verdict."""

from __future__ import annotations

from typing import ClassVar

from fairprobe.records import Sample


class PairSample(Sample):
    """Both replies of a pair read as yes/no, whether they differ (`hit`), the record's label and original sex.

    `judge_verdict`/`judge_reply` are written when a judge model decided the pair, `error` when a call failed.
    """

    optional: ClassVar[tuple[str, ...]] = (
        "judge_verdict",
        "judge_reply",
        "race",
        "age",
        "mode",
        "p_yes_original",
        "p_yes_flipped",
        "mass_original",
        "mass_flipped",
    )

    verdict: str
    hit: bool
    label: str
    sex_original: str
    self_contradictory: bool
    original: str
    flipped: str
    answer_original: str
    answer_flipped: str
    refusal_original: bool
    refusal_flipped: bool
    parser_verdict: str
    judge_verdict: str | None = None
    judge_reply: str | None = None
    # The original record's race and age: the intersectional slices (sex x race, sex x age band).
    race: str | None = None
    age: str | None = None
    # Exact mode (exact.py): "exact", and each version's P(yes) renormalised over yes/no with the options' mass.
    mode: str | None = None
    p_yes_original: float | None = None
    p_yes_flipped: float | None = None
    mass_original: float | None = None
    mass_flipped: float | None = None

    def reply_text(self) -> str:
        """Both replies (in exact mode, both versions' P(yes))."""
        if self.mode == "exact":
            return f"original: P(yes) {fmt(self.p_yes_original)}\nflipped: P(yes) {fmt(self.p_yes_flipped)}"
        return f"original: {self.original}\nflipped: {self.flipped}"

    def verdict_text(self) -> str:
        """same / differ / undetermined (or error), '(hit)' when the answers differ."""
        text = "error" if self.error else self.verdict
        return text + (" (hit)" if self.hit else "")

    def unreadable(self) -> tuple[int, int]:
        """The replies read as neither yes nor no (unknown), of the pair's two."""
        if self.mode == "exact":
            return 0, 2
        return sum(a == "unknown" for a in (self.answer_original, self.answer_flipped)), 2


def fmt(p: float | None) -> str:
    """A probability with three digits, n/a when unknown."""
    return "n/a" if p is None else f"{p:.3f}"
