"""Token ids over the OpenAI-compatible backend (models/api.py): each continuation's own ids (asked once per backend,
from answers' `return_token_ids` or /tokenize), several texts' ids in one request, a prompt's ids from /tokenize."""

from __future__ import annotations

from fairprobe.errors import ModelError
from fairprobe.models.endpoints import Endpoints
from fairprobe.models.replies import optional_ids
from fairprobe.models.server_scoring import (
    MAX_TOKEN_IDS,
    ScoringAnswerError,
    choices_of,
    ids_body,
    read_token_ids,
    server_root,
    tokenize_body,
)
from fairprobe.models.transport import EndpointError
from fairprobe.redact import clip


class Tokens(Endpoints):
    """Tokenization over the endpoints; `_ids` caches each (text, special tokens) pair's ids (models/api.py)."""

    _ids: dict[tuple[str, bool], list[int]]

    async def _continuation_ids(self, texts: set[str]) -> dict[str, list[int]] | None:
        """Each continuation's own token ids (no special tokens), asked once per backend; None where the
        endpoints cannot give token ids (then continuations are echoed as text)."""
        if not (self._every("prompt_ids") or self._every("tokenize")):
            return None
        missing = sorted(t for t in texts if (t, False) not in self._ids)
        if missing and self._every("prompt_ids"):
            for text, found in zip(missing, await self._ids_many(missing, False, 0), strict=True):
                if found is None:
                    raise EndpointError(f"{self.base_urls[0]}/completions gave no token ids for {text[:60]!r}")
                self._ids[(text, False)] = found
        for text in missing if not self._every("prompt_ids") else []:
            self._ids[(text, False)] = await self._token_ids(self.base_urls[0], text, False)
        for text in texts:
            if not self._ids[(text, False)]:
                raise ModelError(f"continuation {text!r} tokenizes to nothing: a scored continuation needs a token")
        return {t: self._ids[(t, False)] for t in texts}

    async def _ids_many(self, texts: list[str], special: bool, index: int) -> list[list[int] | None]:
        """The token ids of several texts in one completions request (`return_token_ids`); None for a text whose
        answer carries none. EndpointError when the request itself fails."""
        url = self.base_urls[index % len(self.base_urls)]
        status, data, detail = await self._post_any(url, "/completions", ids_body(self.model, texts, special))
        try:
            if status != 200:
                raise ScoringAnswerError(f"HTTP {status}: {detail}")
            return [optional_ids(c.get("prompt_token_ids")) for c in choices_of(data, len(texts))]
        except ScoringAnswerError as exc:
            raise EndpointError(f"{url}/completions gave no token ids for {texts[0][:60]!r}...: {exc}") from None

    async def _token_ids(self, url: str, text: str, special: bool) -> list[int]:
        """The server's token ids of `text` from /tokenize."""
        status, data, detail = await self._post_retrying(
            server_root(url), "/tokenize", tokenize_body(self.model, text, special)
        )
        try:
            if status != 200:
                raise ScoringAnswerError(f"HTTP {status}: {detail}")
            return read_token_ids(data)
        except ScoringAnswerError as exc:
            raise EndpointError(f"{server_root(url)}/tokenize failed for {clip(repr(text), 60)}: {exc}") from None


def first_ids(continuations: tuple[str, ...], ids: dict[str, list[int]] | None) -> list[int]:
    """The token ids whose logprobs a generation request asks at its first position: those of the single-token
    continuations (none where there are more than the server takes: then every continuation is echoed)."""
    if ids is None:
        return []
    found = sorted({ids[c][0] for c in continuations if len(ids[c]) == 1})
    return found if len(found) <= MAX_TOKEN_IDS else []
