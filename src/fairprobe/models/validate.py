"""Checks on what a server sends, before any of it becomes a number: a bad answer is malformed, never a metric.

A logprob must be a finite JSON number <= 0 (`true` is not a number; a tiny positive rounding error up to
LOGPROB_TOLERANCE counts as 0), a token a string, a text a string, and an answer's body at most
`AnswerLimits.max_bytes` long and complete within `AnswerLimits.deadline` seconds from the request.
The limits come from $FAIRPROBE_MAX_ANSWER_BYTES and $FAIRPROBE_REQUEST_DEADLINE when set.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from fairprobe.errors import ConfigError
from fairprobe.redact import clip

LOGPROB_TOLERANCE = 1e-6
MAX_ANSWER_BYTES = 4_000_000
REQUEST_DEADLINE = 300.0


class MalformedResponse(Exception):
    """A server answer that is not what an OpenAI-compatible server sends (or breaks a limit)."""


@dataclass(frozen=True)
class AnswerLimits:
    """Bounds on one HTTP answer: body size in bytes and seconds from sending to the last byte."""

    max_bytes: int = MAX_ANSWER_BYTES
    deadline: float = REQUEST_DEADLINE

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ConfigError(f"the answer size limit must be at least 1 byte, got {self.max_bytes}")
        if not (math.isfinite(self.deadline) and self.deadline > 0):
            raise ConfigError(f"the request deadline must be a positive number of seconds, got {self.deadline}")

    @classmethod
    def from_env(cls) -> AnswerLimits:
        """Limits from $FAIRPROBE_MAX_ANSWER_BYTES and $FAIRPROBE_REQUEST_DEADLINE (defaults otherwise)."""
        return cls(
            max_bytes=int(_env_number("FAIRPROBE_MAX_ANSWER_BYTES", MAX_ANSWER_BYTES, integer=True)),
            deadline=_env_number("FAIRPROBE_REQUEST_DEADLINE", REQUEST_DEADLINE),
        )


def _env_number(name: str, default: float, integer: bool = False) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw) if integer else float(raw)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise ConfigError(f"${name} must be {kind}, got {raw!r}") from None


def logprob(value: Any, where: str = "logprob") -> float:
    """A server's log-probability as a float: finite, <= 0 (rounding up to 1e-6 above 0 counts as 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MalformedResponse(f"{where} is not a number: {_show(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise MalformedResponse(f"{where} is not finite: {_show(value)}")
    if number > LOGPROB_TOLERANCE:
        raise MalformedResponse(f"{where} is above 0 (a probability above 1): {_show(value)}")
    return min(number, 0.0)


def token(value: Any, where: str = "token") -> str:
    """A token's text: must be a string."""
    if not isinstance(value, str):
        raise MalformedResponse(f"{where} is not a string: {_show(value)}")
    return value


def text(value: Any, where: str = "text") -> str:
    """A continuation's text: must be a string."""
    if not isinstance(value, str):
        raise MalformedResponse(f"{where} is not a string: {_show(value)}")
    return value


def top_logprobs(entries: Any, where: str = "top_logprobs") -> dict[str, float]:
    """A {token: logprob} mapping with every key a string and every value a valid logprob."""
    if not isinstance(entries, dict):
        raise MalformedResponse(f"{where} is not an object")
    return {token(k, f"{where} token"): logprob(v, f"{where}[{_show(k)}]") for k, v in entries.items()}


def total_probability(top: dict[str, float], where: str = "top_logprobs") -> float:
    """The probability the listed tokens hold together: at most 1 (plus rounding), else the answer is malformed."""
    total = math.fsum(math.exp(v) for v in top.values())
    if total > 1.0 + 1e-3:
        raise MalformedResponse(f"{where} hold a total probability of {total:.4g}, above 1")
    return total


def usage(data: Any) -> tuple[int | None, int | None]:
    """The prompt tokens a server read and the tokens it generated for an answer (its `usage` object's
    `prompt_tokens` and `completion_tokens`), each None where the answer does not say."""
    found = data.get("usage") if isinstance(data, dict) else None
    if not isinstance(found, dict):
        return None, None
    return _count(found.get("prompt_tokens")), _count(found.get("completion_tokens"))


def _count(value: Any) -> int | None:
    """A count a server gave (a non-negative integer), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def json_body(content: bytes, non_finite: bool = False) -> Any:
    """A body parsed as JSON (UTF-8; NaN and Infinity, which JSON does not have, are refused).

    With `non_finite`, NaN and Infinity are read as floats instead, for answers whose numbers are each
    checked later (a scoring answer covers several prompts: one prompt's NaN must not sink the others).
    """
    try:
        return json.loads(content.decode("utf-8"), parse_constant=float if non_finite else _reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise MalformedResponse("answer is not valid JSON") from None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _show(value: Any) -> str:
    """A value for a message: its repr, redacted and then cut to 40 characters."""
    return clip(repr(value), 40)
