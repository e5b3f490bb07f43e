"""Local OpenAI-compatible HTTP servers for the API tests: a scripted one (faults on demand) and a real model.

Both are real HTTP servers on 127.0.0.1 (http.server, one thread per connection, HTTP/1.1 keep-alive).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fairprobe.models.fingerprint import GREEDY_TOKENS, GREEDY_TOP
from fairprobe.models.server_scoring import PROBE_PROMPT

# Seconds between the bytes of a trickling answer (status -3).
TRICKLE_PAUSE = 0.2

# Canned next-token distribution of the scripted server: " she" 0.3, " he" 0.1 (hand-checkable metrics).
CANNED_TOP = {" she": math.log(0.3), " the": math.log(0.2), " he": math.log(0.1), " it": math.log(0.05)}


def canned_text(prompt: str) -> str:
    """The scripted server's deterministic continuation: female for nurse/teacher prompts, male otherwise."""
    return " she is kind." if any(w in prompt for w in ("nurse", "teacher", "dancer")) else " he went home."


def is_fingerprint_probe(body: dict[str, Any]) -> bool:
    """Whether a request is the greedy probe a run asks once when it starts (models/fingerprint.py): the probe
    prompt, GREEDY_TOKENS tokens at temperature 0 with GREEDY_TOP logprobs (a run's own requests ask 20 or none)."""
    listed = body.get("top_logprobs") if "messages" in body else body.get("logprobs")
    probe = (body.get("max_tokens"), body.get("temperature"), listed, prompt_text(body))
    return probe == (GREEDY_TOKENS, 0.0, GREEDY_TOP, PROBE_PROMPT)


@dataclass
class Seen:
    """What a server received: request bodies and Authorization headers, in order. The greedy fingerprint probe a
    run asks once when it starts is kept apart in `probes` (and answered as request number -1), so the bodies,
    counts and request numbers the tests script by are the run's own requests."""

    probes: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[dict[str, Any]] = field(default_factory=list)
    auth: list[str | None] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, body: dict[str, Any], auth: str | None) -> int:
        """Record one request (now in flight); returns its 0-based number (-1 for the fingerprint probe)."""
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if is_fingerprint_probe(body):
                self.probes.append(body)
                return -1
            self.bodies.append(body)
            self.auth.append(auth)
            self.paths.append(path)
            return len(self.bodies) - 1

    def done(self) -> None:
        """One request answered."""
        with self.lock:
            self.in_flight -= 1

    @property
    def count(self) -> int:
        """How many requests arrived."""
        with self.lock:
            return len(self.bodies)


# A fault script maps (request number, body) to an action: "ok", "429", "500", "slow", "truncated",
# "drop", "malformed", "empty", "401" (echoing the key), "nologprobs" (answers without logprobs) or
# "max5" (400 when more than 5 logprobs are asked, as OpenAI's legacy completions endpoint).
Script = Callable[[int, dict[str, Any]], str]


def completion_json(body: dict[str, Any], text: str, top: dict[str, float] | None) -> dict[str, Any]:
    """An OpenAI completions or chat answer with `text` and, when asked, `top` as the first position's logprobs."""
    chat = "messages" in body
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
        if body.get("logprobs") and top is not None:
            k = int(body.get("top_logprobs") or 0)
            items = sorted(top.items(), key=lambda kv: -kv[1])[:k]
            first = {"token": items[0][0], "logprob": items[0][1], "bytes": None}
            choice["logprobs"] = {
                "content": [{**first, "top_logprobs": [{"token": t, "logprob": v, "bytes": None} for t, v in items]}]
            }
    else:
        choice["text"] = text
        if body.get("logprobs") and top is not None:
            items = sorted(top.items(), key=lambda kv: -kv[1])[: int(body["logprobs"])]
            choice["logprobs"] = {
                "tokens": [items[0][0]],
                "token_logprobs": [items[0][1]],
                "top_logprobs": [dict(items)],
                "text_offset": [0],
            }
    return {
        "id": "cmpl-test",
        "object": "chat.completion" if chat else "text_completion",
        "model": body.get("model"),
        "choices": [choice],
        "usage": {"completion_tokens": int(body.get("max_tokens") or 1)},  # as if it wrote every token asked
    }


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt of a completions body, or the last chat message."""
    if "messages" in body:
        return str(body["messages"][-1]["content"])
    return str(body.get("prompt", ""))


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small writes go out at once (no Nagle + delayed-ACK stall)
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None, length: int | None = None):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload) if length is None else length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.loads(raw)
        number = self.server.seen.add(self.path, body, self.headers.get("Authorization"))
        try:
            status, payload, headers = self.server.answer(number, body, self.headers.get("Authorization"))
        finally:
            self.server.seen.done()
        if status == -1:  # drop the connection without answering
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if status == -3:  # a trickle: the whole answer, one byte every TRICKLE_PAUSE seconds
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            try:
                for i in range(len(payload)):
                    self.wfile.write(payload[i : i + 1])
                    self.wfile.flush()
                    time.sleep(TRICKLE_PAUSE)
            except OSError:  # the client gave up (its deadline)
                self.close_connection = True
            return
        if status == -2:  # truncated body: announce more bytes than are sent, then close
            self._send(200, payload, length=len(payload) + 50)
            self.close_connection = True
            self.connection.shutdown(2)
            return
        self._send(status, payload, headers)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that gave up (timeout test) leaves a broken pipe: nothing to report."""

    seen: Seen
    answer: Callable[[int, dict[str, Any], str | None], tuple[int, bytes, dict[str, str]]]


@contextmanager
def serve(answer: Callable[[int, dict[str, Any], str | None], tuple[int, bytes, dict[str, str]]]) -> Iterator[Any]:
    """Run a server on 127.0.0.1 (free port) in a thread; yields (base_url, seen)."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.seen = Seen()
    server.answer = answer
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", server.seen
    finally:
        server.shutdown()
        server.server_close()


def scripted(script: Script | None = None, latency: float = 0.0):
    """A canned-answer server whose `script` injects faults; yields (base_url, seen)."""

    def answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        action = script(number, body) if script else "ok"
        if latency:
            time.sleep(latency)
        ok = json.dumps(completion_json(body, canned_text(prompt_text(body)), CANNED_TOP)).encode()
        if action == "ok":
            return 200, ok, {}
        if action == "nologprobs":
            return 200, json.dumps(completion_json(body, canned_text(prompt_text(body)), None)).encode(), {}
        if action == "max5":
            if int(body.get("logprobs") or 0) > 5:
                return 400, b'{"error": {"message": "logprobs must be at most 5"}}', {}
            return 200, ok, {}
        if action == "429":
            return 429, b'{"error": {"message": "rate limited"}}', {"Retry-After": "1"}
        if action == "500":
            return 500, b'{"error": {"message": "internal error"}}', {}
        if action == "slow":
            time.sleep(1.5)
            return 200, ok, {}
        if action == "truncated":
            return -2, ok[: len(ok) // 2], {}
        if action == "drop":
            return -1, b"", {}
        if action == "malformed":
            return 200, ok[: len(ok) // 2], {}
        if action == "empty":
            return 200, b'{"choices": []}', {}
        if action == "401":
            return 401, json.dumps({"error": {"message": f"Incorrect API key provided: {auth}"}}).encode(), {}
        raise ValueError(f"unknown action {action!r}")

    return serve(answer)


def model_server(backend: Any):
    """A real OpenAI-compatible server over a fairprobe HFBackend (completions and chat, with top logprobs).

    Requests run one at a time (one model); each prompt is generated alone, so no padding is involved.
    """
    import torch

    lock = threading.Lock()
    tokenizer = backend.tokenizer

    def answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        chat = "messages" in body
        prompt = body["messages"] if chat else body["prompt"]
        k = int(body.get("top_logprobs") or 0) if chat else int(body.get("logprobs") or 0)
        with lock, torch.inference_mode():
            enc = backend.encode([prompt])
            out = backend.model.generate(
                **enc,
                max_new_tokens=int(body.get("max_tokens", 16)),
                do_sample=False,
                output_logits=True,
                return_dict_in_generate=True,
            )
        new = out.sequences[0, enc["input_ids"].shape[1] :]
        text = tokenizer.decode(new, skip_special_tokens=True)
        top = None
        if k:
            first = out.logits[0][0].float().log_softmax(-1)
            values, ids = first.topk(k)
            top = {tokenizer.decode([int(i)]): float(v) for v, i in zip(values, ids, strict=True)}
        return 200, json.dumps(completion_json(body, text, top)).encode(), {}

    return serve(answer)


# An echo-capable server (as vLLM): a character-level "tokenizer" (token id = code point) whose every
# token has logprob -1 - (id % 7 + 1) / 10 given what precedes it, so P(word | prompt) is hand-computable (and
# a prompt's disjoint continuations hold less than probability 1 together, as a real model's do).
def char_logprob(token_id: int) -> float:
    """The echo server's log-probability of a token, whatever precedes it."""
    return -1.0 - ((token_id % 7) + 1) / 10


def word_logprob(word: str) -> float:
    """log P(" " + word | any prompt) on the echo server (the sum over its characters)."""
    return sum(char_logprob(ord(c)) for c in " " + word)


def _echo_choice(
    index: int, ids: list[int], as_ids: bool, fault: str, merge: bool, top: int = 0, shift: int = 0
) -> dict[str, Any]:
    values: list[float | None] = [None, *(char_logprob(t) for t in ids[1:])]
    as_ids = as_ids and fault not in ("textform", "textother")  # these lie: text where ids were asked
    tokens = [f"token_id:{t}" if as_ids else chr(t - shift) for t in ids]
    # With `logprobs` >= 1 each position lists its most likely token: the token itself (every sequence is greedy).
    tops = [None, *({token: value} for token, value in zip(tokens[1:], values[1:], strict=True))] if top else None
    if merge and not as_ids:  # text tokenized with "d " as one token: "..., and" + " she" merges at the boundary
        for k in range(len(tokens) - 2, -1, -1):
            if tokens[k] == "d" and tokens[k + 1] == " ":
                tokens[k : k + 2] = ["d "]
                del values[k + 1]
    if fault in ("othertokens", "textother"):
        tokens = [f"token_id:{t + 1}" if as_ids else chr(t - shift + 1) for t in ids]
    elif fault == "inflate":  # every token almost certain: a prompt's words add up to more than probability 1
        values = [None, *(-0.001 for _ in ids[1:])]
    elif fault in ("nan", "inf", "positive", "floor"):  # floor: vLLM's -9999, its stand-in for -inf
        values[-1] = {"nan": math.nan, "inf": math.inf, "positive": 0.5, "floor": -9999.0}[fault]
    elif fault == "short":
        tokens, values = tokens[:-1], values[:-1]
    logprobs: dict[str, Any] = {"tokens": tokens, "token_logprobs": values}
    if tops is not None and len(tops) == len(tokens):
        logprobs["top_logprobs"] = tops
    return {"index": index, "text": "", "logprobs": logprobs, "prompt_token_ids": list(ids)}


# With `next_token_ids`, " she" and " he" are single tokens (these ids) and generation answers carry the
# logprobs of the ids asked for in `logprob_token_ids` at the first position, as vLLM does.
SINGLE_TOKENS = {" she": 70001, " he": 70002}


def first_position_logprob(token_id: int) -> float:
    """The log-probability of a chosen token id at the first generated position (small, so a position's
    listed tokens hold less than probability 1, as a real distribution's do)."""
    return char_logprob(token_id) - 2.0


def _first_position(body: dict[str, Any], fault: str) -> dict[str, Any]:
    """A generation answer with the logprobs of `logprob_token_ids` at its first position."""
    wanted = list(body["logprob_token_ids"])
    if fault == "missingid":
        wanted = wanted[1:]
    top = {f"token_id:{i}": first_position_logprob(i) for i in wanted}
    if fault == "positive":
        top = {k: 0.5 for k in top}
    if fault == "inflate":
        top = {k: -0.001 for k in top}
    generated, own = 1, -0.1
    if fault == "ownlie":  # generates the first id asked for, with a logprob other than the one listed for it
        generated, own = wanted[0], -0.01
        top[f"token_id:{generated}"] = first_position_logprob(generated)
    choice: dict[str, Any] = {"index": 0, "text": canned_text(prompt_text(body))}
    choice["logprobs"] = {"tokens": [f"token_id:{generated}"], "token_logprobs": [own], "top_logprobs": [top]}
    if body.get("return_token_ids"):
        choice.update(prompt_token_ids=[ord(c) for c in body["prompt"]], token_ids=[generated])
    return {"object": "text_completion", "choices": [choice]}


def _positions(body: dict[str, Any]) -> dict[str, Any]:
    """The answer to several token-id sequences with `logprob_token_ids`: at each one's generated position, the
    ids asked for with `first_position_logprob` (whatever precedes them) and token id 1 generated."""
    top = {f"token_id:{i}": first_position_logprob(i) for i in body["logprob_token_ids"]}
    logprobs = {"tokens": ["token_id:1"], "token_logprobs": [-0.1], "top_logprobs": [top]}
    choices = [{"index": i, "text": "", "logprobs": logprobs} for i in range(len(body["prompt"]))]
    return {"object": "text_completion", "choices": choices}


def position_word_logprob(word: str) -> float:
    """log P(" " + word | any prompt) read position by position (`_positions`, one read per character)."""
    return sum(first_position_logprob(ord(c)) for c in " " + word)


def rendered_chat(messages: list[dict[str, str]]) -> str:
    """The echo server's chat template: each turn as `<role>content`, then the generation prompt `<assistant>`."""
    return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"


def _char_ids(text: str, next_token_ids: bool, shift: int = 0) -> list[int]:
    """The echo server's tokens of a text: code points, plus `shift` (" she" and " he" single tokens with
    `next_token_ids`)."""
    if next_token_ids and text in SINGLE_TOKENS:
        return [SINGLE_TOKENS[text]]
    return [ord(c) + shift for c in text]


def echo_server(fault_for: Callable[[str], str] | None = None, **options: Any):
    """A server that answers as `echo_answer(fault_for, **options)` does (see there); yields (url, seen)."""
    return serve(echo_answer(fault_for, **options))


def echo_answer(
    fault_for: Callable[[str], str] | None = None,
    tokenize: bool = True,
    merge: bool = False,
    next_token_ids: bool = False,
    shift: int = 0,
    render: Callable[[list[dict[str, str]]], str] = rendered_chat,
):
    """A server that echoes prompt logprobs, tokenizes at /tokenize and gives token ids in answers
    (`return_token_ids`), unless `tokenize` is False (then it gives no token ids at all). `shift` moves every
    token id (another tokenizer: a replica that is not one); `render` is its chat template.

    With `merge`, text is tokenized with "d " as one token, so a word after a prompt ending in "d" does not
    extend the prompt's own tokens (a merge across the boundary).
    `fault_for(text)` names the fault of an echoed sequence: "ok", "othertokens", "nan", "inf", "positive", "floor",
    "short", "inflate" (every token logprob -0.001), "textform" (tokens as text where ids were asked),
    "textother" (as text, and not the ones sent) or "500" (the request holding it answers HTTP 500); of a
    generation answer: "inflate", "ownlie" (its own first logprob is not the one listed), "missingid",
    "positive" ("refuse": a pooled position read holding it is refused with HTTP 400). Requests that do not
    echo get the scripted server's canned continuation. Returns the answer function `serve` takes.
    """

    def answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        if "max_tokens" not in body:  # /tokenize: text, or chat messages rendered as the server's template does
            if not tokenize:
                return 404, b'{"detail": "Not Found"}', {}
            text = body["prompt"] if "prompt" in body else render(body["messages"])
            return 200, json.dumps({"tokens": _char_ids(text, next_token_ids, shift)}).encode(), {}
        if "logprob_token_ids" in body:
            if not next_token_ids:
                return 400, b'{"error": {"message": "unknown field logprob_token_ids"}}', {}
            if isinstance(body.get("prompt"), list):  # pooled position reads; "refuse" a sequence as too long
                texts = ["".join(chr(t) if t < 0x110000 else "" for t in p) for p in body["prompt"]]
                if fault_for and any(fault_for(t) == "refuse" for t in texts):
                    return 400, b'{"error": {"message": "longer than the maximum context length"}}', {}
                return 200, json.dumps(_positions(body)).encode(), {}
            fault = fault_for(prompt_text(body)) if fault_for else "ok"
            return 200, json.dumps(_first_position(body, fault)).encode(), {}
        if not body.get("echo"):
            answer = completion_json(body, canned_text(prompt_text(body)), CANNED_TOP)
            texts = body["prompt"] if isinstance(body.get("prompt"), list) else [prompt_text(body)]
            if body.get("return_token_ids") and tokenize:  # vLLM gives token ids in any answer
                answer["choices"] = [
                    {**answer["choices"][0], "index": i, "prompt_token_ids": _char_ids(t, next_token_ids, shift)}
                    for i, t in enumerate(texts)
                ]
            return 200, json.dumps(answer).encode(), {}
        prompts = body["prompt"] if isinstance(body["prompt"], list) else [body["prompt"]]
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        choices = []
        for i, p in enumerate(prompts):
            ids = [ord(c) + shift for c in p] if isinstance(p, str) else list(p)
            text = "".join(chr(t - shift) if t - shift < 0x110000 else "" for t in ids)
            fault = fault_for(text) if fault_for else "ok"
            if fault == "500":
                return 500, b'{"error": {"message": "internal error"}}', {}
            choices.append(_echo_choice(i, ids, as_ids, fault, merge, int(body.get("logprobs") or 0), shift))
            if not (body.get("return_token_ids") and tokenize):
                choices[-1].pop("prompt_token_ids")
        return 200, json.dumps({"object": "text_completion", "choices": choices}).encode(), {}

    return answer
