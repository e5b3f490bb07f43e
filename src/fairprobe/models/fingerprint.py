"""A server's fingerprint: its answers to a fixed probe prompt, recorded in a run's manifest, so that a resumed run
can tell that the model behind a name and URL changed (and refuse to mix two models in one run).

Two parts, each where the server gives it: the echoed prompt (token ids and their logprobs, servers that score
prompt tokens) and a greedy generation of GREEDY_TOKENS tokens with the top logprobs of each position (any server
that generates: top-k-only servers and runs that only generate included). Two answers differ beyond tolerance when
the prompt is other tokens, the greedy text differs, or a logprob both list differs by more than
REPLICA_LOGPROB_TOLERANCE (batching and hardware move logprobs a little; another model moves them more).
"""

from __future__ import annotations

from typing import Any

from fairprobe.models import validate
from fairprobe.models.server_scoring import REPLICA_LOGPROB_TOLERANCE, Abilities, replica_mismatch
from fairprobe.models.validate import MalformedResponse
from fairprobe.redact import clip, redact

# Tokens the greedy probe generates: enough to tell models apart, cheap on any server.
GREEDY_TOKENS = 8
# Top logprobs the greedy probe asks for at each position (OpenAI's legacy completions allow 5).
GREEDY_TOP = 5


def greedy_body(model: str, prompt: str, chat: bool) -> dict[str, Any]:
    """The greedy probe's request: GREEDY_TOKENS tokens at temperature 0 with the top logprobs of each position."""
    body: dict[str, Any] = {"model": model, "max_tokens": GREEDY_TOKENS, "temperature": 0.0}
    if chat:
        return {**body, "messages": [{"role": "user", "content": prompt}], "logprobs": True, "top_logprobs": GREEDY_TOP}
    return {**body, "prompt": prompt, "logprobs": GREEDY_TOP}


def greedy_record(data: Any, chat: bool) -> dict[str, Any]:
    """The greedy probe's answer as the manifest records it: its text, and its tokens with each position's listed
    logprobs (empty where the server lists none); MalformedResponse for an answer that is not one."""
    choices = data.get("choices") if isinstance(data, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("answer has no choices")
    choice = choices[0]
    message = choice.get("message") if chat else choice
    text = message.get("content" if chat else "text") if isinstance(message, dict) else None
    if not isinstance(text, str):
        raise MalformedResponse("the probe's answer has no text")
    logprobs = choice.get("logprobs")
    positions = _chat_positions(logprobs) if chat else _completion_positions(logprobs)
    return {
        "text": redact(text),
        "tokens": [redact(t) for t, _ in positions],
        "top": [{redact(k): v for k, v in top.items()} for _, top in positions],
    }


def _completion_positions(logprobs: Any) -> list[tuple[str, dict[str, float]]]:
    """Each generated token of a completions answer with its position's listed logprobs (its own included)."""
    if not isinstance(logprobs, dict):
        return []
    tokens, own, tops = logprobs.get("tokens"), logprobs.get("token_logprobs"), logprobs.get("top_logprobs")
    if not isinstance(tokens, list) or not isinstance(own, list) or len(own) != len(tokens):
        return []
    tops = tops if isinstance(tops, list) and len(tops) == len(tokens) else [None] * len(tokens)
    found = []
    for token, value, top in zip(tokens, own, tops, strict=True):
        listed = validate.top_logprobs(top) if isinstance(top, dict) else {}
        found.append((validate.token(token), {**listed, validate.token(token): validate.logprob(value)}))
    return found


def _chat_positions(logprobs: Any) -> list[tuple[str, dict[str, float]]]:
    """Each generated token of a chat answer with its position's listed logprobs (its own included)."""
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list):
        return []
    found = []
    for entry in content:
        if not isinstance(entry, dict):
            raise MalformedResponse("a logprobs entry is not an object")
        listed = entry.get("top_logprobs") or []
        top = {
            validate.token(e.get("token")): validate.logprob(e.get("logprob"))
            for e in (listed if isinstance(listed, list) else [])
            if isinstance(e, dict)
        }
        token = validate.token(entry.get("token"))
        found.append((token, {**top, token: validate.logprob(entry.get("logprob"))}))
    return found


def fingerprint_change(before: dict[str, Any], now: dict[str, Any]) -> str | None:
    """What changed between two fingerprints of a server (the part each of them has), or None when it answers the
    probe alike. KeyError, TypeError or ValueError for a record that is not a fingerprint."""
    if "tokens" in before and "tokens" in now:
        why = replica_mismatch(_echo_abilities(before), _echo_abilities(now))
        if why is not None:
            return why
    old, new = before.get("greedy"), now.get("greedy")
    if isinstance(old, dict) and isinstance(new, dict):
        return greedy_change(old, new)
    return None


def _echo_abilities(record: dict[str, Any]) -> Abilities:
    """A fingerprint's echoed part as the endpoint abilities replicas are compared by."""
    logprobs = tuple(map(float, record["logprobs"]))
    return Abilities(str(record["url"]), True, False, fingerprint=tuple(record["tokens"]), probe_logprobs=logprobs)


def greedy_change(old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """How two greedy answers to the probe differ beyond tolerance: another text, or a logprob both list (at the
    positions both generated alike) more than REPLICA_LOGPROB_TOLERANCE apart; None when they agree."""
    if str(old["text"]) != str(new["text"]):
        return (
            f"the probe prompt's greedy continuation is {clip(str(new['text']), 60)!r} now, "
            f"{clip(str(old['text']), 60)!r} before"
        )
    gaps = []
    for a, b, old_top, new_top in zip(old["tokens"], new["tokens"], old["top"], new["top"], strict=False):
        if a != b:
            break
        gaps += [abs(float(old_top[k]) - float(new_top[k])) for k in old_top if k in new_top]
    if gaps and max(gaps) > REPLICA_LOGPROB_TOLERANCE:
        return f"the probe prompt's greedy logprobs differ by up to {max(gaps):.3g} from before"
    return None
