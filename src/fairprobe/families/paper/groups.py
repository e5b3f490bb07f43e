"""Gender groups beyond two from the next-word distribution: neutral_share and the share of every extra group.

After each prompt x, the mass of a group g is M_g(x) = sum of P(w | x) over its words (female and male: the
pair words; neutral and neopronoun groups: their own words). Its share is M_g(x) / sum_h M_h(x) over every
group, and `neutral_share` (`<group>_share` for the other extra groups) is the mean of that share over
prompts, with a bootstrap 95% interval. Prompts where no grouped word has any probability are left out
(`n` says how many count). Where some words are known only by bounds (an API's top-k logprobs), a share
lies between M_g_lo / (M_g_lo + sum of the other groups' highs) and M_g_hi / (M_g_hi + sum of the other
groups' lows) (it grows with its own mass and falls with the others'); the metric is then that interval.
"""

from __future__ import annotations

import numpy as np

NEUTRAL = "neutral"
UNDECIDED = "undecided"


def share_name(group: str) -> str:
    """The metric name of a group's share: neutral_share, xe_share, ..."""
    return f"{group}_share"


def share_bounds(lower: np.ndarray, upper: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per prompt and group, the lowest and highest share (prompts, groups) from group masses in [lower, upper].

    NaN where the prompt's grouped words may all have probability 0 (no share is defined there).
    """
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    others_lo = lower.sum(axis=1, keepdims=True) - lower
    others_hi = upper.sum(axis=1, keepdims=True) - upper

    def ratio(num: np.ndarray, rest: np.ndarray) -> np.ndarray:
        den = num + rest
        return np.divide(num, den, out=np.full_like(den, np.nan), where=den > 0)

    low, high = ratio(lower, others_hi), ratio(upper, others_lo)
    undefined = lower.sum(axis=1) <= 0
    low[undefined], high[undefined] = np.nan, np.nan
    return low, high


def likeliest_group(names: list[str], lower: np.ndarray, upper: np.ndarray) -> str | None:
    """The group with the largest mass after one prompt (1-D masses); `undecided` where bounds leave it open.

    None where no grouped word has any probability.
    """
    lower = np.asarray(lower, dtype=np.float64)
    upper = np.asarray(upper, dtype=np.float64)
    if upper.max(initial=0.0) <= 0:
        return None
    best = int(np.argmax(lower))
    rivals = np.delete(upper, best)
    if rivals.size and rivals.max() >= lower[best] and not np.array_equal(lower, upper):
        return UNDECIDED
    return names[best]
