"""The HTTP transport of the OpenAI-compatible backend (models/api.py): its own event-loop thread, the httpx client,
a POST within the answer limits (size, deadline; models/validate.py) and the retry policy around it.

Requests are retried with exponential backoff and jitter on 408/409/429, 5xx, timeouts and dropped connections,
honouring Retry-After; a backoff pauses every request of the backend (models/pace.py), so no retry adds load
meanwhile. httpx's own transport retries only retry failed connections (no status codes, no Retry-After, no shared
pause), so the policy stays here. The loops stay hand-written rather than on tenacity: a tenacity version (branch
history, issue 29) kept every tested behaviour but was 32 code lines longer over this module and models/api.py
(554 against 522, docstrings and comments not counted): each try's outcome (a reply, a refusal, a malformed answer
with its own budget, a logprob refusal asked again within the try, the endpoint each try goes to) still had to be
sorted by hand, and tenacity added an exception type, its wiring and a dependency on top.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from fairprobe.errors import ModelError
from fairprobe.models import validate
from fairprobe.models.pace import MEASURED_TOKENS, Pace
from fairprobe.models.server_scoring import server_root
from fairprobe.models.validate import AnswerLimits, MalformedResponse
from fairprobe.redact import register_secret, shorten

RETRY_STATUS = frozenset({408, 409, 429})
TIMED_OUT = "no answer from"


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


@dataclass(frozen=True)
class Failed:
    """Why a try got no usable answer: `why` (the message if the retries run out), whether it timed out, and for an
    HTTP answer its status, its body shortened for messages and its Retry-After."""

    why: str
    timed_out: bool = False
    status: int | None = None
    detail: str = ""
    retry_after: float | None = None


def failed(url: str, answer: tuple[int, httpx.Headers, bytes] | str) -> Failed:
    """A try's answer other than a 200 (an HTTP answer, or why none came) as a Failed."""
    if isinstance(answer, str):
        return Failed(answer, timed_out=answer.startswith(TIMED_OUT))
    status, headers, content = answer
    detail = shorten(content.decode("utf-8", errors="replace"))
    return Failed(f"{url} answered HTTP {status}", False, status, detail, retry_after_seconds(headers))


def generated_tokens(content: bytes) -> int:
    """The tokens a server says it generated (`usage.completion_tokens`), 0 where its answer does not say."""
    try:
        return validate.usage(validate.json_body(content))[1] or 0
    except MalformedResponse:
        return 0


class Transport:
    """POSTs to the endpoints `base_urls` from an event loop on its own thread, `concurrency` connections at most,
    with the retry policy; the backend (models/api.py) builds on it."""

    def __init__(
        self,
        base_urls: list[str],
        api_key: str | None,
        timeout: float | None,
        concurrency: int,
        retry: RetryPolicy,
        limits: AnswerLimits,
    ) -> None:
        self.base_urls = [u.rstrip("/") for u in base_urls]
        self.concurrency = concurrency
        self.timeout = timeout
        self.pace = Pace(timeout)
        self.retry = retry
        self._api_key = api_key
        register_secret(api_key)
        self.limits = limits
        self.requests_sent = 0
        self.reached = False  # any HTTP answer came: the server is there (a failure then needs no start hint)
        self._client: httpx.AsyncClient | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fairprobe-api", daemon=True)
        self._thread.start()

    def _run(self, coroutine: Any) -> Any:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

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
            try:
                answer = await self._attempt(url + path, body, timeouts)
                if not isinstance(answer, str) and answer[0] == 200:
                    return 200, validate.json_body(answer[2], non_finite=True), ""
            except MalformedResponse as exc:
                if attempt >= policy.malformed_attempts:
                    return 200, None, str(exc)
                failure = f"malformed response from {url}: {exc}"
                continue
            got = failed(url, answer)
            failure, timeouts = got.why, timeouts + got.timed_out
            if got.status in (401, 403):
                raise EndpointError(f"{url}{path} answered HTTP {got.status} (check $FAIRPROBE_API_KEY): {got.detail}")
            status = got.status
            if status is not None and ((status not in RETRY_STATUS and status < 500) or (probe and status >= 500)):
                return status, None, got.detail
            if attempt < policy.attempts:
                await self._back_off(policy.delay(attempt, got.retry_after))
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
