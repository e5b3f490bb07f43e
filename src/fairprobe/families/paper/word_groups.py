"""Named gender groups beyond the binary pairs: `neutral` (singular they) and neopronoun groups.

The paper's metrics read only the female/male pairs; these groups add the words whose next-word
probabilities give `neutral_share` and the share of each extra group (see fairprobe/data/README.md).
The group words are scored in the same call as the pairs (one tuple of continuations, pairs first).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

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
