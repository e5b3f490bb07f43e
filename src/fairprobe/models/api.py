"""Any OpenAI-compatible server (OpenAI, Azure, vLLM, Ollama, llama.cpp, TGI) as a backend: `--model openai:MODEL`.

Plain-string prompts go to `/completions` (the prompt is continued as the paper does, no chat template);
chat prompts go to `/chat/completions`. Requests run concurrently (`--concurrency`) on httpx's async client
and are retried with exponential backoff and jitter on 429, 5xx, timeouts and dropped connections,
honouring Retry-After. Next-word probabilities come from the first generated position's top logprobs:
a word outside the returned top-k is unknown (masked), never zero.

The API key is read from $FAIRPROBE_API_KEY (else $OPENAI_API_KEY); it is sent only in the
Authorization header and redacted (fairprobe.redact) from every answer, token and error message.
Every answer is validated (fairprobe.models.validate) before use: a body over the size limit, one not
complete by the request deadline, a logprob that is not a finite number <= 0 or a text that is not a
string is a malformed answer (recorded, counted as undetermined), never a number in a metric.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from fairprobe.errors import ModelError
from fairprobe.models import register_scheme, validate
from fairprobe.models.base import Completion, GenerationConfig, Prompt
from fairprobe.models.validate import AnswerLimits, MalformedResponse
from fairprobe.records import ChatMessage
from fairprobe.redact import API_KEY_ENV, redact, register_secret, shorten

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_CONCURRENCY = 8
TOP_LOGPROBS = 20
# Servers that refuse 20 top logprobs (OpenAI's legacy completions allow 5) are asked again with fewer.
LOGPROB_FALLBACKS = (20, 5, 0)
RETRY_STATUS = frozenset({408, 409, 429})
REJECT_STATUS = frozenset({400, 413, 422})

OnResult = Callable[[int, Completion], None]


class EndpointError(ModelError):
    """The server failed past the retry budget, or refused the credentials or the model name."""


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


def normalise_token(token: str) -> str:
    """Token text as a string: SentencePiece's '▁' and byte-level BPE's 'Ġ' marks become a space."""
    if token[:1] in ("▁", "Ġ"):
        return " " + token[1:]
    return token


def word_probs_from_top(top: dict[str, float], word_pairs: list[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities (N, 2) of each attribute word (with its leading space) from one position's top logprobs.

    A word found among the returned tokens is known; any other word (outside the top-k, or spread over
    several tokens) is unknown: its mask entry is False and its probability 0 only as a placeholder.
    """
    mass: dict[str, float] = {}
    for token, logprob in top.items():
        if logprob is None or not math.isfinite(logprob):
            continue
        key = normalise_token(token)
        mass[key] = mass.get(key, 0.0) + math.exp(logprob)
    words = [" " + w for pair in word_pairs for w in pair]
    mask = np.array([w in mass for w in words], dtype=bool).reshape(-1, 2)
    probs = np.array([mass.get(w, 0.0) for w in words], dtype=np.float64).reshape(-1, 2)
    return probs, mask


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


def parse_reply(data: Any, chat: bool) -> tuple[str, dict[str, float] | None]:
    """The continuation text and the first position's top logprobs of a completions or chat answer."""
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
    else:
        text = choice.get("text")
        top = _first_top_completions(choice)
    if not isinstance(text, str):
        raise MalformedResponse("choice has no text" if text is None else "choice's text is not a string")
    if top is not None:
        validate.total_probability(top)
        top = {redact(k): v for k, v in top.items()}
    return redact(text), top


class OpenAIBackend:
    """An OpenAI-compatible HTTP endpoint (or several, used round-robin) serving one model."""

    streams_results = True
    has_chat_template = True

    def __init__(
        self,
        model: str,
        base_urls: list[str],
        api_key: str | None,
        concurrency: int = DEFAULT_CONCURRENCY,
        timeout: float = 120.0,
        retry: RetryPolicy | None = None,
        top_logprobs: int = TOP_LOGPROBS,
        limits: AnswerLimits | None = None,
    ) -> None:
        if concurrency < 1:
            raise ModelError(f"--concurrency must be at least 1, got {concurrency}")
        self.model = model
        self.name = f"openai:{model}"
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.concurrency = concurrency
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.top_logprobs = top_logprobs
        self._logprobs = top_logprobs
        self._api_key = api_key
        register_secret(api_key)
        self.limits = limits or AnswerLimits.from_env()
        self.requests_sent = 0
        self._client: httpx.AsyncClient | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fairprobe-api", daemon=True)
        self._thread.start()

    def identity(self) -> dict[str, Any]:
        """Model name, endpoint(s) and the top-k asked for; never the API key."""
        return {
            "id": self.name,
            "backend": "openai",
            "model": self.model,
            "base_url": ",".join(self.base_urls),
            "top_logprobs": self.top_logprobs,
        }

    async def _post(self, url: str, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes]:
        """POST and read the answer within the size limit and the deadline (a MalformedResponse otherwise)."""
        limits = self.limits

        async def exchange() -> tuple[int, httpx.Headers, bytes]:
            async with self._http().stream("POST", url, json=body) as response:
                chunks, size = [], 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise MalformedResponse(f"answer larger than {limits.max_bytes:,} bytes (the size limit)")
                    chunks.append(chunk)
                return response.status_code, response.headers, b"".join(chunks)

        try:
            return await asyncio.wait_for(exchange(), limits.deadline)
        except asyncio.TimeoutError:
            raise MalformedResponse(f"no complete answer within {limits.deadline:g} s (the request deadline)") from None

    def close(self) -> None:
        """Close connections and stop the event-loop thread."""
        if self._client is not None:
            asyncio.run_coroutine_threadsafe(self._client.aclose(), self._loop).result()
            self._client = None
        self._loop.call_soon_threadsafe(self._loop.stop)

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        word_pairs: list[tuple[str, str]] | None = None,
        on_result: OnResult | None = None,
    ) -> list[Completion]:
        """Ask the server for every prompt, `concurrency` at a time; `on_result(i, c)` sees each answer at once."""
        future = asyncio.run_coroutine_threadsafe(self._generate(prompts, config, word_pairs, on_result), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
            self._client = httpx.AsyncClient(
                headers=headers,
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
                limits=httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency),
            )
        return self._client

    async def _generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        word_pairs: list[tuple[str, str]] | None,
        on_result: OnResult | None,
    ) -> list[Completion]:
        gate = asyncio.Semaphore(self.concurrency)
        abort = asyncio.Event()

        async def one(index: int) -> Completion | None:
            async with gate:
                if abort.is_set():
                    return None
                try:
                    completion = await self._ask(index, prompts[index], config, word_pairs, abort)
                except EndpointError:
                    abort.set()
                    raise
            if completion is not None and on_result is not None:
                on_result(index, completion)
            return completion

        results = await asyncio.gather(*(one(i) for i in range(len(prompts))), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    def _payload(self, prompt: Prompt, config: GenerationConfig, want_probs: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
            "seed": config.seed,
        }
        if config.top_k:
            body["top_k"] = config.top_k
        if isinstance(prompt, str):
            body["prompt"] = prompt
            if want_probs and self._logprobs:
                body["logprobs"] = self._logprobs
            return "/completions", body
        body["messages"] = [m.model_dump() if isinstance(m, ChatMessage) else dict(m) for m in prompt]
        if want_probs and self._logprobs:
            body.update(logprobs=True, top_logprobs=self._logprobs)
        return "/chat/completions", body

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
        word_pairs: list[tuple[str, str]] | None,
        abort: asyncio.Event,
    ) -> Completion | None:
        """One prompt with retries; a malformed or refused answer becomes a Completion with `error` set."""
        policy = self.retry
        chat = not isinstance(prompt, str)
        attempt = 0
        malformed = 0
        failure = ""
        while attempt < policy.attempts:
            if abort.is_set():
                return None
            attempt += 1
            base = self.base_urls[(index + attempt - 1) % len(self.base_urls)]
            path, body = self._payload(prompt, config, word_pairs is not None)
            asked = int(body.get("top_logprobs", body.get("logprobs", 0)) or 0)
            retry_after: float | None = None
            try:
                self.requests_sent += 1
                status, headers, content = await self._post(base + path, body)
                if status == 200:
                    text, top = parse_reply(validate.json_body(content), chat)
                    return self._completion(text, top, word_pairs, asked)
            except MalformedResponse as exc:
                malformed += 1
                if malformed >= policy.malformed_attempts or attempt >= policy.attempts:
                    return Completion(text="", error=f"malformed response: {exc}")
                failure = f"malformed response from {base}: {exc}"
                continue
            except httpx.TimeoutException:
                failure = f"no answer from {base} within {self.timeout:g} s"
            except httpx.TransportError as exc:
                failure = f"connection to {base} failed ({type(exc).__name__})"
            else:
                detail = shorten(content.decode("utf-8", errors="replace"))
                if status in REJECT_STATUS and "logprob" in detail.lower() and self._lower_logprobs(asked):
                    attempt -= 1
                    continue
                if status in REJECT_STATUS:
                    return Completion(text="", error=f"rejected by server (HTTP {status}): {detail}")
                if status not in RETRY_STATUS and status < 500:
                    hint = " (check $FAIRPROBE_API_KEY)" if status in (401, 403) else ""
                    raise EndpointError(f"{base}{path} answered HTTP {status}{hint}: {detail}")
                failure = f"{base} answered HTTP {status}"
                retry_after = retry_after_seconds(headers)
            if attempt < policy.attempts:
                await asyncio.sleep(policy.delay(attempt, retry_after))
        raise EndpointError(f"{shorten(failure, 400)}; gave up after {policy.attempts} attempts")

    def _completion(
        self, text: str, top: dict[str, float] | None, word_pairs: list[tuple[str, str]] | None, asked: int
    ) -> Completion:
        if word_pairs is None or top is None:
            return Completion(text=text, extra={"top_logprobs": 0} if word_pairs is not None else {})
        probs, mask = word_probs_from_top(top, word_pairs)
        return Completion(text=text, word_probs=probs, word_probs_mask=mask, extra={"top_logprobs": asked})


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
    """The API key from $FAIRPROBE_API_KEY, else $OPENAI_API_KEY (never a command-line option)."""
    for name in API_KEY_ENV:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return None


@register_scheme("openai")
def load_openai(
    rest: str,
    base_url: str | None = None,
    concurrency: int | None = None,
    adapter: str | None = None,
    timeout: float = 120.0,
    retry: RetryPolicy | None = None,
    top_logprobs: int = TOP_LOGPROBS,
    limits: AnswerLimits | None = None,
    **_local_options: Any,
) -> OpenAIBackend:
    """`openai:MODEL` at --base-url (comma-separated URLs are used round-robin); local-model options are ignored."""
    if not rest:
        raise ModelError("model spec 'openai:' needs the server's model name, e.g. openai:gpt-4o-mini")
    if adapter:
        raise ModelError("--adapter needs a local model (embedded or hf:), not an openai: endpoint")
    urls = [u.strip() for u in (base_url or DEFAULT_BASE_URL).split(",") if u.strip()]
    for url in urls:
        parsed = parse_base_url(url)
        if parsed.scheme not in ("http", "https"):
            raise ModelError(f"--base-url must be an http(s) URL, got {url!r}")
        if parsed.userinfo:  # it would be written to the manifest: credentials belong in the environment
            raise ModelError(f"--base-url for {parsed.host} carries credentials: put the key in ${API_KEY_ENV[0]}")
    key = api_key_from_env()
    if key is None and any(parse_base_url(u).host == "api.openai.com" for u in urls):
        raise ModelError(f"the OpenAI API needs a key: set ${API_KEY_ENV[0]} (or ${API_KEY_ENV[1]})")
    return OpenAIBackend(
        rest,
        urls,
        key,
        concurrency=concurrency or DEFAULT_CONCURRENCY,
        timeout=timeout,
        retry=retry,
        top_logprobs=top_logprobs,
        limits=limits,
    )
