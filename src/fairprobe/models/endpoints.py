"""What each endpoint of the OpenAI-compatible backend can do (models/api.py), asked once when a score is first
needed: echo prompt logprobs, tokenize, return token ids, read chosen token ids; replicas that do not serve one
model and tokenizer are refused; the probe prompt's answer is the fingerprint a resumed run compares."""

from __future__ import annotations

from typing import Any

from fairprobe.models.fingerprint import greedy_body, greedy_record
from fairprobe.models.replies import optional_ids, parse_reply
from fairprobe.models.server_scoring import (
    CHAT_PROBE,
    PROBE_PROMPT,
    Abilities,
    ScoringAnswerError,
    chat_mismatch,
    checked_logprob,
    choices_of,
    echo_body,
    echoed,
    replica_mismatch,
    server_root,
    tail_logprob,
    tokenize_body,
)
from fairprobe.models.transport import EndpointError, GaveUp, Transport, next_step
from fairprobe.models.validate import MalformedResponse
from fairprobe.redact import clip


class Endpoints(Transport):
    """Endpoint detection over the transport. The backend sets `model`, `implicit` (the scoring mode asked for),
    `top_logprobs`, `_logprobs`, `_mode`, `_abilities` and `_notices` (models/api.py)."""

    model: str
    implicit: str
    top_logprobs: int
    _logprobs: int
    _mode: str | None
    _abilities: list[Abilities]
    _notices: list[str]
    _greedy: dict[str, Any] | None
    _greedy_asked: bool

    @property
    def notices(self) -> list[str]:
        """Endpoints dropped as unreachable, scores bounded from top-k logprobs: said once the run starts."""
        return self._notices

    def scoring_mode(self) -> str:
        """exact or topk; `auto` and `exact` ask each endpoint once whether it can score prompt tokens."""
        if self._mode is None:
            self._mode = self._run(self._detect())
        return self._mode

    def scoring_info(self) -> dict[str, Any] | None:
        """What the manifest records: mode asked and used, top-k asked and used, each endpoint's abilities (None
        when no score was asked, so nothing was detected)."""
        if self._mode is None:
            return None
        info: dict[str, Any] = {"requested": self.implicit, "mode": self._mode}
        if info["mode"] == "topk":
            info.update(top_logprobs_asked=self.top_logprobs, top_logprobs_used=self._logprobs)
        if self._abilities:
            info["endpoints"] = {a.url: a.as_json() for a in self._abilities}
        return info

    async def _mode_now(self) -> str:
        if self._mode is None:
            self._mode = await self._detect()
        return self._mode

    async def _detect(self) -> str:
        """Each endpoint's abilities; an unreachable one is dropped with a notice (all: EndpointError), and replicas
        that do not serve one model and tokenizer are refused."""
        found: list[Abilities] = []
        dead: list[tuple[str, str]] = []
        for url in self.base_urls:
            try:
                found.append(await self._abilities_of(url))
            except GaveUp as exc:
                dead.append((url, clip(str(exc), 160)))
        if not found:
            urls = ",".join(self.base_urls)
            raise EndpointError(f"no server answers at {urls} ({dead[-1][1]}): {next_step(self.base_urls[-1])}")
        self._notices += [f"{url} is unreachable ({why}): dropped, the run goes on without it" for url, why in dead]
        self.base_urls = [a.url for a in found]
        self._abilities = found
        echoing = [a for a in found if a.echo]
        for other in echoing[1:]:
            why = replica_mismatch(echoing[0], other)
            if why is not None:
                raise EndpointError(f"--base-url endpoints do not serve one model: {why}; give replicas of one model")
        why = await self._chat_rendering([a.url for a in echoing if a.tokenize])
        if why is not None:
            raise EndpointError(
                f"--base-url endpoints render chat prompts differently: {why}; give replicas of one model"
            )
        unable = [a for a in found if not a.echo]
        if not unable:
            return "exact"
        first = unable[0]
        if self.implicit == "exact":
            raise EndpointError(
                f"-M implicit=exact: {first.url}/completions cannot score prompt tokens ({first.why}); "
                "use -M implicit=topk (or --implicit off for the paper suite)"
            )
        self._notices.append(
            f"{first.url} cannot score prompt tokens ({first.why}): scores bounded from top-{self.top_logprobs} "
            "logprobs (-M implicit=topk)"
        )
        return "topk"

    async def _chat_rendering(self, urls: list[str]) -> str | None:
        """Why replicas that tokenize render the probe conversation into different tokens, or None (one endpoint,
        or every one renders it alike)."""
        if len(urls) < 2:
            return None
        rendered: dict[str, tuple[int, ...]] = {}
        for url in urls:
            body = tokenize_body(self.model, CHAT_PROBE, True)
            status, data, _ = await self._post_retrying(server_root(url), "/tokenize", body, probe=True)
            tokens = optional_ids(data.get("tokens")) if status == 200 and isinstance(data, dict) else None
            if tokens is not None:
                rendered[url] = tuple(tokens)
        return chat_mismatch(rendered) if len(rendered) > 1 else None

    def answer_fingerprint(self) -> dict[str, Any] | None:
        """The model's answers to the fixed probe prompt (models/fingerprint.py), which a resumed run compares with
        those its manifest recorded: its greedy continuation with each position's top logprobs (`greedy`, asked
        once, one request), and where the abilities were asked of an endpoint that echoes, the prompt's token ids
        and their logprobs as it echoed them. None where the server gave neither."""
        if not self._greedy_asked:
            self._greedy = self._run(self._greedy_probe())
            self._greedy_asked = True
        found: dict[str, Any] = {"greedy": self._greedy} if self._greedy is not None else {}
        echoing = [a for a in self._abilities if a.echo]
        if echoing:
            first = echoing[0]
            found.update(url=first.url, tokens=list(first.fingerprint), logprobs=list(first.probe_logprobs))
        return found or None

    async def _greedy_probe(self) -> dict[str, Any] | None:
        """The probe prompt's greedy continuation at the first endpoint that answers (None where it refuses the
        probe); when no endpoint answers at all, the run's one-line error, before any item is asked."""
        gave_up = ""
        for url in self.base_urls:
            try:
                return await self._greedy_at(url)
            except GaveUp as exc:
                gave_up = clip(str(exc), 160)
        if self.reached:
            return None
        urls = ",".join(self.base_urls)
        raise EndpointError(f"no server answers at {urls} ({gave_up}): {next_step(self.base_urls[-1])}")

    async def _greedy_at(self, url: str) -> dict[str, Any] | None:
        """One endpoint's greedy continuation of the probe prompt through completions, else chat (a chat-only
        server); None where it answers neither (a refusal, a 5xx, a malformed answer)."""
        for chat in (False, True):
            path = "/chat/completions" if chat else "/completions"
            body = greedy_body(self.model, PROBE_PROMPT, chat)
            status, data, _ = await self._post_retrying(url, path, body, probe=True)
            if status == 200:
                try:
                    return {"url": url, **greedy_record(data, chat)}
                except MalformedResponse:
                    return None
        return None

    async def _abilities_of(self, url: str) -> Abilities:
        """Ask one endpoint to echo a prompt's logprobs with its token ids, to tokenize it, and to give the
        logprob of a chosen token id at a generated position."""
        probe = {**echo_body(self.model, PROBE_PROMPT, False), "return_token_ids": True}
        status, data, detail = await self._post_retrying(url, "/completions", probe, probe=True)
        if status != 200:
            return Abilities(url, echo=False, tokenize=False, why=f"HTTP {status}: {detail}")
        try:
            (echo,) = echoed(data, 1)
            tail_logprob(echo.values, 1)
            if not "".join(echo.tokens).endswith(PROBE_PROMPT):
                raise ScoringAnswerError("its echo is not the prompt sent")
        except ScoringAnswerError as exc:
            return Abilities(url, echo=False, tokenize=False, why=str(exc))
        returned = optional_ids(choices_of(data, 1)[0].get("prompt_token_ids"))
        prompt_ids = returned is not None and len(returned) == len(echo.tokens)
        status, data, _ = await self._post_retrying(
            server_root(url), "/tokenize", tokenize_body(self.model, PROBE_PROMPT, True), probe=True
        )
        tokenized = optional_ids(data.get("tokens")) if status == 200 and isinstance(data, dict) else None
        tokenize = tokenized is not None and len(tokenized) == len(echo.tokens)
        ids = returned if prompt_ids else tokenized if tokenize else None
        chosen = await self._reads_token_ids(url, ids[0]) if ids else False
        fingerprint = tuple(ids) if ids else tuple(echo.tokens)
        logprobs = tuple(float(v) for v in echo.values[1:] if isinstance(v, int | float))
        return Abilities(
            url,
            echo=True,
            tokenize=tokenize,
            prompt_ids=prompt_ids,
            next_token_ids=chosen,
            fingerprint=fingerprint,
            probe_logprobs=logprobs,
        )

    async def _reads_token_ids(self, url: str, token_id: int) -> bool:
        """Whether the endpoint returns the logprob of a chosen token id at a generated position (vLLM)."""
        body = {"model": self.model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0.0}
        body.update(logprobs=0, logprob_token_ids=[token_id], return_tokens_as_token_ids=True)
        status, data, _ = await self._post_retrying(url, "/completions", body, probe=True)
        try:
            chosen = parse_reply(data, chat=False).chosen() if status == 200 else {}
            return token_id in chosen and checked_logprob(chosen[token_id]) <= 0
        except (MalformedResponse, ScoringAnswerError):
            return False

    def _every(self, ability: str) -> bool:
        return bool(self._abilities) and all(getattr(a, ability) for a in self._abilities)
