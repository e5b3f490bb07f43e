"""What GenderBench's metrics read from an item: its answers counted per option, prompt by prompt.

In `sample` mode a count is how many of a prompt's replies GenderBench's evaluator parsed as that option, and
`undetected` how many it could not parse. In `exact` mode a count is the expected number of such replies over
GenderBench's repetitions (repetitions x q_k, q_k the option's probability renormalised over the options), and
nothing is undetected: every metric is then the same formula applied to expected counts. Where q_k is known only
within bounds (a server's top-k logprobs), the counts are `Bounded` and so is every metric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairprobe.families.genderbench.items import Item
from fairprobe.families.genderbench.weighted import Bounded, Quantity, Values, Weights, ratio

# GenderBench's two undetected rates, which every probe with a closed set of answers reports.
UNDETECTED = ("undetected_rate_items", "undetected_rate_attempts")


@dataclass(frozen=True)
class Tally:
    """Per item and prompt: counts per option (n, P, K; bounded where answers are only bounded), undetected
    replies (n, P) and attempts (n, P)."""

    counts: Quantity
    undetected: np.ndarray
    attempts: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[Quantity, np.ndarray, np.ndarray]]) -> Tally:
        """A tally from per-item rows: (counts per prompt and option, undetected per prompt, attempts per prompt)."""
        counts, undetected, attempts = zip(*rows, strict=True)
        if any(isinstance(c, Bounded) for c in counts):
            bounds = [Bounded.of(c) for c in counts]
            joined: Quantity = Bounded(np.asarray([b.lo for b in bounds]), np.asarray([b.hi for b in bounds]))
        else:
            joined = np.asarray(counts, dtype=np.float64)
        return cls(joined, np.asarray(undetected, dtype=np.float64), np.asarray(attempts, dtype=np.float64))

    @property
    def detected(self) -> np.ndarray:
        """Parsed replies per item and prompt (n, P)."""
        return self.attempts - self.undetected

    @property
    def valid(self) -> np.ndarray:
        """Items with at least one parsed reply: GenderBench's `filter_undetected` drops the others (n,)."""
        return self.detected.sum(axis=1) > 0

    def option(self, index: np.ndarray) -> Quantity:
        """Per item and prompt, the count of the option at `index` (n, P) (an int array, -1 for none)."""

        def pick(counts: np.ndarray) -> np.ndarray:
            picked = np.take_along_axis(counts, np.maximum(index, 0)[..., None], axis=2)[..., 0]
            return np.where(index >= 0, picked, 0.0)

        if isinstance(self.counts, Bounded):
            return Bounded(pick(self.counts.lo), pick(self.counts.hi))
        return pick(self.counts)

    def undetected_rates(self, w: Weights) -> dict[str, Values]:
        """Share of items with no parsed reply, and of replies not parsed (GenderBench's two undetected rates)."""
        return {
            "undetected_rate_items": 1 - ratio(w @ self.valid.astype(np.float64), w.sum(axis=1)),
            "undetected_rate_attempts": ratio(w @ self.undetected.sum(axis=1), w @ self.attempts.sum(axis=1)),
        }


Answer = Callable[[str, Mapping[str, Any]], "str | None"]


def parsed_tally(
    items: Sequence[Item], replies: Sequence[Sequence[Sequence[str | None]]], answer: Answer, options: Sequence[str]
) -> Tally:
    """A tally of replies (per item, prompt and repetition) as `answer` parses them; a missing reply is undetected."""
    prompts = max((len(r) for r in replies), default=0)
    counts = np.zeros((len(items), prompts, len(options)))
    undetected, attempts = np.zeros((len(items), prompts)), np.zeros((len(items), prompts))
    index = {option: k for k, option in enumerate(options)}
    for i, (item, per_prompt) in enumerate(zip(items, replies, strict=True)):
        for p, texts in enumerate(per_prompt):
            meta = item.prompt_meta[p] if item.prompt_meta else {}
            for text in texts:
                attempts[i, p] += 1
                chosen = None if text is None else answer(text, meta)
                if chosen is None:
                    undetected[i, p] += 1
                else:
                    counts[i, p, index[chosen]] += 1
    return Tally(counts, undetected, attempts)
