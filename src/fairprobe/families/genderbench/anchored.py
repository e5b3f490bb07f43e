"""Anchored answers to a closed-answer probe: each sampled reply followed to where it names its option, and the
options' exact probabilities read there.

A prompt is answered R times as in sample mode (temperature 1, each reply with its own seed). Where GenderBench's
parser reads an option in a reply, the anchor is the first place that option's marker appears ("(b)" in "The
correct answer is (b)", the word "yes"), and the preamble is the reply before it. Every option is then scored
there: log P(preamble + form | prompt) for each of its forms (the options' `ClosedAnswers` forms), so that
q_k = sum of option k's forms / sum of every option's forms is the probability that the reply names option k at
that point, given everything it said before (P(preamble) cancels in the ratio: no backend needs to continue an
assistant turn). A reply the parser reads nothing in is undetected, as in sample mode.

A prompt's counts are then sum_r q_r over its parsed replies, and its undetected count the replies it could not
parse: the sampled tally with each parsed answer replaced by its expectation given the reply's preamble. That is
the same expected value as sampling (the parsed option is one draw from q_r) with less variance (Rao-Blackwell):
the only sampling left is in the preambles and in which replies name an option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from fairprobe.families.base import Scoring
from fairprobe.families.closed import MOSTLY_OTHERWISE, ClosedAnswers, renormalised
from fairprobe.models.base import Prompt

# The key suffix of an anchored scoring: `p{p}r{r}` is the reply, `p{p}r{r}@` its options scored at the anchor.
AT = "@"


def anchor(reply: str, option: str) -> int | None:
    """The character offset where `reply` first names `option` as GenderBench's parsers read it: "(x)" for a
    letter (any case), the word as a whole token otherwise (any case); None where it does not."""
    if len(option) == 1:
        found = reply.lower().find(f"({option})")
        return found if found >= 0 else None
    match = re.search(rf"(?<![0-9a-z]){re.escape(option)}(?![0-9a-z])", reply, flags=re.IGNORECASE)
    return match.start() if match else None


def scorings(
    prompts: Sequence[Prompt],
    replies: Sequence[Sequence[str]],
    answers: Sequence[Sequence[str | None]],
    answers_of: ClosedAnswers,
) -> list[Scoring]:
    """Each parsed reply's options scored at its anchor: the preamble followed by every option's forms."""
    forms = answers_of.continuations
    out = []
    for p, (texts, parsed) in enumerate(zip(replies, answers, strict=True)):
        for r, (text, chosen) in enumerate(zip(texts, parsed, strict=True)):
            at = None if chosen is None else anchor(text, chosen)
            if at is not None:
                out.append(Scoring(f"p{p}r{r}{AT}", prompts[p], tuple(text[:at] + form for form in forms)))
    return out


def read(
    replies: Sequence[Sequence[str]],
    answers: Sequence[Sequence[str | None]],
    scores: Mapping[str, Any],
    answers_of: ClosedAnswers,
) -> tuple[list[list[int | None]], list[list[list[float] | None]], str | None]:
    """Per prompt and reply: the anchor's offset and the options' probabilities renormalised there (None for an
    undetected reply), and the first failed scoring's error (or None)."""
    offsets: list[list[int | None]] = []
    probabilities: list[list[list[float] | None]] = []
    for p, (texts, parsed) in enumerate(zip(replies, answers, strict=True)):
        offsets.append([])
        probabilities.append([])
        for r, (text, chosen) in enumerate(zip(texts, parsed, strict=True)):
            at = None if chosen is None else anchor(text, chosen)
            found = scores.get(f"p{p}r{r}{AT}")
            if at is None or found is None:
                offsets[p].append(None)
                probabilities[p].append(None)
                continue
            if found.error:
                return offsets, probabilities, found.error
            q, _ = renormalised(answers_of.probabilities(found.logprobs()))
            if not np.isfinite(q).all():  # the options hold no probability there: read the parsed answer
                q = np.asarray([float(o == chosen) for o in answers_of.names])
            offsets[p].append(at)
            probabilities[p].append([float(x) for x in q])
    return offsets, probabilities, None


def counts(
    probabilities: Sequence[Sequence[Sequence[float] | None]], width: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A record's tally row: per prompt, the summed option probabilities of its parsed replies (P, K), its
    undetected replies (P,) and its replies (P,)."""
    prompts = len(probabilities)
    out, undetected, attempts = np.zeros((prompts, width)), np.zeros(prompts), np.zeros(prompts)
    for p, row in enumerate(probabilities):
        attempts[p] = len(row)
        for q in row:
            if q is None:
                undetected[p] += 1
            else:
                out[p] += np.asarray(q, dtype=np.float64)
    return out, undetected, attempts


def chosen_mode(mass: float) -> str:
    """auto's choice on a backend that scores exactly, from the set's option mass at the first token: exact where
    the options hold at least half of it (the first words stand for the model), anchored below."""
    return "exact" if mass >= MOSTLY_OTHERWISE else "anchored"


def why(mode: str, mass: float) -> str:
    """The sentence the manifest and report give for auto's choice."""
    if mode == "exact":
        return f"auto: the options hold {mass:.0%} of the first token's probability (at least half): read there"
    return (
        f"auto: the options hold {mass:.0%} of the first token's probability (under half): the replies are "
        "sampled and read where each names an option"
    )


def first_mass(found: Mapping[str, Any], answers_of: ClosedAnswers) -> float:
    """A set's option mass at the first token: the mean over its items of their prompts' mean (0 where every
    scoring failed), from exact mode's scorings by probe id (`Replies`)."""
    per_item = [
        np.mean([answers_of.probabilities(s.logprobs()).sum() for s in replies.scores.values()])
        for replies in found.values()
        if replies.scores and not any(s.error for s in replies.scores.values())
    ]
    return float(np.mean(per_item)) if per_item else 0.0


def cannot_anchor(set_name: str, where: str) -> str:
    """Why anchored mode cannot be served `where` (a server that gives only top-k logprobs, replies read from a
    file): it scores each reply's options exactly."""
    return f"{set_name}: -o mode=anchored scores each reply's options exactly, which {where} cannot: use -o mode=sample"
