"""A `--limit` draw: n items spread over a set's strata as evenly as their sizes allow, chosen with a fixed seed.

Strata are the items with equal keys (a template prompt's topic and stereotyped gender). The draw deals items
round by round: each round takes the next item of every stratum that has one left, strata in a seeded random
order, items of a stratum in a seeded random order; the first n items dealt are the draw. So every stratum gives
an equal share where its size allows (a small stratum gives all it has and the others share the rest), a
remainder goes one item each to the first strata of the round, and a larger limit draws the same prompts and
more. The draw keeps the items' file order and depends only on the keys, n and the seed: every model and every
rerun of a command sees the same prompts.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

# The draw's fixed seed (mixed with the set's name, so two sets of one run draw independently).
LIMIT_SEED = 20240217


def stratum_codes(keys: Sequence[Hashable]) -> np.ndarray:
    """One integer per item naming its stratum (strata numbered in sorted key order)."""
    index = {key: i for i, key in enumerate(sorted(set(keys), key=repr))}
    return np.array([index[k] for k in keys], dtype=np.int64)


def stratified_draw(keys: Sequence[Hashable], n: int, seed: int) -> list[int]:
    """Indices of n items (all when n covers them), spread over the strata as evenly as they allow, in order."""
    if n >= len(keys):
        return list(range(len(keys)))
    rng = np.random.default_rng(seed)
    codes = stratum_codes(keys)
    position = np.empty(len(keys), dtype=np.int64)  # an item's place in its stratum's random order: its round
    for k in range(int(codes.max()) + 1):
        members = np.flatnonzero(codes == k)
        position[rng.permutation(members)] = np.arange(len(members))
    rank = rng.permutation(int(codes.max()) + 1)  # the strata's order within every round
    dealt = np.lexsort((rank[codes], position))
    return sorted(int(i) for i in dealt[:n])
