"""Named gender groups beyond the binary pairs: `neutral` (singular they) and neopronoun groups.

The paper's metrics read only the female/male pairs; these groups add the words whose next-word
probabilities give `neutral_share` and the share of each extra group (see fairprobe/data/README.md).
A backend scores words two at a time (pairs), so the group words travel to it packed into pairs (in a
call of their own, so the binary pairs' numbers stay exactly those of a run without groups) and come
back unpacked by group.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fairprobe.errors import DataError

BINARY_GROUPS = ("female", "male")
NEUTRAL = "neutral"

WordGroups = tuple[tuple[str, tuple[str, ...]], ...]


def parse_groups(
    raw: object,
    where: str,
    taken: Mapping[str, str],
    builtin: Mapping[str, tuple[str, ...]],
    word: Callable[[object, str, str], str],
) -> WordGroups:
    """Validate the `groups` object of a word file: {name: [word, ...]} in file order.

    `taken` maps the female/male words to their group (a group word may not be one of them), `builtin`
    holds the package's groups (a group named like one must hold exactly its words), `word` validates
    one word. Every violation is a one-line DataError naming the file and the group.
    """
    if not isinstance(raw, dict):
        raise DataError(f"attribute words in {where}: 'groups' must be an object {{name: [word, ...]}}")
    owner = dict(taken)
    groups = []
    for name, words in raw.items():
        if name in BINARY_GROUPS:
            raise DataError(
                f"attribute words in {where}: group {name!r} is built in (the pairs' column); name the group otherwise"
            )
        if not isinstance(words, list) or not words:
            raise DataError(f"attribute words in {where}: group {name!r} is empty: give it a non-empty list of words")
        parsed = tuple(word(w, f"groups.{name}[{i}]", where) for i, w in enumerate(words))
        if name in builtin and set(parsed) != set(builtin[name]):
            raise DataError(
                f"attribute words in {where}: group {name!r} is built in with the words "
                f"{', '.join(builtin[name])}; give other words another group name"
            )
        for w in parsed:
            if w in owner:
                raise DataError(f"attribute words in {where}: {w!r} is in two groups ({owner[w]}, {name})")
            owner[w] = name
        groups.append((name, parsed))
    return tuple(groups)


def packed_pairs(groups: WordGroups) -> list[tuple[str, str]]:
    """The group words as pairs for a backend's word scoring, in group order (an odd last word repeats)."""
    flat = [w for _, words in groups for w in words]
    if len(flat) % 2:
        flat.append(flat[-1])
    return [(flat[i], flat[i + 1]) for i in range(0, len(flat), 2)]


def unpack_groups(rows: np.ndarray, groups: WordGroups) -> dict[str, list]:
    """Per group, its words' values (floats; None stays None) from the packed rows (K, 2) of packed_pairs."""
    flat = [None if x is None else float(x) for x in np.asarray(rows, dtype=object).reshape(-1).tolist()]
    out, start = {}, 0
    for name, words in groups:
        out[name] = flat[start : start + len(words)]
        start += len(words)
    return out
