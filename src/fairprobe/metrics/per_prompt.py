"""Per-prompt values of the metrics that two models can be tested on pairwise (same prompts, same ids).

Each entry reads one sample (a samples.jsonl record) and gives its value, or None where the prompt does
not count (a failed call, an undetermined pair, a probability known only by bounds): `binary` values are
tested with exact McNemar, `continuous` ones with a paired bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from fairprobe.metrics.paper import add_per_prompt, gld_per_prompt

Kind = Literal["binary", "continuous"]


def _probs(s: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    f, m = s.get("p_female"), s.get("p_male")
    if s.get("error") or f is None or m is None or None in f or None in m:
        return None
    return np.asarray(f, dtype=np.float64), np.asarray(m, dtype=np.float64)


def _gas(s: dict[str, Any]) -> float | None:
    return None if s.get("error") or "first_gender" not in s else float(s["first_gender"] is not None)


def _gld(s: dict[str, Any]) -> float | None:
    probs = _probs(s)
    return None if probs is None else float(gld_per_prompt(*probs))


def _add(s: dict[str, Any]) -> float | None:
    probs = _probs(s)
    return None if probs is None else float(add_per_prompt(*probs))


def _neutral_share(s: dict[str, Any]) -> float | None:
    probs, groups = _probs(s), s.get("p_groups") or {}
    neutral = groups.get("neutral")
    if probs is None or neutral is None or any(None in words for words in groups.values()):
        return None
    total = probs[0].sum() + probs[1].sum() + sum(sum(words) for words in groups.values())
    return None if total <= 0 else float(sum(neutral) / total)


def _hit(s: dict[str, Any]) -> float | None:
    if s.get("error") or "hit" not in s or s.get("verdict") == "undetermined":
        return None
    return float(bool(s["hit"]))


PER_PROMPT: dict[str, tuple[Kind, Callable[[dict[str, Any]], float | None]]] = {
    "gas": ("binary", _gas),
    "gld": ("continuous", _gld),
    "add": ("continuous", _add),
    "neutral_share": ("continuous", _neutral_share),
    "hit_rate": ("binary", _hit),
}
