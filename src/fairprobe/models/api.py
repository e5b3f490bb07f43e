"""Any OpenAI-compatible server (OpenAI, Azure, vLLM, Ollama, llama.cpp, TGI) as a backend: `--model openai:MODEL`.

Plain-string prompts go to `/completions` (the prompt is continued as the paper does, no chat template);
chat prompts go to `/chat/completions`. Requests run concurrently (`-M concurrency`) on httpx's async client
and are retried with exponential backoff and jitter on 429, 5xx, timeouts and dropped connections,
honouring Retry-After. Scores of continuations (`-M implicit`): `exact` through the server's prompt-token
logprobs (models/server_scoring.py; the default where every endpoint can, detected once per endpoint); `topk`
bounds them from the first generated position's top logprobs (a continuation outside them has at most the
smallest listed probability), never zero.

The API key is read from $FAIRPROBE_API_KEY (else $OPENAI_API_KEY) or given as `-M api_key=...`; it is sent
only in the Authorization header and redacted (fairprobe.redact) from every answer, token and error message.
Every answer is validated (fairprobe.models.validate) before use: a body over the size limit, one not
complete by the request deadline, a logprob that is not a finite number <= 0 or a text that is not a
string is a malformed answer (recorded, counted as undetermined), never a number in a metric.

The backend composes, one module per concern: models/transport.py (event-loop thread, httpx client, POST within the
limits, retries), models/endpoints.py (what each endpoint can do, replicas, fingerprint), models/tokens.py (token
ids), models/scoring_requests.py (exact scores by echo or by position) and models/replies.py (reading an answer).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from fairprobe.errors import ModelError
from fairprobe.models import Scheme, validate
from fairprobe.models.base import (
    Completion,
    GenerationConfig,
    ModelBackend,
    Prompt,
    ScoreRequest,
    Scores,
    row_seeds,
)
from fairprobe.models.endpoints import Abilities
from fairprobe.models.replies import Answer, parse_reply
from fairprobe.models.scoring_requests import EchoBatcher, ServerScorer, Work
from fairprobe.models.server_scoring import ECHO_PROMPTS_PER_REQUEST, topk_scores
from fairprobe.models.settings import OpenAISettings
from fairprobe.models.tokens import first_ids
from fairprobe.models.transport import (
    RETRY_STATUS,
    EndpointError,
    GaveUp,
    RetryPolicy,
    failed,
    next_step,
    retry_after_seconds,
)
from fairprobe.models.validate import AnswerLimits, MalformedResponse
from fairprobe.progress import answers_teller
from fairprobe.records import message_dicts
from fairprobe.redact import API_KEY_ENV, redact, shorten

# Names the tests and the Python API import from here.
__all__ = [
    "Answer",
    "EndpointError",
    "GaveUp",
    "MalformedResponse",
    "OpenAIBackend",
    "RetryPolicy",
    "open_endpoint",
    "parse_reply",
    "retry_after_seconds",
]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Servers that refuse 20 top logprobs (OpenAI's legacy completions allow 5) are asked again with fewer.
LOGPROB_FALLBACKS = (20, 5, 0)
REJECT_STATUS = frozenset({400, 413, 422})

OnResult = Callable[[int, Completion], None]


class OpenAIBackend(ServerScorer, ModelBackend):
    """An OpenAI-compatible HTTP endpoint (or several, used round-robin) serving one model."""

    streams_results = True
    has_chat_template = True

    def __init__(
        self,
        model: str,
        base_urls: list[str],
        api_key: str | None,
        settings: OpenAISettings | None = None,
        retry: RetryPolicy | None = None,
        limits: AnswerLimits | None = None,
    ) -> None:
        self.settings = settings or OpenAISettings()
        super().__init__(
            base_urls,
            api_key,
            self.settings.timeout,
            self.settings.concurrency,
            retry or RetryPolicy(),
            limits or AnswerLimits.from_env(),
        )
        self.model = model
        self.name = f"openai:{model}"
        self.top_logprobs = self.settings.top_logprobs
        self._logprobs = self.top_logprobs
        self.implicit = self.settings.implicit
        self._mode: str | None = "topk" if self.implicit == "topk" else None
        self._abilities: list[Abilities] = []
        self._ids: dict[tuple[str, bool], list[int]] = {}
        self._turn = itertools.count()  # echo requests take the endpoints in turn
        self._notices: list[str] = []
        self._greedy: dict[str, Any] | None = None  # the greedy probe's answer (answer_fingerprint), asked once
        self._greedy_asked = False
        self.scoring_requests = 0

    def identity(self) -> dict[str, Any]:
        """Model name, endpoint(s), how continuations are to be scored and the top-k asked for; never the key.

        The scoring mode is the one asked for (`auto` included): what each endpoint can do is asked only when a
        score is first needed, and the manifest's `implicit` record says what was used.
        """
        return {
            "id": self.name,
            "backend": "openai",
            "model": self.model,
            "base_url": ",".join(self.base_urls),
            "implicit": self.implicit,
            "top_logprobs": self.top_logprobs,
        }

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: Sequence[tuple[str, ...]] | None = None,
        on_result: OnResult | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """Ask the server for every prompt, `concurrency` at a time; `on_result(i, c)` sees each answer at once.

        A sampled request carries its prompt's own seed (`seeds[i]`, else `row_seeds`), which servers such as vLLM
        honour per request: one seed for every prompt would draw them all with the same random numbers. The scores
        of `score[i]` come with the same request: exactly (single-token continuations from its first position, the
        prompt's token ids from its answer, the others read for many prompts at once) or bounded from its top
        logprobs.
        """
        wanted = [tuple(s) for s in score] if score is not None else [()] * len(prompts)
        configs = (
            [config] * len(prompts)
            if config.greedy
            else [config.model_copy(update={"seed": seed}) for seed in row_seeds(config, len(prompts), seeds)]
        )
        tell = answers_teller()  # the run's progress, told each answer as it arrives (on the event loop's thread)

        def arrived(index: int, completion: Completion) -> None:
            if on_result is not None:
                on_result(index, completion)
            said = (completion.prompt_tokens, completion.new_tokens)
            tell(1, None if said == (None, None) else (said[0] or 0, said[1] or 0))

        return self._run(self._generate(prompts, configs, wanted, arrived))

    def generate_streamed(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: Sequence[tuple[str, ...]] | None,
        on_result: OnResult,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """`generate`, each answer handed to `on_result` as it arrives from the server."""
        return self.generate(prompts, config, score, on_result, seeds)

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        """log P(continuation | prompt) of every request's continuations, exact where the server scores prompt
        tokens, else bounded from a one-token generation's top logprobs; no logprobs at all is an EndpointError."""
        return self._run(self._loglikelihood(requests))

    async def _generate(
        self,
        prompts: list[Prompt],
        configs: list[GenerationConfig],
        wanted: list[tuple[str, ...]],
        on_result: OnResult | None,
    ) -> list[Completion]:
        gate = asyncio.Semaphore(self.concurrency)
        abort = asyncio.Event()
        mode = await self._mode_now() if any(wanted) else "off"
        ids = await self._continuation_ids({c for s in wanted for c in s}) if mode == "exact" else None
        route = ids is not None and self._every("next_token_ids")
        results: list[Completion | None] = [None] * len(prompts)

        async def scored(chunk: list[tuple[int, Work]]) -> None:
            await self._finish([w for _, w in chunk], ids, gate)
            for index, work in chunk:
                completion = results[index]
                if completion is not None:
                    completion.scores = work.result()
                    if on_result is not None:
                        on_result(index, completion)

        echo = EchoBatcher(scored, sum(1 for s in wanted if s) if mode == "exact" else 0)

        async def one(index: int) -> None:
            chosen = first_ids(wanted[index], ids) if route else []
            async with gate:
                if abort.is_set():
                    return echo.skip() if mode == "exact" and wanted[index] else None
                try:
                    completion, answer = await self._ask(
                        index, prompts[index], configs[index], mode, wanted[index], chosen, abort
                    )
                except EndpointError:
                    abort.set()
                    raise
            results[index] = completion
            if completion is not None and wanted[index] and mode == "exact":
                if completion.error is None:
                    return echo.add(index, self._work_from(prompts[index], wanted[index], answer, ids, configs[index]))
                echo.skip()
            if completion is not None and wanted[index] and mode == "topk" and completion.error is None:
                completion.scores = (
                    Scores.failed(len(wanted[index]), answer.scoring_error, "topk")
                    if answer is not None and answer.scoring_error
                    else topk_scores(answer.top if answer else None, wanted[index], self._logprobs)
                )
            if completion is not None and on_result is not None:
                on_result(index, completion)

        outcomes = await asyncio.gather(*(one(i) for i in range(len(prompts))), return_exceptions=True)
        failure = next((r for r in outcomes if isinstance(r, BaseException)), None)
        if failure is not None:
            echo.cancel()
            raise failure
        await echo.done()
        return [c for c in results if c is not None]

    async def _loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        gate = asyncio.Semaphore(self.concurrency)
        if await self._mode_now() == "topk":
            return list(await asyncio.gather(*(self._topk_only(i, r, gate) for i, r in enumerate(requests))))
        ids = await self._continuation_ids({c for r in requests for c in r.continuations})
        works = [Work(r.prompt, r.continuations, [None] * len(r.continuations)) for r in requests]
        if ids is not None and self._every("prompt_ids"):
            plain = [w for w in works if isinstance(w.prompt, str)]
            for start in range(0, len(plain), ECHO_PROMPTS_PER_REQUEST):
                chunk = plain[start : start + ECHO_PROMPTS_PER_REQUEST]
                try:
                    found = await self._ids_many([str(w.prompt) for w in chunk], True, start)
                except EndpointError:  # each prompt of the chunk is tokenized on its own (`_finish`)
                    continue
                for work, prompt_ids in zip(chunk, found, strict=True):
                    work.prompt_ids = prompt_ids
        await self._finish(works, ids, gate)
        return [w.result() for w in works]

    async def _topk_only(self, index: int, request: ScoreRequest, gate: asyncio.Semaphore) -> Scores:
        """Bounds from the top logprobs of a one-token generation (a server that cannot score prompt tokens); no
        answer past the retries is that prompt's failure alone."""
        try:
            async with gate:
                completion, answer = await self._ask(
                    index, request.prompt, GenerationConfig(max_new_tokens=1), "topk", request.continuations, [], None
                )
        except GaveUp as exc:
            return Scores.failed(len(request.continuations), f"scoring failed: {exc}", "topk")
        if completion is not None and completion.error:
            return Scores.failed(len(request.continuations), completion.error, "topk")
        if answer is not None and answer.scoring_error:
            return Scores.failed(len(request.continuations), answer.scoring_error, "topk")
        if answer is None or not answer.top:
            url = self.base_urls[index % len(self.base_urls)]
            raise EndpointError(f"{url} gives no logprobs: it cannot score continuations (loglikelihood)")
        return topk_scores(answer.top, request.continuations, self._logprobs)

    def _payload(
        self, prompt: Prompt, config: GenerationConfig, top_k: bool, chosen: list[int], want_ids: bool
    ) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "seed": config.seed,
        }
        if config.top_k:
            body["top_k"] = config.top_k
        if want_ids:
            body["return_token_ids"] = True
        chat = not isinstance(prompt, str)
        if chosen:  # exact next-token logprobs of these ids (vLLM), read from the first generated position
            body.update(logprobs=True if chat else 0, logprob_token_ids=chosen, return_tokens_as_token_ids=True)
        elif top_k and self._logprobs:
            body.update(logprobs=True, top_logprobs=self._logprobs) if chat else body.update(logprobs=self._logprobs)
        if chat:
            return "/chat/completions", {**body, "messages": message_dicts(prompt)}  # type: ignore[arg-type]
        return "/completions", {**body, "prompt": prompt}

    def _lower_logprobs(self, asked: int) -> bool:
        """After a 400 about logprobs: ask for fewer next time (20 -> 5 -> none). False when already none."""
        if not asked:
            return False
        smaller = [k for k in LOGPROB_FALLBACKS if k < asked]
        self._logprobs = min(self._logprobs, smaller[0])
        return True

    async def _ask(
        self,
        index: int,
        prompt: Prompt,
        config: GenerationConfig,
        mode: str,
        continuations: tuple[str, ...],
        chosen: list[int],
        abort: asyncio.Event | None,
    ) -> tuple[Completion | None, Answer | None]:
        """One prompt with retries; a malformed or refused answer becomes a Completion with `error` set."""
        policy = self.retry
        top_k = bool(continuations) and mode == "topk"
        want_ids = bool(continuations) and mode == "exact" and self._every("prompt_ids")
        attempt = malformed = timeouts = 0
        failure = ""
        while attempt < policy.attempts:
            if abort is not None and abort.is_set():
                return None, None
            attempt += 1
            base = self.base_urls[(index + attempt - 1) % len(self.base_urls)]
            path, body = self._payload(prompt, config, top_k, chosen, want_ids)
            asked = int(body.get("top_logprobs", body.get("logprobs", 0)) or 0) if top_k else 0
            try:
                answer = await self._attempt(base + path, body, timeouts)
                if not isinstance(answer, str) and answer[0] == 200:
                    parsed = parse_reply(validate.json_body(answer[2]), not isinstance(prompt, str))
                    return Completion(parsed.text, None, None, parsed.prompt_tokens, parsed.new_tokens), parsed
            except MalformedResponse as exc:
                malformed += 1
                if malformed >= policy.malformed_attempts or attempt >= policy.attempts:
                    return Completion(text="", error=f"malformed response: {exc}"), None
                failure = f"malformed response from {base}: {exc}"
                continue
            got = failed(base, answer)
            failure, timeouts, status, detail = got.why, timeouts + got.timed_out, got.status, got.detail
            if status in REJECT_STATUS and "logprob" in detail.lower() and top_k and self._lower_logprobs(asked):
                attempt -= 1
                continue
            if status in REJECT_STATUS:
                return Completion(text="", error=f"rejected by server (HTTP {status}): {detail}"), None
            if status is not None and status not in RETRY_STATUS and status < 500:
                hint = {401: "check $FAIRPROBE_API_KEY", 403: "check $FAIRPROBE_API_KEY", 404: next_step(base, 404)}
                shown = f" ({hint[status]})" if status in hint else ""
                raise EndpointError(f"{base}{path} answered HTTP {status}{shown}: {detail}")
            if attempt < policy.attempts:
                await self._back_off(policy.delay(attempt, got.retry_after))
        gave_up = f"{shorten(failure, 400)}; gave up after {policy.attempts} attempts"
        raise GaveUp(gave_up if self.reached else f"no server answers at {base} ({gave_up}): {next_step(base)}")


def parse_base_url(url: str) -> httpx.URL:
    """A --base-url as an httpx URL; an unparseable one (port 99999, an unbalanced IPv6 bracket) is a ModelError."""
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise ModelError(f"--base-url {redact(url)!r} is not a valid URL: {exc}") from None
    if port is not None and not 0 < port < 65536:
        raise ModelError(f"--base-url {redact(url)!r} has port {port}: ports run from 1 to 65535")
    if not parsed.host:
        raise ModelError(f"--base-url {redact(url)!r} names no host")
    return parsed


def api_key_from_env() -> str | None:
    """The API key from $FAIRPROBE_API_KEY, else $OPENAI_API_KEY."""
    for name in API_KEY_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


def open_endpoint(
    rest: str,
    settings: OpenAISettings | None = None,
    retry: RetryPolicy | None = None,
    limits: AnswerLimits | None = None,
    **args: Any,
) -> OpenAIBackend:
    """`openai:MODEL` at `base_url` (comma-separated URLs are used round-robin), with `args` validated as its
    settings; `retry` and `limits` are for the Python API (tests, benchmarks), not for `-M`."""
    settings = settings or OpenAISettings.model_validate(args)
    if not rest:
        raise ModelError("model spec 'openai:' needs the server's model name, e.g. openai:gpt-4o-mini")
    urls = [u.strip() for u in (settings.base_url or DEFAULT_BASE_URL).split(",") if u.strip()]
    for url in urls:
        parsed = parse_base_url(url)
        if parsed.scheme not in ("http", "https"):
            raise ModelError(f"--base-url must be an http(s) URL, got {url!r}")
        if parsed.userinfo:  # it would be written to the manifest: credentials belong in the environment
            raise ModelError(f"--base-url for {parsed.host} carries credentials: put the key in ${API_KEY_ENV[0]}")
    key = settings.api_key or api_key_from_env()  # -M api_key is sent, and redacted like the environment's key
    if key is None and any(parse_base_url(u).host == "api.openai.com" for u in urls):
        raise ModelError(f"the OpenAI API needs a key: set ${API_KEY_ENV[0]} (or ${API_KEY_ENV[1]})")
    return OpenAIBackend(rest, urls, key, settings=settings, retry=retry, limits=limits)


def load_openai(rest: str, settings: OpenAISettings, adapter: str | None) -> OpenAIBackend:
    """The `openai:` scheme's loader (the registry has validated `-M` args into `settings`)."""
    return open_endpoint(rest, settings)


# The `openai:` scheme, registered lazily by fairprobe.models (this module is imported on its first use).
SCHEME = Scheme(load_openai, OpenAISettings)
