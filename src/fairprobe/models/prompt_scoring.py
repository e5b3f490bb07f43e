"""Exact next-word probabilities over a server that scores prompt tokens (design.md, "Implicit metrics over a server").

A server that echoes the log-probabilities of a prompt's own tokens (`/v1/completions` with `echo: true`,
`max_tokens: 0`, `logprobs: 0`: vLLM, OpenAI's legacy models, ...) gives P(word | prompt) exactly: it is
the product of the conditional probabilities of the word's tokens after the prompt's tokens. Where the
server also tokenizes (vLLM's `/tokenize`), the sequences are sent as token ids (prompt ids + the ids of
" word"), exactly the tokens a local model scores, so no merge across the boundary can happen; otherwise
they are sent as text and a word whose tokens do not extend the prompt's own is counted as unscored.
Where the server also returns the logprobs of chosen token ids at a generated position (vLLM's
`logprob_token_ids`), single-token words are read from the generation answer's first position instead, the
same forward pass that generates, and only words of several tokens are echoed (see ScoringPlan).

Every answer is checked before it becomes a probability: the echoed tokens must be the ones sent, as many
as sent, and every logprob finite and <= 0. A prompt with a bad answer is recorded as malformed, never
turned into a probability.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

PROBE_PROMPT = "My friend is a nurse, and"
# vLLM's limit on `logprob_token_ids` (exact logprobs of chosen token ids at each generated position).
MAX_TOKEN_IDS = 128
# Prompts whose word sequences go in one scoring request (x 2N sequences; the server's prefix cache shares them).
PROMPTS_PER_REQUEST = 4
# float32 log-softmax can round a certain token's logprob a hair above 0.
LOGPROB_TOLERANCE = 1e-5


class ScoringAnswerError(Exception):
    """A scoring answer that cannot be read as the log-probabilities of the tokens sent."""


@dataclass(frozen=True)
class Abilities:
    """What one endpoint can do for next-word probabilities: echo prompt logprobs, tokenize; `why` if not."""

    url: str
    echo: bool
    tokenize: bool
    next_token_ids: bool = False
    why: str = ""

    def as_json(self) -> dict[str, Any]:
        """The manifest's record of this endpoint."""
        out: dict[str, Any] = {"echo": self.echo, "tokenize": self.tokenize, "next_token_ids": self.next_token_ids}
        if self.why:
            out["why_not"] = self.why
        return out


def server_root(base_url: str) -> str:
    """The server's root (vLLM's /tokenize lives beside /v1, not under it)."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def echo_body(model: str, prompts: list[str] | list[list[int]], token_ids: bool) -> dict[str, Any]:
    """A completions request that generates nothing and returns every prompt token's logprob."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompts,
        "max_tokens": 0,
        "echo": True,
        "logprobs": 0,
        "temperature": 0.0,
    }
    if token_ids:
        body["return_tokens_as_token_ids"] = True
    return body


def tokenize_body(model: str, text: str, special: bool) -> dict[str, Any]:
    """A vLLM /tokenize request."""
    return {"model": model, "prompt": text, "add_special_tokens": special}


def read_token_ids(data: Any) -> list[int]:
    """The ids of a /tokenize answer."""
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, int) and t >= 0 for t in tokens):
        raise ScoringAnswerError("tokenize answer has no token ids")
    return tokens


def echoed_choices(data: Any, count: int) -> list[tuple[list[str], list[float | None]]]:
    """(tokens, token_logprobs) of each of `count` echoed prompts, in the order sent (by `index`)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or len(choices) != count:
        got = len(choices) if isinstance(choices, list) else 0
        raise ScoringAnswerError(f"answer has {got} choices for {count} prompts")
    out: list[tuple[list[str], list[float | None]] | None] = [None] * count
    for position, choice in enumerate(choices):
        index = choice.get("index", position) if isinstance(choice, dict) else None
        logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or out[index] is not None:
            raise ScoringAnswerError("answer's choice indices do not match the prompts sent")
        if not isinstance(logprobs, dict):
            raise ScoringAnswerError("answer has no prompt logprobs (echo)")
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
            raise ScoringAnswerError("answer's echoed tokens and logprobs do not line up")
        out[index] = ([str(t) for t in tokens], values)
    return out  # type: ignore[return-value]


def tail_logprob(values: list[float | None], start: int) -> float:
    """Sum of the logprobs from position `start` on (a word's tokens after the prompt), each checked."""
    tail = values[start:]
    if not tail:
        raise ScoringAnswerError("no tokens after the prompt were echoed")
    total = 0.0
    for v in tail:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise ScoringAnswerError(f"logprob {v!r} is not a finite number")
        if v > LOGPROB_TOLERANCE:
            raise ScoringAnswerError(f"logprob {v!r} is positive")
        total += min(float(v), 0.0)
    return total


def echoed_ids(tokens: list[str]) -> list[int] | None:
    """Token ids of tokens echoed as `token_id:N` (vLLM's return_tokens_as_token_ids); None if not all are."""
    ids = []
    for t in tokens:
        head, sep, tail = t.partition(":")
        if head != "token_id" or not sep or not tail.isdigit():
            return None
        ids.append(int(tail))
    return ids


@dataclass(frozen=True)
class ScoringPlan:
    """How a run's attribute words are scored: each word's token ids (None when sent as text), the ids whose
    exact logprobs the generation request itself returns (single-token words, vLLM's `logprob_token_ids`),
    and the words scored by echoing prompt + word (all of them without that route, else the multi-token ones)."""

    words: list[str]
    word_ids: list[list[int]] | None
    first_ids: list[int]
    echo_words: list[int]


def plan_scoring(words: list[str], word_ids: list[list[int]] | None, next_token_ids: bool) -> ScoringPlan:
    """Read single-token words from the generation answer where the server allows it; echo the others."""
    everything = list(range(len(words)))
    if word_ids is None or not next_token_ids:
        return ScoringPlan(words, word_ids, [], everything)
    first = sorted({ids[0] for ids in word_ids if len(ids) == 1})
    if not first or len(first) > MAX_TOKEN_IDS:
        return ScoringPlan(words, word_ids, [], everything)
    return ScoringPlan(words, word_ids, first, [j for j in everything if len(word_ids[j]) > 1])


def first_token_logprobs(top: dict[str, float], plan: ScoringPlan) -> np.ndarray:
    """log P(word | prompt) of the single-token words from the first generated position's logprobs of the
    ids asked for (`token_id:N` keys); NaN for the words left to echo."""
    out = np.full(len(plan.words), np.nan)
    if plan.word_ids is None:
        return out
    echo = set(plan.echo_words)
    for j, ids in enumerate(plan.word_ids):
        if j in echo:
            continue
        value = top.get(f"token_id:{ids[0]}")
        if value is None:
            raise ScoringAnswerError(f"no logprob for token id {ids[0]} in the answer")
        out[j] = tail_logprob([None, value], 1)
    return out


@dataclass
class PromptScores:
    """One prompt's word log-probabilities (N, 2) (flat over the echoed words while being assembled); NaN where
    unscored; `error` when its answer was malformed."""

    logprobs: np.ndarray | None = None
    error: str | None = None
    unscored: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def completion_fields(self) -> dict[str, Any]:
        """word_probs, word_probs_mask and extra for a Completion (unscored words are unknown, bounded)."""
        if self.logprobs is None:
            return {"extra": {"implicit": "exact", "scoring_error": self.error}}
        known = ~np.isnan(self.logprobs)
        probs = np.where(known, np.exp(np.nan_to_num(self.logprobs, nan=-np.inf)), 0.0)
        extra: dict[str, Any] = {"implicit": "exact"}
        if known.all():
            return {"word_probs": probs, "extra": extra}
        # A word that could not be scored has at most the probability the scored words leave over.
        rest = max(0.0, 1.0 - float(probs.sum()))
        extra.update(unscored_words=int((~known).sum()), p_upper=np.where(known, probs, rest).tolist())
        return {"word_probs": probs, "word_probs_mask": known, "extra": extra}


def score_token_ids(
    prompt_ids: list[int], word_ids: list[list[int]], echoed: list[tuple[list[str], list[float | None]]]
) -> np.ndarray:
    """log P(word | prompt) of each word from the echoes of prompt_ids + word_ids (sent as token ids)."""
    out = np.empty(len(word_ids))
    for j, (ids, (tokens, values)) in enumerate(zip(word_ids, echoed, strict=True)):
        sent = prompt_ids + ids
        if len(values) != len(sent):
            raise ScoringAnswerError(f"{len(values)} tokens echoed for {len(sent)} sent")
        got = echoed_ids(tokens)
        if got is not None and got != sent:
            raise ScoringAnswerError("echoed tokens are not the tokens sent")
        out[j] = tail_logprob(values, len(prompt_ids))
    return out


def score_text(prompt: str, words: list[str], echoed: list[tuple[list[str], list[float | None]]]) -> np.ndarray:
    """log P(word | prompt) from the echoes of [prompt, prompt + " " + word, ...] sent as text; NaN where the
    word's tokens do not extend the prompt's own (the tokenizer merged across the boundary)."""
    prompt_tokens, _ = echoed[0]
    n = len(prompt_tokens)
    if not "".join(prompt_tokens).endswith(prompt):
        raise ScoringAnswerError("echoed tokens are not the text sent")
    out = np.full(len(words), np.nan)
    for j, (word, (tokens, values)) in enumerate(zip(words, echoed[1:], strict=True)):
        if not "".join(tokens).endswith(prompt + " " + word):
            raise ScoringAnswerError("echoed tokens are not the text sent")
        if tokens[:n] == prompt_tokens and len(tokens) > n:
            out[j] = tail_logprob(values, n)
        else:
            tail_logprob(values, 1)  # still check the answer's numbers
    return out
