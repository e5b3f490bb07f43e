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


def sentence_log_probs(
    scorer: ScoringBackend,
    sentences: list[str],
    batch_size: int = 32,
    advance: Callable[[int], None] | None = None,
) -> list[np.ndarray]:
    """Each sentence's token log-probabilities (every token after the first: the backend's `text_log_probs`)."""
    if not sentences:
        raise DataError("no sentences to compute perplexity on")
    out: list[np.ndarray] = []
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start : start + batch_size]
        out += [np.asarray(s, dtype=np.float64) for s in scorer.text_log_probs([""] * len(chunk), chunk, batch_size)]
        if advance is not None:
            advance(len(chunk))
    return out


def perplexity_of(scores: list[np.ndarray]) -> float:
    """exp(mean token NLL) over all sentences' tokens."""
    nll = -float(np.sum([s.sum() for s in scores]))
    return math.exp(nll / max(sum(len(s) for s in scores), 1))


def sentence_nll(scores: list[np.ndarray]) -> np.ndarray:
    """Each sentence's mean token NLL (NaN for a sentence with no scored token): what a paired test compares."""
    return np.array([-float(s.mean()) if len(s) else np.nan for s in scores], dtype=np.float64)


def perplexity(
    scorer: ScoringBackend,
    sentences: list[str],
    batch_size: int = 32,
    advance: Callable[[int], None] | None = None,
) -> float:
    """exp(mean token NLL) over all sentences; every token after the first is scored (the backend's `text_log_probs`)."""
    return perplexity_of(sentence_log_probs(scorer, sentences, batch_size, advance))
