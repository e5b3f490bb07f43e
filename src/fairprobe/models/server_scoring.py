"""log P(continuation | prompt) over an OpenAI-compatible server (design.md, "Scoring continuations").

A server that echoes the log-probabilities of a prompt's own tokens (`/v1/completions` with `echo: true`,
`max_tokens: 0`, `logprobs`: vLLM, OpenAI's legacy models, ...) scores a continuation exactly: the sum of the
logprobs of its tokens after the prompt's. Where the server also gives token ids (vLLM: `return_token_ids` in any
answer, `/tokenize`), the sequences are sent as token ids (the prompt's ids + the continuation's own ids), exactly
the tokens a local model scores; otherwise they are sent as text and a continuation whose tokens do not extend the
prompt's own is only bounded. Where the server returns the logprobs of chosen token ids at a generated position
(vLLM's `logprob_token_ids`), single-token continuations are read from a generation answer's first position, the
same forward pass that generates. Continuations of several tokens are then read position by position, the same way
(`branches`): one one-token generation per distinct beginning of the continuations, after the prompt's tokens, many
in one request. Unlike an echo (prompt logprobs, which vLLM computes without its prefix cache), these reuse the
prompt's cached keys and values: the prompt is computed once, each option costs its few tokens. Other echo servers
are echoed, as many sequences per request as keep the answer under the size limit. A server that gives only the
top-k logprobs of the first generated position bounds every continuation (see `topk_scores`).

Every answer is checked before it becomes a number: the echoed tokens must be the ones sent (as ids, or as text
that spells the continuation sent), as many as sent, every logprob finite and <= 0, the probabilities a position
lists at most 1 together and the generation's own logprob the one its position was scored with; and a prompt's
scores are checked together (`check_total`): continuations none of which begins another are disjoint events,
so their probabilities add up to at most 1. A prompt with a bad answer is recorded as malformed, never scored.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from fairprobe.models.base import UNAVAILABLE, ContinuationScore, Scores

PROBE_PROMPT = "My friend is a nurse, and"
# The conversation replicas must render into the same tokens (one chat template) before anything is scored.
CHAT_PROBE = [{"role": "user", "content": PROBE_PROMPT}]
# vLLM's limit on `logprob_token_ids` (exact logprobs of chosen token ids at each generated position).
MAX_TOKEN_IDS = 128
# Prompts whose continuations are scored together (one echo request, or one request per level of `branches`).
ECHO_PROMPTS_PER_REQUEST = 16
# An echo answer's bytes per echoed token (vLLM with token ids and the top token: ~180), to keep it under the limit.
ECHO_BYTES_PER_TOKEN = 250
# Positions read in one request (`branches`): each answers with the logprobs of up to MAX_TOKEN_IDS ids (~4 kB).
POSITIONS_PER_REQUEST = 256
# float32 log-softmax can round a certain token's logprob a hair above 0.
LOGPROB_TOLERANCE = 1e-5
# Disjoint events' probabilities may add up a hair above 1 in float32; two reads of one logprob agree this closely.
TOTAL_TOLERANCE = 1e-3
TINY = sys.float_info.min


class ScoringAnswerError(Exception):
    """A scoring answer that cannot be read as the log-probabilities of the tokens sent."""


@dataclass(frozen=True)
class Abilities:
    """What one endpoint can do for scoring: echo prompt logprobs, return token ids in answers
    (`return_token_ids`), tokenize (`/tokenize`), logprobs of chosen ids at a generated position; `why` if not.
    `fingerprint` (the probe prompt's token ids, else its echoed tokens) and `probe_logprobs` (their echoed
    logprobs) tell replicas of one model from endpoints serving another model or tokenizer."""

    url: str
    echo: bool
    tokenize: bool
    prompt_ids: bool = False
    next_token_ids: bool = False
    why: str = ""
    fingerprint: tuple[int | str, ...] = ()
    probe_logprobs: tuple[float, ...] = ()

    def as_json(self) -> dict[str, Any]:
        """The manifest's record of this endpoint."""
        out: dict[str, Any] = {
            "echo": self.echo,
            "tokenize": self.tokenize,
            "prompt_ids": self.prompt_ids,
            "next_token_ids": self.next_token_ids,
        }
        if self.why:
            out["why_not"] = self.why
        return out


def server_root(base_url: str) -> str:
    """The server's root (vLLM's /tokenize lives beside /v1, not under it)."""
    return base_url[: -len("/v1")] if base_url.endswith("/v1") else base_url


def echo_body(model: str, prompts: list[str] | list[list[int]], token_ids: bool, top: int = 0) -> dict[str, Any]:
    """A completions request that generates nothing and returns every prompt token's logprob (and the `top` most
    likely tokens at each position, which tell whether a continuation is greedy)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompts,
        "max_tokens": 0,
        "echo": True,
        "logprobs": top,
        "temperature": 0.0,
    }
    if token_ids:
        body["return_tokens_as_token_ids"] = True
    return body


def ids_body(model: str, texts: list[str], special: bool) -> dict[str, Any]:
    """A completions request whose answer carries each text's token ids (`return_token_ids`), one choice per text."""
    return {
        "model": model,
        "prompt": texts,
        "max_tokens": 1,
        "temperature": 0.0,
        "return_token_ids": True,
        "add_special_tokens": special,
    }


def tokenize_body(model: str, prompt: str | list[dict[str, str]], special: bool) -> dict[str, Any]:
    """A vLLM /tokenize request: text, or chat messages rendered with the generation prompt."""
    if isinstance(prompt, str):
        return {"model": model, "prompt": prompt, "add_special_tokens": special}
    return {"model": model, "messages": prompt, "add_generation_prompt": True}


def positions_body(model: str, sequences: list[list[int]], token_ids: list[int]) -> dict[str, Any]:
    """A completions request that generates one token (greedily) after each sequence and returns the logprobs of
    `token_ids` at that position (vLLM's `logprob_token_ids`); the sequences' common beginnings hit its prefix cache."""
    return {
        "model": model,
        "prompt": sequences,
        "max_tokens": 1,
        "temperature": 0.0,
        "logprobs": 0,
        "logprob_token_ids": token_ids,
        "return_tokens_as_token_ids": True,
    }


def read_ids(value: Any, what: str) -> list[int]:
    """A non-empty list of token ids, or ScoringAnswerError."""
    if not isinstance(value, list) or not value or not all(isinstance(t, int) and t >= 0 for t in value):
        raise ScoringAnswerError(f"{what} has no token ids")
    return value


def read_token_ids(data: Any) -> list[int]:
    """The ids of a /tokenize answer."""
    return read_ids(data.get("tokens") if isinstance(data, dict) else None, "tokenize answer")


def choices_of(data: Any, count: int) -> list[dict[str, Any]]:
    """The `count` choices of a multi-prompt answer, in the order sent (by `index`)."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or len(choices) != count:
        got = len(choices) if isinstance(choices, list) else 0
        raise ScoringAnswerError(f"answer has {got} choices for {count} prompts")
    out: list[dict[str, Any] | None] = [None] * count
    for position, choice in enumerate(choices):
        index = choice.get("index", position) if isinstance(choice, dict) else None
        if not isinstance(index, int) or not 0 <= index < count or out[index] is not None:
            raise ScoringAnswerError("answer's choice indices do not match the prompts sent")
        out[index] = choice
    return [c for c in out if c is not None]


@dataclass(frozen=True)
class Echo:
    """One echoed sequence: its tokens, their logprobs, and the most likely token at each position (when asked)."""

    tokens: list[str]
    values: list[float | None]
    top: list[str | None] = field(default_factory=list)


def echoed(data: Any, count: int) -> list[Echo]:
    """The echoes of `count` sequences, in the order sent."""
    out = []
    for choice in choices_of(data, count):
        logprobs = choice.get("logprobs")
        if not isinstance(logprobs, dict):
            raise ScoringAnswerError("answer has no prompt logprobs (echo)")
        tokens, values = logprobs.get("tokens"), logprobs.get("token_logprobs")
        if not isinstance(tokens, list) or not isinstance(values, list) or len(tokens) != len(values):
            raise ScoringAnswerError("answer's echoed tokens and logprobs do not line up")
        tops = logprobs.get("top_logprobs")
        top = [best_token(t) for t in tops] if isinstance(tops, list) and len(tops) == len(tokens) else []
        out.append(Echo([str(t) for t in tokens], values, top))
    return out


def best_token(entry: Any) -> str | None:
    """The most likely token of one position's top logprobs (None where the position has none)."""
    if not isinstance(entry, dict) or not entry:
        return None
    ranked = [(v, k) for k, v in entry.items() if isinstance(v, int | float) and not isinstance(v, bool)]
    return max(ranked)[1] if ranked else None


def checked_logprob(value: Any) -> float:
    """One logprob of an answer: finite and <= 0 (rounding up to LOGPROB_TOLERANCE counts as 0)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ScoringAnswerError(f"logprob {value!r} is not a finite number")
    if value > LOGPROB_TOLERANCE:
        raise ScoringAnswerError(f"logprob {value!r} is positive")
    return min(float(value), 0.0)


def tail_logprob(values: list[float | None], start: int) -> float:
    """Sum of the logprobs from position `start` on (a continuation's tokens after the prompt), each checked."""
    tail = values[start:]
    if not tail:
        raise ScoringAnswerError("no tokens after the prompt were echoed")
    return math.fsum(checked_logprob(v) for v in tail)


def echoed_ids(tokens: list[str | None]) -> list[int] | None:
    """Token ids of tokens echoed as `token_id:N` (vLLM's return_tokens_as_token_ids); None if not all are."""
    ids = []
    for t in tokens:
        head, sep, tail = (t or "").partition(":")
        if head != "token_id" or not sep or not tail.isdigit():
            return None
        ids.append(int(tail))
    return ids


def score_ids(prompt_ids: list[int], continuation_ids: list[int], echo: Echo, text: str) -> ContinuationScore:
    """One continuation's score from the echo of prompt_ids + continuation_ids (sent as token ids; `text` is the
    continuation they spell): the echoed tokens must be those ids, or, where they come back as text, spell it."""
    sent = prompt_ids + continuation_ids
    if len(echo.values) != len(sent):
        raise ScoringAnswerError(f"{len(echo.values)} tokens echoed for {len(sent)} sent")
    got = echoed_ids(echo.tokens)
    if got is not None and got != sent:
        raise ScoringAnswerError("echoed tokens are not the tokens sent")
    if got is None and "".join(echo.tokens[len(prompt_ids) :]) != text:
        raise ScoringAnswerError(f"echoed tokens do not spell the continuation sent ({text[:40]!r})")
    best = echoed_ids(echo.top[len(prompt_ids) :]) if echo.top else None
    greedy = None if best is None else best == continuation_ids
    return ContinuationScore(tail_logprob(echo.values, len(prompt_ids)), len(continuation_ids), greedy)


def score_text(prompt: str, continuations: tuple[str, ...], echoes: list[Echo]) -> list[ContinuationScore]:
    """Scores from the echoes of [prompt, prompt + continuation, ...] sent as text: exact where the continuation's
    tokens extend the prompt's own, else only bounded by 1 (the tokenizer merged across the boundary)."""
    prompt_tokens = echoes[0].tokens
    n = len(prompt_tokens)
    if not "".join(prompt_tokens).endswith(prompt):
        raise ScoringAnswerError("echoed tokens are not the text sent")
    out = []
    for text, echo in zip(continuations, echoes[1:], strict=True):
        if not "".join(echo.tokens).endswith(prompt + text):
            raise ScoringAnswerError("echoed tokens are not the text sent")
        if echo.tokens[:n] == prompt_tokens and len(echo.tokens) > n:
            out.append(ContinuationScore(tail_logprob(echo.values, n), len(echo.tokens) - n))
        else:
            tail_logprob(echo.values, 1)  # still check the answer's numbers
            out.append(ContinuationScore(0.0, None, None, "upper_bound"))
    return out


def normalise_token(token: str) -> str:
    """Token text as a string: SentencePiece's '▁' and byte-level BPE's 'Ġ' marks become a space."""
    if token[:1] in ("▁", "Ġ"):
        return " " + token[1:]
    return token


def topk_scores(top: dict[str, float] | None, continuations: tuple[str, ...], asked: int) -> Scores:
    """Scores bounded by one position's top logprobs (the first generated one).

    A continuation that is one listed token is known exactly; any other has at most the smallest listed
    probability (and at most the mass the list leaves over), raised to a listed token's probability where that
    token begins it (its first token may be that one). No top logprobs at all: every score unavailable.
    """
    if not top:
        return Scores(tuple(UNAVAILABLE for _ in continuations), mode="topk", top_logprobs=0)
    listed: dict[str, float] = {}
    for token, logprob in top.items():
        if logprob is not None and math.isfinite(logprob):
            key = normalise_token(token)
            listed[key] = listed.get(key, 0.0) + math.exp(logprob)
    below = min(min(listed.values()), max(0.0, 1.0 - sum(listed.values())))
    out = []
    for text in continuations:
        if text in listed:
            out.append(ContinuationScore(math.log(max(listed[text], TINY)), 1, None, "exact"))
            continue
        bound = max([below, *(p for t, p in listed.items() if t and text.startswith(t))])
        out.append(ContinuationScore(math.log(max(bound, TINY)), None, None, "upper_bound"))
    return Scores(tuple(out), mode="topk", top_logprobs=asked)


def first_position_scores(
    values: dict[int, float], first: int | None, ids: list[list[int]], greedy_run: bool, own: float | None = None
) -> list[ContinuationScore | None]:
    """The scores of single-token continuations from a generation answer's first position (`values`: the logprobs
    of the ids asked for, `first`: the token generated first, `own`: the logprob the answer gives that token);
    None for the continuations left to echo. The generated token's own logprob must be the one listed for it
    (that the listed ones hold at most probability 1 is checked as the answer is read: `parse_reply`)."""
    listed = {t: checked_logprob(v) for t, v in values.items()}
    if own is not None and first in listed and abs(checked_logprob(own) - listed[first]) > TOTAL_TOLERANCE:
        raise ScoringAnswerError(
            f"the generated token's own logprob {own:.6g} is not the {listed[first]:.6g} listed for it"
        )
    out: list[ContinuationScore | None] = []
    for tokens in ids:
        if len(tokens) != 1:
            out.append(None)
            continue
        if tokens[0] not in values:
            raise ScoringAnswerError(f"no logprob for token id {tokens[0]} in the answer")
        greedy = (first == tokens[0]) if greedy_run and first is not None else None
        out.append(ContinuationScore(listed[tokens[0]], 1, greedy))
    return out


@dataclass(frozen=True)
class Branch:
    """A position to read in the tree of a prompt's continuations: the tokens after the prompt so far (`prefix`)
    and the next token of each continuation that begins with them (`children`)."""

    prefix: tuple[int, ...]
    children: tuple[int, ...]


def branches(continuations: list[list[int]]) -> list[Branch]:
    """The positions to read to score every continuation (token ids): one per distinct proper beginning, the
    empty one (right after the prompt) first. "(a)" and "(b)" share "(": 1 + 2 positions, not 2 x 3."""
    found: dict[tuple[int, ...], set[int]] = {}
    for ids in continuations:
        for t, token in enumerate(ids):
            found.setdefault(tuple(ids[:t]), set()).add(token)
    ordered = sorted(found.items(), key=lambda item: (len(item[0]), item[0]))
    return [Branch(prefix, tuple(sorted(children))) for prefix, children in ordered]


def position_read(choice: Any) -> tuple[dict[int, float], int | None]:
    """One answer choice of `positions_body`: the logprobs of the ids asked for at its generated position (each
    checked, together at most probability 1) and the token generated there (greedy: the most likely)."""
    logprobs = choice.get("logprobs") if isinstance(choice, dict) else None
    tops = logprobs.get("top_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(tops, list) or len(tops) != 1 or not isinstance(tops[0], dict):
        raise ScoringAnswerError("answer has no logprobs at the generated position")
    values: dict[int, float] = {}
    for key, value in tops[0].items():
        ids = echoed_ids([key])
        if ids is None:
            raise ScoringAnswerError(f"answer lists {str(key)[:40]!r}, not a token id")
        values[ids[0]] = checked_logprob(value)
    if math.fsum(math.exp(v) for v in values.values()) > 1.0 + TOTAL_TOLERANCE:
        raise ScoringAnswerError("the logprobs at the generated position hold a probability above 1")
    generated = echoed_ids(logprobs.get("tokens") or [None])  # type: ignore[union-attr]
    return values, generated[0] if generated and len(generated) == 1 else None


def tree_scores(
    continuations: list[list[int]], read: dict[tuple[int, ...], tuple[dict[int, float], int | None]]
) -> list[ContinuationScore]:
    """Each continuation's score from its positions read (`branches`): the sum of its tokens' logprobs, greedy
    when every token is the one generated there."""
    out = []
    for ids in continuations:
        total, greedy = [], True
        for t, token in enumerate(ids):
            values, generated = read[tuple(ids[:t])]
            if token not in values:
                raise ScoringAnswerError(f"no logprob for token id {token} in the answer")
            total.append(values[token])
            greedy = greedy and generated == token
        out.append(ContinuationScore(math.fsum(total), len(ids), greedy))
    return out


def position_groups(nodes: list[tuple[int, Branch]]) -> list[list[tuple[int, Branch]]]:
    """Positions (prompt index, branch) packed into requests of at most POSITIONS_PER_REQUEST positions asking
    at most MAX_TOKEN_IDS ids in all (a branch with more children is read in several pieces)."""
    pieces = [
        (k, Branch(b.prefix, b.children[c : c + MAX_TOKEN_IDS]))
        for k, b in nodes
        for c in range(0, len(b.children), MAX_TOKEN_IDS)
    ]
    groups: list[list[tuple[int, Branch]]] = []
    asked: set[int] = set()
    for piece in pieces:
        more = asked | set(piece[1].children)
        if not groups or len(groups[-1]) >= POSITIONS_PER_REQUEST or len(more) > MAX_TOKEN_IDS:
            groups.append([])
            more = set(piece[1].children)
        groups[-1].append(piece)
        asked = more
    return groups


def parts_by_size(sizes: list[int], budget: int) -> list[range]:
    """Consecutive index ranges whose sizes add up to at most `budget` each (an item over it goes alone)."""
    parts: list[range] = []
    start, total = 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > budget:
            parts.append(range(start, i))
            start, total = i, 0
        total += size
    if sizes:
        parts.append(range(start, len(sizes)))
    return parts


@lru_cache(maxsize=256)
def disjoint(continuations: tuple[str, ...]) -> tuple[int, ...]:
    """Indices of the continuations no other one begins (as text), each text once: as token sequences
    none of them begins another, so they are disjoint events after a prompt. In sorted order a text's
    beginnings come before it, so one pass keeps each text that does not start with the last one kept."""
    kept: list[int] = []
    last: str | None = None
    for index in sorted(range(len(continuations)), key=lambda i: continuations[i]):
        text = continuations[index]
        if last is not None and text.startswith(last):
            continue
        kept.append(index)
        last = text
    return tuple(sorted(kept))


def check_total(continuations: tuple[str, ...], scores: list[ContinuationScore]) -> None:
    """A prompt's exact scores checked together: the continuations that are disjoint events hold at most
    probability 1 (plus rounding), else ScoringAnswerError (a server whose every word token is -0.001 is lying)."""
    values = [scores[i].logprob for i in disjoint(continuations) if scores[i].status == "exact"]
    total = math.fsum(math.exp(v) for v in values if v is not None)
    if total > 1.0 + TOTAL_TOLERANCE:
        raise ScoringAnswerError(
            f"the continuations' probabilities add up to {total:.4g}: disjoint continuations hold at most 1"
        )


def chat_mismatch(rendered: dict[str, tuple[int, ...]]) -> str | None:
    """Why replicas render the probe conversation differently (another chat template), from each one's /tokenize
    of it, or None when they all render it alike."""
    (first, tokens), *others = rendered.items()
    for url, other in others:
        if other != tokens:
            return (
                f"the probe conversation renders as tokens {list(tokens)[:12]}... ({len(tokens)}) at {first} but "
                f"{list(other)[:12]}... ({len(other)}) at {url} (another chat template)"
            )
    return None


# Two replicas of one model echo the probe's logprobs this closely (batching and hardware move them a little).
REPLICA_LOGPROB_TOLERANCE = 0.1


def replica_mismatch(first: Abilities, other: Abilities) -> str | None:
    """Why `other` does not serve the model `first` serves (another tokenizer: other token ids for the probe
    prompt; another model: other logprobs for its tokens), or None when both echo the probe alike."""
    if first.fingerprint != other.fingerprint:
        return (
            f"the probe prompt is tokens {list(first.fingerprint)[:12]} at {first.url} but "
            f"{list(other.fingerprint)[:12]} at {other.url} (another tokenizer)"
        )
    gaps = [abs(a - b) for a, b in zip(first.probe_logprobs, other.probe_logprobs, strict=False)]
    if gaps and max(gaps) > REPLICA_LOGPROB_TOLERANCE:
        return f"the probe prompt's logprobs differ by up to {max(gaps):.3g} between {first.url} and {other.url}"
    return None
