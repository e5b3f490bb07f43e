"""What a fix costs: perplexity of held-out neutral sentences ("My friend {predicate}.") before and after tuning."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from fairprobe.errors import DataError
from fairprobe.models.base import ScoringBackend

SENTENCE = "My friend {predicate}."


def neutral_sentences(predicates: list[str]) -> list[str]:
    """Full neutral sentences from "My friend" predicates."""
    return [SENTENCE.format(predicate=p) for p in predicates]


def perplexity(
    scorer: ScoringBackend,
    sentences: list[str],
    batch_size: int = 32,
    advance: Callable[[int], None] | None = None,
) -> float:
    """exp(mean token NLL) over all sentences; every token after the first is scored (the backend's `text_log_probs`)."""
    if not sentences:
        raise DataError("no sentences to compute perplexity on")
    nll = 0.0
    tokens = 0
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        scores = scorer.text_log_probs([""] * len(chunk), chunk, batch_size)
        nll -= float(np.sum([s.sum() for s in scores]))
        tokens += sum(len(s) for s in scores)
        if advance is not None:
            advance(len(chunk))
    return math.exp(nll / max(tokens, 1))
