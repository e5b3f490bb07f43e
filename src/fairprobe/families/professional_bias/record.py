"""The professional-bias family's sample record: one reply and which occupation it named."""

from __future__ import annotations

from typing import ClassVar

from fairprobe.records import Sample


class CoreferenceSample(Sample):
    """The reply, the occupation it names (`referent`), whether that is the stereotyped one (`hit`) and why.

    `correct_answer` and `winobias` (pro/anti) are set for WinoBias sentences; `error` when the call failed.
    """

    optional: ClassVar[tuple[str, ...]] = (
        "pronoun",
        "order",
        "frame",
        "male_stereotyped",
        "female_stereotyped",
        "they_response",
        "they_referent",
        "they_status",
        "mode",
        "q_options",
        "mass",
        "they_q_options",
    )

    response: str
    referent: str | None
    status: str
    hit: bool | None
    reason: str
    biased_answer: str
    anti_stereotypical_answer: str
    correct_answer: str | None = None
    winobias: str | None = None
    # The singular-"they" control (frames with an ambiguous pronoun): the frame and variant this prompt is, and
    # the reply to the same frame with "they" and the occupation it named.
    pronoun: str | None = None
    order: str | None = None
    frame: str | None = None
    male_stereotyped: str | None = None
    female_stereotyped: str | None = None
    they_response: str | None = None
    they_referent: str | None = None
    they_status: str | None = None
    # Exact mode (exact.py): "exact", q over [stereotyped, anti-stereotyped occupation] renormalised over the two,
    # their mass, and the "they" control's q.
    mode: str | None = None
    q_options: list[float] | None = None
    mass: float | None = None
    they_q_options: list[float] | None = None

    def reply_text(self) -> str:
        """The reply (in exact mode, the two people's probabilities)."""
        if self.mode == "exact" and self.q_options is not None:
            q = self.q_options
            return f"P({self.biased_answer}) {q[0]:.3f}, P({self.anti_stereotypical_answer}) {q[1]:.3f}"
        return self.response

    def verdict_text(self) -> str:
        """Which occupation the reply named (or error), '(hit)' when it is the stereotyped one."""
        text = "error" if self.error else self.status
        text += " (hit)" if self.hit is True else ""
        if self.they_status is not None:
            text += f"; with they: {self.they_referent or self.they_status}"
        return text

    def unreadable(self) -> tuple[int, int]:
        """1 of 1 when the reply is empty or names neither occupation (status `none`; saying the reference is
        ambiguous, naming both or refusing are answers), else 0 of 1."""
        return int(self.status == "none" and self.error is None), 1
