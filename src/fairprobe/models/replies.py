"""A generation answer of an OpenAI-compatible server (completions or chat), read and validated: its text, the first
generated position's logprobs, its token ids (models/api.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairprobe.models import validate
from fairprobe.models.server_scoring import ScoringAnswerError, echoed_ids, read_ids
from fairprobe.models.validate import MalformedResponse
from fairprobe.redact import redact


def _first_top_completions(choice: dict[str, Any]) -> dict[str, float] | None:
    logprobs = choice.get("logprobs")
    if not isinstance(logprobs, dict):
        return None
    if "content" in logprobs:  # servers (llama.cpp) that answer completions in the chat logprobs format
        return _first_top_chat(choice)
    tops = logprobs.get("top_logprobs")
    if not isinstance(tops, list) or not tops or not isinstance(tops[0], dict):
        return None
    return validate.top_logprobs(tops[0]) or None


def _first_top_chat(choice: dict[str, Any]) -> dict[str, float] | None:
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return None
    listed = content[0].get("top_logprobs") or []
    if not isinstance(listed, list):
        raise MalformedResponse("top_logprobs is not a list")
    top: dict[str, float] = {}
    for entry in [*listed, content[0]]:
        if not isinstance(entry, dict) or "token" not in entry:
            raise MalformedResponse("a top_logprobs entry has no token")
        top[validate.token(entry["token"])] = validate.logprob(entry.get("logprob"))
    return top or None


@dataclass(frozen=True)
class Answer:
    """A generation answer: the text, the first generated position's logprobs (top-k, or those of the ids asked
    for, keyed `token_id:N`), the prompt's and the output's token ids where the server returned them, the
    logprob the answer gives its first generated token (`own`, completions only), and the prompt tokens read and
    tokens generated (`usage`, where the server says). Logprobs that hold more than
    probability 1 together leave the text as it is and fail the scoring alone (`scoring_error`)."""

    text: str
    top: dict[str, float] | None = None
    prompt_ids: list[int] | None = None
    output_ids: list[int] | None = None
    own: float | None = None
    scoring_error: str | None = None
    prompt_tokens: int | None = None
    new_tokens: int | None = None

    def chosen(self) -> dict[int, float]:
        """The logprobs of the token ids asked for in `logprob_token_ids` (keys `token_id:N`)."""
        ids = {k: v for k, v in (self.top or {}).items() if echoed_ids([k]) is not None}
        return {int(k.partition(":")[2]): v for k, v in ids.items()}


def optional_ids(value: Any) -> list[int] | None:
    """Token ids a server added to an answer (`return_token_ids`), or None when absent or not ids."""
    try:
        return read_ids(value, "answer")
    except ScoringAnswerError:
        return None


def parse_reply(data: Any, chat: bool) -> Answer:
    """The continuation text, first position's logprobs and token ids of a completions or chat answer."""
    if not isinstance(data, dict):
        raise MalformedResponse("answer is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("answer has no choices")
    choice = choices[0]
    if chat:
        message = choice.get("message")
        if not isinstance(message, dict):
            raise MalformedResponse("choice has no message")
        text = message.get("content")
        if text is None and isinstance(message.get("refusal"), str):
            text = message["refusal"]
        top = _first_top_chat(choice)
        prompt_ids = optional_ids(data.get("prompt_token_ids"))
        own = None
    else:
        text = choice.get("text")
        top = _first_top_completions(choice)
        prompt_ids = optional_ids(choice.get("prompt_token_ids"))
        own = _own_first_logprob(choice)
    if not isinstance(text, str):
        raise MalformedResponse("choice has no text" if text is None else "choice's text is not a string")
    scoring_error = None
    if top is not None:
        try:
            validate.total_probability(top)
        except MalformedResponse as exc:
            scoring_error, top = f"malformed scoring answer: {exc}", None
        top = None if top is None else {redact(k): v for k, v in top.items()}
    read, made = validate.usage(data)
    output_ids = optional_ids(choice.get("token_ids"))
    return Answer(redact(text), top, prompt_ids, output_ids, own, scoring_error, read, made)


def _own_first_logprob(choice: dict[str, Any]) -> float | None:
    """The logprob a completions answer gives its first generated token (`token_logprobs[0]`), when a number."""
    logprobs = choice.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) or not values:
        return None
    first = values[0]
    return float(first) if isinstance(first, int | float) and not isinstance(first, bool) else None
