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
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import itertools
import os
import random
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from fairprobe.errors import ModelError
from fairprobe.models import register_scheme, validate
from fairprobe.models.base import (
    UNAVAILABLE,
    Completion,
    ContinuationScore,
    GenerationConfig,
    ModelBackend,
    Prompt,
    ScoreRequest,
    Scores,
    row_seeds,
)
from fairprobe.models.fingerprint import greedy_body, greedy_record
from fairprobe.models.pace import MEASURED_TOKENS, Pace
from fairprobe.models.server_scoring import (
    CHAT_PROBE,
    ECHO_BYTES_PER_TOKEN,
    ECHO_PROMPTS_PER_REQUEST,
    MAX_TOKEN_IDS,
    PROBE_PROMPT,
    Abilities,
    Branch,
    Echo,
    ScoringAnswerError,
    branches,
    chat_mismatch,
    check_total,
    checked_logprob,
    choices_of,
    echo_body,
    echoed,
    echoed_ids,
    first_position_scores,
    ids_body,
    parts_by_size,
    position_groups,
    position_read,
    positions_body,
    read_ids,
    read_token_ids,
    replica_mismatch,
    score_ids,
    score_text,
    server_root,
    tail_logprob,
    tokenize_body,
    topk_scores,
    tree_scores,
)
from fairprobe.models.settings import OpenAISettings
from fairprobe.models.validate import AnswerLimits, MalformedResponse
from fairprobe.records import message_dicts
from fairprobe.redact import API_KEY_ENV, clip, redact, register_secret, shorten

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# Servers that refuse 20 top logprobs (OpenAI's legacy completions allow 5) are asked again with fewer.
LOGPROB_FALLBACKS = (20, 5, 0)
RETRY_STATUS = frozenset({408, 409, 429})
TIMED_OUT = "no answer from"
# Scoring failures asked again prompt by prompt (a refusal, no answer past the retries), so one prompt at fault
# (longer than the server's context, one that makes it fail) fails alone.
ALONE_FAILURES = ("scoring rejected", "scoring failed")
REJECT_STATUS = frozenset({400, 413, 422})

OnResult = Callable[[int, Completion], None]


class EndpointError(ModelError):
    """The server failed past the retry budget, or refused the credentials or the model name."""


class GaveUp(EndpointError):
    """No answer past the retry budget (5xx, timeouts, dropped connections): for a scoring request, that prompt's
    scoring fails and the run goes on; for the capability probe, that endpoint is dropped."""


def next_step(url: str, status: int | None = None) -> str:
    """What to do about a server that never answered (or answered `status` 404 at a path): start it, or give
    --base-url as the server's `/v1` root."""
    if not url.endswith("/v1"):
        return f"give --base-url as the server's /v1 root (e.g. {url}/v1)"
    if status == 404:
        return "check --base-url (the server's /v1 root) and the model name"
    return "start the server (docs/vllm.md) or check --base-url"


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries: `attempts` tries per request, delays base*2^n (capped) with jitter, or Retry-After."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 120.0
    malformed_attempts: int = 2

    def delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before try `attempt + 1` (attempt counts from 1)."""
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return ceiling * random.uniform(0.5, 1.0)


def retry_after_seconds(headers: httpx.Headers) -> float | None:
    """Retry-After (seconds or HTTP date) or retry-after-ms, in seconds; None when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


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
    for, keyed `token_id:N`), the prompt's and the output's token ids where the server returned them, and the
    logprob the answer gives its first generated token (`own`, completions only). Logprobs that hold more than
    probability 1 together leave the text as it is and fail the scoring alone (`scoring_error`)."""

    text: str
    top: dict[str, float] | None = None
    prompt_ids: list[int] | None = None
    output_ids: list[int] | None = None
    own: float | None = None
    scoring_error: str | None = None

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
    return Answer(redact(text), top, prompt_ids, optional_ids(choice.get("token_ids")), own, scoring_error)


def _own_first_logprob(choice: dict[str, Any]) -> float | None:
    """The logprob a completions answer gives its first generated token (`token_logprobs[0]`), when a number."""
    logprobs = choice.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) or not values:
        return None
    first = values[0]
    return float(first) if isinstance(first, int | float) and not isinstance(first, bool) else None


@dataclass
class Work:
    """One prompt being scored exactly: its continuations' scores so far (None: still to echo), its token ids."""

    prompt: Prompt
    continuations: tuple[str, ...]
    scores: list[ContinuationScore | None]
    prompt_ids: list[int] | None = None
    error: str | None = None

    def pending(self) -> list[int]:
        """The continuations still to score by echo."""
        return [j for j, s in enumerate(self.scores) if s is None]

    def result(self) -> Scores:
        """The finished scores (or the error), checked together (`check_total`)."""
        scores = [s or UNAVAILABLE for s in self.scores]
        if self.error is None:
            try:
                check_total(self.continuations, scores)
            except ScoringAnswerError as exc:
                self.error = f"malformed scoring answer: {exc}"
        if self.error is not None:
            return Scores.failed(len(self.continuations), self.error, "exact")
        return Scores(tuple(scores), mode="exact")


class EchoBatcher:
    """Sends the prompts whose scores wait for an echo ECHO_PROMPTS_PER_REQUEST at a time, as soon as that many
    generations have answered (the rest when every one has), so echo requests run beside the generation ones.

    `expected` prompts will each be added (its work) or skipped (no scores to finish).
    """

    def __init__(self, send: Callable[[list[tuple[int, Work]]], Awaitable[None]], expected: int) -> None:
        self.send = send
        self.left = expected
        self.pending: list[tuple[int, Work]] = []
        self.tasks: list[asyncio.Future[None]] = []

    def add(self, index: int, work: Work) -> None:
        """One prompt ready for its echo."""
        self.pending.append((index, work))
        self.skip()

    def skip(self) -> None:
        """One prompt less to wait for; send a full chunk, or the rest once no prompt is left to wait for."""
        self.left -= 1
        if len(self.pending) >= ECHO_PROMPTS_PER_REQUEST or (self.left <= 0 and self.pending):
            chunk, self.pending = self.pending, []
            self.tasks.append(asyncio.ensure_future(self.send(chunk)))

    async def done(self) -> None:
        """Wait for every chunk sent."""
        await asyncio.gather(*self.tasks)

    def cancel(self) -> None:
        """Stop the chunks still running (the run failed)."""
        for task in self.tasks:
            task.cancel()


class OpenAIBackend(ModelBackend):
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
        self.model = model
        self.name = f"openai:{model}"
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.concurrency = self.settings.concurrency
        self.timeout = self.settings.timeout
        self.pace = Pace(self.timeout)
        self.retry = retry or RetryPolicy()
        self.top_logprobs = self.settings.top_logprobs
        self._logprobs = self.top_logprobs
        self._api_key = api_key
        register_secret(api_key)
        self.limits = limits or AnswerLimits.from_env()
        self.implicit = self.settings.implicit
        self._mode: str | None = "topk" if self.implicit == "topk" else None
        self._abilities: list[Abilities] = []
        self._ids: dict[tuple[str, bool], list[int]] = {}
        self._turn = itertools.count()  # echo requests take the endpoints in turn
        self._notices: list[str] = []
        self._greedy: dict[str, Any] | None = None  # the greedy probe's answer (answer_fingerprint), asked once
        self._greedy_asked = False
        self.requests_sent = 0
        self.scoring_requests = 0
        self.reached = False  # any HTTP answer came: the server is there (a failure then needs no start hint)
        self._client: httpx.AsyncClient | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fairprobe-api", daemon=True)
        self._thread.start()

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

    def _run(self, coroutine: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

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

    async def _post(self, url: str, body: dict[str, Any], limit: float) -> tuple[int, httpx.Headers, bytes]:
        """POST and read the answer within the size limit, `limit` seconds per read and the deadline (at least a
        limit that follows the work, `-M timeout=` unset), else a MalformedResponse."""
        limits = self.limits
        deadline = limits.deadline if self.pace.fixed is not None else max(limits.deadline, limit)

        async def exchange() -> tuple[int, httpx.Headers, bytes]:
            timeout = httpx.Timeout(limit, connect=min(limit, 10.0))
            async with self._http().stream("POST", url, json=body, timeout=timeout) as response:
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise MalformedResponse(f"answer larger than {limits.max_bytes:,} bytes (the size limit)")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)

        try:
            return await asyncio.wait_for(exchange(), deadline)
        except asyncio.TimeoutError:
            raise MalformedResponse(f"no complete answer within {deadline:g} s (the request deadline)") from None

    async def _attempt(
        self, url: str, body: dict[str, Any], timeouts: int = 0
    ) -> tuple[int, httpx.Headers, bytes] | str:
        """One POST within the limits, once the shared pause is over: (status, headers, body), or why no answer
        came (a timeout: TIMED_OUT, a failed connection). Its time limit follows the tokens it asks for and the
        tries of it that timed out (models/pace.py). An answer over the size limit or the deadline raises
        MalformedResponse. A generation's reply times the server's rate."""
        loop = asyncio.get_running_loop()
        while (pause := self.pace.wait(loop.time())) > 0:
            await asyncio.sleep(pause)
        self.requests_sent += 1
        limit = self.pace.limit(int(body.get("max_tokens") or 0), timeouts)
        start = loop.time()
        try:
            answer = await self._post(url, body, limit)
            self.reached = True
        except httpx.TimeoutException:
            return f"{TIMED_OUT} {url} within {limit:g} s"
        except httpx.TransportError as exc:
            return f"connection to {url} failed ({type(exc).__name__})"
        if answer[0] == 200 and int(body.get("max_tokens") or 0) >= MEASURED_TOKENS:
            self.pace.measured(generated_tokens(answer[2]), loop.time() - start)
        return answer

    async def _back_off(self, seconds: float) -> None:
        """Wait `seconds` after a failure; every other request waits them out too (no retry adds load meanwhile)."""
        self.pace.hold(asyncio.get_running_loop().time(), seconds)
        await asyncio.sleep(seconds)

    async def _post_retrying(
        self, url: str, path: str, body: dict[str, Any], probe: bool = False
    ) -> tuple[int, Any, str]:
        """POST with the retry policy: (200, JSON, "") or (4xx status, None, detail); EndpointError past the budget.

        Answers pass the same size limit, deadline and JSON checks as generations; one that stays malformed
        gives None with status 200 after the retries. A `probe` (asking what the endpoint can do) takes a 5xx
        as an answer too: the server is there but cannot do what was asked (`transformers serve` fails on
        `max_tokens: 0`).
        """
        policy = self.retry
        failure = ""
        timeouts = 0
        for attempt in range(1, policy.attempts + 1):
            retry_after: float | None = None
            try:
                answer = await self._attempt(url + path, body, timeouts)
                if not isinstance(answer, str) and answer[0] == 200:
                    return 200, validate.json_body(answer[2], non_finite=True), ""
            except MalformedResponse as exc:
                if attempt >= policy.malformed_attempts:
                    return 200, None, str(exc)
                failure = f"malformed response from {url}: {exc}"
                continue
            if isinstance(answer, str):
                failure = answer
                timeouts += answer.startswith(TIMED_OUT)
            else:
                status, headers, content = answer
                detail = shorten(content.decode("utf-8", errors="replace"))
                if status in (401, 403):
                    raise EndpointError(f"{url}{path} answered HTTP {status} (check $FAIRPROBE_API_KEY): {detail}")
                if (status not in RETRY_STATUS and status < 500) or (probe and status >= 500):
                    return status, None, detail
                failure = f"{url} answered HTTP {status}"
                retry_after = retry_after_seconds(headers)
            if attempt < policy.attempts:
                await self._back_off(policy.delay(attempt, retry_after))
        raise GaveUp(f"{shorten(failure, 400)}; gave up after {policy.attempts} attempts")

    async def _post_any(self, url: str, path: str, body: dict[str, Any], root: bool = False) -> tuple[int, Any, str]:
        """`_post_retrying` at `url`, then at each other endpoint while they give up (a replica gone mid-run);
        GaveUp when every one did. `root`: the path lives beside /v1 (vLLM's /tokenize)."""
        *first, last = [url, *(u for u in self.base_urls if u != url)]
        for candidate in first:
            with contextlib.suppress(GaveUp):
                return await self._post_retrying(server_root(candidate) if root else candidate, path, body)
        return await self._post_retrying(server_root(last) if root else last, path, body)

    def close(self) -> None:
        """Close connections and stop the event-loop thread."""
        if self._client is not None:
            asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result()
            self._client = None
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self.pace.limit(0), connect=10.0),  # each request sets its own
                limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
            )
        return self._client

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
        return self._run(self._generate(prompts, configs, wanted, on_result))

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

    def _every(self, ability: str) -> bool:
        return bool(self._abilities) and all(getattr(a, ability) for a in self._abilities)

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

    def _work_from(
        self,
        prompt: Prompt,
        continuations: tuple[str, ...],
        answer: Answer | None,
        ids: dict[str, list[int]] | None,
        config: GenerationConfig,
    ) -> Work:
        """A prompt's scoring after its generation answer: single-token continuations read from its first
        position, the prompt's token ids from its answer; the rest is left to echo."""
        work = Work(prompt, continuations, [None] * len(continuations))
        if answer is not None and answer.scoring_error:
            work.error = answer.scoring_error
        if answer is None or ids is None:
            return work
        work.prompt_ids = answer.prompt_ids
        if not answer.chosen():
            return work
        first = answer.output_ids[0] if answer.output_ids else None
        try:
            work.scores = first_position_scores(
                answer.chosen(), first, [ids[c] for c in continuations], config.greedy, answer.own
            )
        except ScoringAnswerError as exc:
            work.error = f"malformed scoring answer: {exc}"
        return work

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

    async def _finish(self, works: list[Work], ids: dict[str, list[int]] | None, gate: asyncio.Semaphore) -> None:
        """Score every work's pending continuations, many prompts per request: position by position where every
        endpoint reads chosen token ids (`_read_chunk`), else echoed (token ids where the server tokenizes; prompt
        ids asked of /tokenize where the generation answer did not carry them)."""
        todo = [w for w in works if w.error is None and w.pending()]
        if ids is not None:
            missing = [w for w in todo if w.prompt_ids is None]
            await asyncio.gather(*(self._tokenize_prompt(w, k, gate) for k, w in enumerate(missing)))
        else:
            for work in todo:
                if not isinstance(work.prompt, str):  # no token ids, no chat template here: only the trivial bound
                    work.scores = [s or ContinuationScore(0.0, status="upper_bound") for s in work.scores]
        todo = [w for w in todo if w.error is None and w.pending()]
        chunks = [todo[k : k + ECHO_PROMPTS_PER_REQUEST] for k in range(0, len(todo), ECHO_PROMPTS_PER_REQUEST)]
        by_position = ids is not None and self._every("next_token_ids")
        score = self._read_chunk if by_position else self._echo_chunk
        await asyncio.gather(*(score(chunk, ids, next(self._turn), gate) for chunk in chunks))

    async def _tokenize_prompt(self, work: Work, index: int, gate: asyncio.Semaphore) -> None:
        """A prompt's token ids from /tokenize (chat messages with the generation prompt); a failure is that
        prompt's alone."""
        prompt = work.prompt if isinstance(work.prompt, str) else message_dicts(work.prompt)
        url = self.base_urls[index % len(self.base_urls)]
        try:
            async with gate:
                status, data, detail = await self._post_any(
                    url, "/tokenize", tokenize_body(self.model, prompt, True), root=True
                )
            if status != 200:
                raise ScoringAnswerError(f"HTTP {status}: {detail}")
            work.prompt_ids = read_token_ids(data)
        except (ScoringAnswerError, GaveUp) as exc:
            work.error = f"{server_root(url)}/tokenize failed: {exc}"

    async def _echo_chunk(
        self, works: list[Work], ids: dict[str, list[int]] | None, index: int, gate: asyncio.Semaphore
    ) -> None:
        """One echo request for the pending continuations of several prompts; each prompt is read on its own. A
        request refused or unanswered is asked again prompt by prompt, so the prompt at fault fails alone."""
        url = self.base_urls[index % len(self.base_urls)]
        if ids is not None:
            sequences: list[Any] = [w.prompt_ids + ids[w.continuations[j]] for w in works for j in w.pending()]  # type: ignore[operator]
        else:
            sequences = [
                x for w in works for x in (w.prompt, *(str(w.prompt) + w.continuations[j] for j in w.pending()))
            ]
        echoes, failure = await self._echo_all(url, sequences, ids is not None, gate)
        if failure is not None and failure.startswith(ALONE_FAILURES) and len(works) > 1:
            await asyncio.gather(*(self._echo_chunk([w], ids, index, gate) for w in works))
            return
        start = 0
        for work in works:
            pending = work.pending()
            size = len(pending) + (0 if ids is not None else 1)
            mine, start = (echoes or [])[start : start + size], start + size
            if failure is not None:
                work.error = failure
                continue
            try:
                if ids is not None:
                    found = [
                        score_ids(work.prompt_ids or [], ids[work.continuations[j]], e, work.continuations[j])
                        for j, e in zip(pending, mine, strict=True)
                    ]
                else:
                    found = score_text(str(work.prompt), tuple(work.continuations[j] for j in pending), mine)
            except ScoringAnswerError as exc:
                work.error = f"malformed scoring answer: {exc}"
                continue
            for j, scored in zip(pending, found, strict=True):
                work.scores[j] = scored

    async def _echo_all(
        self, url: str, sequences: list[Any], as_ids: bool, gate: asyncio.Semaphore
    ) -> tuple[list[Echo], str | None]:
        """The echoes of every sequence, as many a request as keep its answer under the size limit (each echoed
        token costs ~ECHO_BYTES_PER_TOKEN bytes; a text's characters count as its tokens), or why there are none."""
        budget = max(1, self.limits.max_bytes // ECHO_BYTES_PER_TOKEN)
        parts = parts_by_size([len(x) for x in sequences], budget)

        async def part(indices: range) -> tuple[list[Echo] | None, str | None]:
            body = echo_body(self.model, [sequences[i] for i in indices], as_ids, top=1 if as_ids else 0)
            async with gate:
                return await self._scoring_answer(url, body, lambda data: echoed(data, len(indices)))

        answers = await asyncio.gather(*(part(indices) for indices in parts))
        failure = next((f for _, f in answers if f is not None), None)
        return [e for echoes, _ in answers for e in echoes or []], failure

    async def _scoring_answer(
        self, url: str, body: dict[str, Any], read: Callable[[Any], Any]
    ) -> tuple[Any | None, str | None]:
        """A scoring request's answer as `read` reads it, or why there is none (a refusal, an answer malformed or
        over the size limit past the retries, no answer from any endpoint)."""
        failure = "malformed scoring answer"
        for _ in range(self.retry.malformed_attempts):
            self.scoring_requests += 1
            try:
                status, data, detail = await self._post_any(url, "/completions", body)
            except GaveUp as exc:
                return None, f"scoring failed: {exc}"
            if status != 200:
                return None, f"scoring rejected by server (HTTP {status}): {detail}"
            if data is None:  # malformed (over the size limit, past the deadline) through all of _post's retries
                return None, f"malformed scoring answer: {detail}"
            try:
                return read(data), None
            except ScoringAnswerError as exc:
                failure = f"malformed scoring answer: {exc}"
        return None, failure

    async def _read_chunk(
        self, works: list[Work], ids: dict[str, list[int]] | None, index: int, gate: asyncio.Semaphore
    ) -> None:
        """Score the pending continuations of several prompts position by position (`branches`): first the
        positions right after each prompt (which computes the prompts), then all the later ones, whose prompts the
        server's prefix cache holds by then. A prompt with a bad or missing answer is recorded as malformed."""
        url = self.base_urls[index % len(self.base_urls)]
        wanted = [[(ids or {})[w.continuations[j]] for j in w.pending()] for w in works]
        nodes = [(k, b) for k, continuations in enumerate(wanted) for b in branches(continuations)]
        read: list[dict[tuple[int, ...], tuple[dict[int, float], int | None]]] = [{} for _ in works]
        failures: dict[int, str] = {}
        for after in (False, True):  # the positions right after the prompts, then the later ones of those not failed
            groups = position_groups([n for n in nodes if bool(n[1].prefix) == after and n[0] not in failures])
            answers = await asyncio.gather(*(self._read_positions(url, works, group, gate) for group in groups))
            for group, answer in zip(groups, answers, strict=True):
                for (k, branch), (choice, problem) in zip(group, answer, strict=True):
                    try:
                        values, generated = position_read(choice) if problem is None else ({}, None)
                    except ScoringAnswerError as exc:
                        problem = f"malformed scoring answer: {exc}"
                    if problem is not None:
                        failures.setdefault(k, problem)
                        continue
                    earlier = read[k].get(branch.prefix, ({}, None))[0]
                    read[k][branch.prefix] = ({**earlier, **values}, generated)
        for k, work in enumerate(works):
            try:
                found = tree_scores(wanted[k], read[k]) if k not in failures else []
            except ScoringAnswerError as exc:
                failures[k] = f"malformed scoring answer: {exc}"
            if k in failures:
                work.error = failures[k]
                continue
            for j, scored in zip(work.pending(), found, strict=True):
                work.scores[j] = scored

    async def _read_positions(
        self, url: str, works: list[Work], group: list[tuple[int, Branch]], gate: asyncio.Semaphore
    ) -> list[tuple[Any, str | None]]:
        """One request reading a group of positions (each prompt's ids plus a branch's prefix, one token
        generated): each position's answer choice, or why there is none. A refused or unanswered request that
        read several prompts is asked again prompt by prompt (ALONE_FAILURES), so that a prompt the server
        refuses (one longer than its context) does not take the others with it."""
        sequences = [(works[k].prompt_ids or []) + list(b.prefix) for k, b in group]
        asked = sorted({c for _, b in group for c in b.children})
        async with gate:
            choices, failure = await self._scoring_answer(
                url, positions_body(self.model, sequences, asked), lambda data: choices_of(data, len(sequences))
            )
        owners = list(dict.fromkeys(k for k, _ in group))
        if failure is not None and failure.startswith(ALONE_FAILURES) and len(owners) > 1:
            apart = await asyncio.gather(
                *(self._read_positions(url, works, [n for n in group if n[0] == k], gate) for k in owners)
            )
            answers = {k: iter(answer) for k, answer in zip(owners, apart, strict=True)}
            return [next(answers[k]) for k, _ in group]
        return [(choice, failure) for choice in choices or [None] * len(group)]

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
            retry_after: float | None = None
            try:
                answer = await self._attempt(base + path, body, timeouts)
                if not isinstance(answer, str) and answer[0] == 200:
                    parsed = parse_reply(validate.json_body(answer[2]), not isinstance(prompt, str))
                    return Completion(text=parsed.text), parsed
            except MalformedResponse as exc:
                malformed += 1
                if malformed >= policy.malformed_attempts or attempt >= policy.attempts:
                    return Completion(text="", error=f"malformed response: {exc}"), None
                failure = f"malformed response from {base}: {exc}"
                continue
            if isinstance(answer, str):
                failure = answer
                timeouts += answer.startswith(TIMED_OUT)
            else:
                status, headers, content = answer
                detail = shorten(content.decode("utf-8", errors="replace"))
                if status in REJECT_STATUS and "logprob" in detail.lower() and top_k and self._lower_logprobs(asked):
                    attempt -= 1
                    continue
                if status in REJECT_STATUS:
                    return Completion(text="", error=f"rejected by server (HTTP {status}): {detail}"), None
                if status not in RETRY_STATUS and status < 500:
                    hint = {401: "check $FAIRPROBE_API_KEY", 403: "check $FAIRPROBE_API_KEY", 404: next_step(base, 404)}
                    shown = f" ({hint[status]})" if status in hint else ""
                    raise EndpointError(f"{base}{path} answered HTTP {status}{shown}: {detail}")
                failure = f"{base} answered HTTP {status}"
                retry_after = retry_after_seconds(headers)
            if attempt < policy.attempts:
                await self._back_off(policy.delay(attempt, retry_after))
        gave_up = f"{shorten(failure, 400)}; gave up after {policy.attempts} attempts"
        raise GaveUp(gave_up if self.reached else f"no server answers at {base} ({gave_up}): {next_step(base)}")


def generated_tokens(content: bytes) -> int:
    """The tokens a server says it generated (`usage.completion_tokens`), 0 where its answer does not say."""
    try:
        usage = validate.json_body(content).get("usage")
        tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    except (MalformedResponse, AttributeError):
        return 0
    return tokens if isinstance(tokens, int) and tokens > 0 else 0


def first_ids(continuations: tuple[str, ...], ids: dict[str, list[int]] | None) -> list[int]:
    """The token ids whose logprobs a generation request asks at its first position: those of the single-token
    continuations (none where there are more than the server takes: then every continuation is echoed)."""
    if ids is None:
        return []
    found = sorted({ids[c][0] for c in continuations if len(ids[c]) == 1})
    return found if len(found) <= MAX_TOKEN_IDS else []


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


@register_scheme("openai", settings=OpenAISettings)
def load_openai(rest: str, settings: OpenAISettings, adapter: str | None) -> OpenAIBackend:
    """The `openai:` scheme's loader (the registry has validated `-M` args into `settings`)."""
    return open_endpoint(rest, settings)
