"""Any OpenAI-compatible server (OpenAI, Azure, vLLM, Ollama, llama.cpp, TGI) as a backend: `--model openai:MODEL`.

Plain-string prompts go to `/completions` (the prompt is continued as the paper does, no chat template);
chat prompts go to `/chat/completions`. Requests run concurrently (`--concurrency`) on httpx's async client
and are retried with exponential backoff and jitter on 429, 5xx, timeouts and dropped connections,
honouring Retry-After. Next-word probabilities (`--implicit`): `exact` scores every attribute word after
every prompt through the server's prompt-token logprobs (models/prompt_scoring.py; the default where the
endpoint can, detected once per endpoint); `topk` reads the first generated position's top logprobs, where
a word outside them is unknown (masked, bounded by the smallest listed probability), never zero; `off`.

The API key is read from $FAIRPROBE_API_KEY (else $OPENAI_API_KEY) or given as `-M api_key=...`; it is sent
only in the Authorization header and redacted (fairprobe.redact) from every answer, token and error message.
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
from fairprobe.models.prompt_scoring import (
    PROBE_PROMPT,
    PROMPTS_PER_REQUEST,
    Abilities,
    PromptScores,
    ScoringAnswerError,
    ScoringPlan,
    echo_body,
    echoed_choices,
    first_token_logprobs,
    plan_scoring,
    read_token_ids,
    score_text,
    score_token_ids,
    server_root,
    tail_logprob,
    tokenize_body,
)
from fairprobe.models.validate import AnswerLimits, MalformedResponse
from fairprobe.records import message_dicts
from fairprobe.redact import API_KEY_ENV, clip, redact, register_secret, shorten

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_CONCURRENCY = 8
TOP_LOGPROBS = 20
# Servers that refuse 20 top logprobs (OpenAI's legacy completions allow 5) are asked again with fewer.
LOGPROB_FALLBACKS = (20, 5, 0)
IMPLICIT_MODES = ("auto", "exact", "topk", "off")
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


def word_upper_bounds(top: dict[str, float], word_pairs: list[tuple[str, str]]) -> np.ndarray:
    """The highest probability (N, 2) each attribute word can have, from one position's top logprobs.

    A word outside the list has at most the smallest listed probability (and at most the mass the list
    leaves over); a word of several tokens has at most its first token's probability, so a listed token
    that begins the word raises its bound to that token's probability.
    """
    listed = {}
    for token, logprob in top.items():
        if logprob is not None and math.isfinite(logprob):
            key = normalise_token(token)
            listed[key] = listed.get(key, 0.0) + math.exp(logprob)
    if not listed:
        return np.ones((len(word_pairs), 2))
    below = min(min(listed.values()), max(0.0, 1.0 - sum(listed.values())))
    words = [" " + w for pair in word_pairs for w in pair]
    bounds = [max([below, *(p for t, p in listed.items() if t and w.startswith(t))]) for w in words]
    return np.array(bounds, dtype=np.float64).reshape(-1, 2)


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
        implicit: str = "auto",
    ) -> None:
        if concurrency < 1:
            raise ModelError(f"--concurrency must be at least 1, got {concurrency}")
        if implicit not in IMPLICIT_MODES:
            raise ModelError(f"--implicit must be one of {', '.join(IMPLICIT_MODES)}, got {implicit!r}")
        if top_logprobs < 1:
            raise ModelError(f"--top-logprobs must be at least 1, got {top_logprobs}")
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
        self.implicit = implicit
        self._mode: str | None = None if implicit in ("auto", "exact") else implicit
        self._abilities: list[Abilities] = []
        self._word_ids: dict[str, list[int]] = {}
        self.notices: list[str] = []
        self.requests_sent = 0
        self.scoring_requests = 0
        self._client: httpx.AsyncClient | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fairprobe-api", daemon=True)
        self._thread.start()

    def identity(self) -> dict[str, Any]:
        """Model name, endpoint(s), how next-word probabilities are read and the top-k asked for; never the key."""
        return {
            "id": self.name,
            "backend": "openai",
            "model": self.model,
            "base_url": ",".join(self.base_urls),
            "implicit": self.implicit_mode(),
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

    def implicit_mode(self) -> str:
        """exact, topk or off; `auto` and `exact` ask each endpoint once whether it can score prompt tokens."""
        if self._mode is None:
            future = asyncio.run_coroutine_threadsafe(self._detect(), self._loop)
            self._mode = future.result()
        return self._mode

    def implicit_info(self) -> dict[str, Any]:
        """What the manifest records: mode asked and used, top-k asked and used, each endpoint's abilities."""
        info: dict[str, Any] = {"requested": self.implicit, "mode": self.implicit_mode()}
        if info["mode"] == "topk":
            info.update(top_logprobs_asked=self.top_logprobs, top_logprobs_used=self._logprobs)
        if self._abilities:
            info["endpoints"] = {a.url: a.as_json() for a in self._abilities}
        return info

    async def _detect(self) -> str:
        self._abilities = [await self._abilities_of(url) for url in self.base_urls]
        unable = [a for a in self._abilities if not a.echo]
        if not unable:
            return "exact"
        first = unable[0]
        if self.implicit == "exact":
            raise EndpointError(
                f"--implicit exact: {first.url}/completions cannot score prompt tokens ({first.why}); "
                "use --implicit topk or off"
            )
        self.notices.append(
            f"{first.url} cannot score prompt tokens ({first.why}): GLD/ADD bounded from top-{self.top_logprobs} "
            "logprobs (--implicit topk)"
        )
        return "topk"

    async def _abilities_of(self, url: str) -> Abilities:
        """Ask one endpoint to echo a prompt's logprobs and to tokenize it."""
        probe = echo_body(self.model, PROBE_PROMPT, False)
        status, data, detail = await self._post_retrying(url, "/completions", probe, probe=True)
        if status != 200:
            return Abilities(url, echo=False, tokenize=False, why=f"HTTP {status}: {detail}")
        try:
            (tokens, values), *_ = echoed_choices(data, 1)
            tail_logprob(values, 1)
            if not "".join(tokens).endswith(PROBE_PROMPT):
                raise ScoringAnswerError("its echo is not the prompt sent")
        except ScoringAnswerError as exc:
            return Abilities(url, echo=False, tokenize=False, why=str(exc))
        status, data, _ = await self._post_retrying(
            server_root(url), "/tokenize", tokenize_body(self.model, PROBE_PROMPT, True), probe=True
        )
        try:
            ids = read_token_ids(data) if status == 200 else []
        except ScoringAnswerError:
            ids = []
        if len(ids) != len(tokens):
            return Abilities(url, echo=True, tokenize=False)
        return Abilities(url, echo=True, tokenize=True, next_token_ids=await self._reads_token_ids(url, ids[0]))

    async def _reads_token_ids(self, url: str, token_id: int) -> bool:
        """Whether the endpoint returns the logprob of a chosen token id at a generated position (vLLM)."""
        body = {"model": self.model, "prompt": PROBE_PROMPT, "max_tokens": 1, "temperature": 0.0}
        body.update(logprobs=0, logprob_token_ids=[token_id], return_tokens_as_token_ids=True)
        status, data, _ = await self._post_retrying(url, "/completions", body, probe=True)
        try:
            top = parse_reply(data, chat=False)[1] if status == 200 else None
            return top is not None and tail_logprob([None, top.get(f"token_id:{token_id}")], 1) <= 0
        except (MalformedResponse, ScoringAnswerError):
            return False

    async def _attempt(self, url: str, body: dict[str, Any]) -> tuple[int, httpx.Headers, bytes] | str:
        """One POST within the limits: (status, headers, body), or why no answer came (a timeout, a failed
        connection). An answer over the size limit or the deadline raises MalformedResponse."""
        self.requests_sent += 1
        try:
            return await self._post(url, body)
        except httpx.TimeoutException:
            return f"no answer from {url} within {self.timeout:g} s"
        except httpx.TransportError as exc:
            return f"connection to {url} failed ({type(exc).__name__})"

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
        for attempt in range(1, policy.attempts + 1):
            retry_after: float | None = None
            try:
                answer = await self._attempt(url + path, body)
                if not isinstance(answer, str) and answer[0] == 200:
                    return 200, validate.json_body(answer[2], non_finite=True), ""
            except MalformedResponse as exc:
                if attempt >= policy.malformed_attempts:
                    return 200, None, str(exc)
                failure = f"malformed response from {url}: {exc}"
                continue
            if isinstance(answer, str):
                failure = answer
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
                await asyncio.sleep(policy.delay(attempt, retry_after))
        raise EndpointError(f"{shorten(failure, 400)}; gave up after {policy.attempts} attempts")

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
        mode = "off" if word_pairs is None else self._mode or await self._resolve_mode()
        plan = await self._plan(word_pairs) if word_pairs is not None and mode == "exact" else None
        # Plain prompts are scored exactly; chat prompts read the top-k of their first generated token.
        exact = {i for i, p in enumerate(prompts) if isinstance(p, str)} if plan else set()
        scored = self._score_tasks(prompts, sorted(exact), plan, gate) if plan and plan.echo_words else {}
        top_k = mode == "topk" or mode == "exact"
        asked_pairs = [word_pairs if top_k and i not in exact else None for i in range(len(prompts))]

        async def one(index: int) -> Completion | None:
            first_ids = plan.first_ids if plan and index in exact else None
            async with gate:
                if abort.is_set():
                    return None
                try:
                    completion = await self._ask(index, prompts[index], config, asked_pairs[index], abort, first_ids)
                except EndpointError:
                    abort.set()
                    raise
            if completion is not None and plan is not None and index in exact:
                try:
                    scores = await scored[index] if index in scored else None
                except EndpointError:
                    abort.set()
                    raise
                if completion.error is None:
                    completion = exact_completion(completion, scores, plan)
            elif completion is not None and word_pairs is not None and completion.error is None:
                completion.extra["implicit"] = "topk" if asked_pairs[index] else "off"
            if completion is not None and on_result is not None:
                on_result(index, completion)
            return completion

        results = await asyncio.gather(*(one(i) for i in range(len(prompts))), return_exceptions=True)
        for task in {*scored.values()}:
            task.cancel()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    async def _plan(self, word_pairs: list[tuple[str, str]]) -> ScoringPlan:
        """Token ids of the words (asked once) where every endpoint tokenizes, and which route scores each word."""
        words = [w for pair in word_pairs for w in pair]
        word_ids = None
        if all(a.tokenize for a in self._abilities):
            word_ids = [await self._token_ids(self.base_urls[0], " " + w, False) for w in words]
        return plan_scoring(words, word_ids, all(a.next_token_ids for a in self._abilities))

    async def _resolve_mode(self) -> str:
        self._mode = await self._detect()
        return self._mode

    def _score_tasks(
        self, prompts: list[Prompt], indices: list[int], plan: ScoringPlan, gate: asyncio.Semaphore
    ) -> dict[int, asyncio.Future[PromptScores]]:
        """One echo request per PROMPTS_PER_REQUEST prompts; each prompt's index maps to its chunk's scores."""
        out: dict[int, asyncio.Future[PromptScores]] = {}
        for start in range(0, len(indices), PROMPTS_PER_REQUEST):
            chunk = indices[start : start + PROMPTS_PER_REQUEST]
            task = asyncio.ensure_future(self._score_chunk([str(prompts[i]) for i in chunk], plan, chunk[0], gate))
            for position, index in enumerate(chunk):
                out[index] = asyncio.ensure_future(_pick(task, position))
        return out

    async def _score_chunk(
        self, prompts: list[str], plan: ScoringPlan, index: int, gate: asyncio.Semaphore
    ) -> list[PromptScores]:
        """The plan's echo words after each prompt, in one request (token ids where the server tokenizes)."""
        url = self.base_urls[index % len(self.base_urls)]
        echo = plan.echo_words
        async with gate:
            if plan.word_ids is not None:
                prompt_ids = [await self._token_ids(url, p, True) for p in prompts]
                sequences: list[Any] = [ids + plan.word_ids[j] for ids in prompt_ids for j in echo]
            else:
                sequences = [x for p in prompts for x in (p, *(p + " " + plan.words[j] for j in echo))]
            for attempt in range(1, self.retry.malformed_attempts + 1):
                self.scoring_requests += 1
                body = echo_body(self.model, sequences, plan.word_ids is not None)
                status, data, detail = await self._post_retrying(url, "/completions", body)
                if status != 200:
                    return [PromptScores(error=f"scoring rejected by server (HTTP {status}): {detail}")] * len(prompts)
                try:
                    echoed = echoed_choices(data, len(sequences))
                    break
                except ScoringAnswerError as exc:
                    if attempt == self.retry.malformed_attempts:
                        return [PromptScores(error=f"malformed scoring answer: {exc}")] * len(prompts)
        per_prompt = len(sequences) // len(prompts)
        out = []
        for k, prompt in enumerate(prompts):
            mine = echoed[k * per_prompt : (k + 1) * per_prompt]
            try:
                if plan.word_ids is not None:
                    logprobs = score_token_ids(prompt_ids[k], [plan.word_ids[j] for j in echo], mine)
                else:
                    logprobs = score_text(prompt, [plan.words[j] for j in echo], mine)
            except ScoringAnswerError as exc:
                out.append(PromptScores(error=f"malformed scoring answer: {exc}"))
                continue
            out.append(PromptScores(logprobs=logprobs))
        return out

    async def _token_ids(self, url: str, text: str, special: bool) -> list[int]:
        """The server's token ids of `text` (words are asked once per backend)."""
        key = f"{int(special)}:{text}"
        if not special and key in self._word_ids:
            return self._word_ids[key]
        status, data, detail = await self._post_retrying(
            server_root(url), "/tokenize", tokenize_body(self.model, text, special)
        )
        try:
            if status != 200:
                raise ScoringAnswerError(f"HTTP {status}: {detail}")
            ids = read_token_ids(data)
        except ScoringAnswerError as exc:
            raise EndpointError(f"{server_root(url)}/tokenize failed for {clip(repr(text), 60)}: {exc}") from None
        if not special:
            self._word_ids[key] = ids
        return ids

    def _payload(
        self, prompt: Prompt, config: GenerationConfig, want_probs: bool, first_ids: list[int] | None = None
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
        if isinstance(prompt, str):
            body["prompt"] = prompt
            if first_ids:  # exact next-token logprobs of these ids (vLLM), read from the first generated position
                body.update(logprobs=0, logprob_token_ids=first_ids, return_tokens_as_token_ids=True)
            elif want_probs and self._logprobs:
                body["logprobs"] = self._logprobs
            return "/completions", body
        body["messages"] = message_dicts(prompt)
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
        first_ids: list[int] | None = None,
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
            path, body = self._payload(prompt, config, word_pairs is not None, first_ids)
            asked = int(body.get("top_logprobs", body.get("logprobs", 0)) or 0)
            retry_after: float | None = None
            try:
                answer = await self._attempt(base + path, body)
                if not isinstance(answer, str) and answer[0] == 200:
                    text, top = parse_reply(validate.json_body(answer[2]), chat)
                    return self._completion(text, top, word_pairs, asked, first_ids)
            except MalformedResponse as exc:
                malformed += 1
                if malformed >= policy.malformed_attempts or attempt >= policy.attempts:
                    return Completion(text="", error=f"malformed response: {exc}")
                failure = f"malformed response from {base}: {exc}"
                continue
            if isinstance(answer, str):
                failure = answer
            else:
                status, headers, content = answer
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
        self,
        text: str,
        top: dict[str, float] | None,
        word_pairs: list[tuple[str, str]] | None,
        asked: int,
        first_ids: list[int] | None = None,
    ) -> Completion:
        if first_ids:
            return Completion(text=text, extra={"first_top": top or {}})
        if word_pairs is None or top is None:
            return Completion(text=text, extra={"top_logprobs": 0} if word_pairs is not None else {})
        probs, mask = word_probs_from_top(top, word_pairs)
        upper = np.where(mask, probs, word_upper_bounds(top, word_pairs))
        extra = {"top_logprobs": asked, "p_upper": upper.tolist()}
        return Completion(text=text, word_probs=probs, word_probs_mask=mask, extra=extra)


def exact_completion(completion: Completion, scores: PromptScores | None, plan: ScoringPlan) -> Completion:
    """A generated completion with its exact word probabilities: single-token words from the generation
    answer's own logprobs (when the plan reads them there), the rest from the echo scores."""
    error = scores.error if scores is not None else None
    logprobs = np.full(len(plan.words), np.nan)
    if error is None:
        try:
            if plan.first_ids:
                logprobs = first_token_logprobs(completion.extra.get("first_top", {}), plan)
            if scores is not None and scores.logprobs is not None:
                logprobs[plan.echo_words] = scores.logprobs
        except ScoringAnswerError as exc:
            error = f"malformed scoring answer: {exc}"
    result = PromptScores(logprobs=None if error else logprobs.reshape(-1, 2), error=error)
    return Completion(text=completion.text, **result.completion_fields())


async def _pick(task: asyncio.Future[list[PromptScores]], position: int) -> PromptScores:
    return (await asyncio.shield(task))[position]


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
    implicit: str = "auto",
    api_key: str | None = None,
    **_local_options: Any,
) -> OpenAIBackend:
    """`openai:MODEL` at --base-url (comma-separated URLs are used round-robin); local-model options are ignored."""
    if adapter:
        raise ModelError("--adapter needs a local model (embedded or hf:), not an openai: endpoint")
    urls = [u.strip() for u in (base_url or DEFAULT_BASE_URL).split(",") if u.strip()]
    for url in urls:
        parsed = parse_base_url(url)
        if parsed.scheme not in ("http", "https"):
            raise ModelError(f"--base-url must be an http(s) URL, got {url!r}")
        if parsed.userinfo:  # it would be written to the manifest: credentials belong in the environment
            raise ModelError(f"--base-url for {parsed.host} carries credentials: put the key in ${API_KEY_ENV[0]}")
    key = api_key or api_key_from_env()  # a key given to the backend is sent, and redacted like the environment's
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
        implicit=implicit,
    )
