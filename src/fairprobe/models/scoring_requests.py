"""The requests that score continuations on an OpenAI-compatible server (models/api.py), many prompts at a time:
echoed (prompt logprobs) or read position by position (chosen token ids), with the answers read by
models/server_scoring.py. A refused or unanswered request of several prompts is asked again prompt by prompt."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from fairprobe.models.base import UNAVAILABLE, ContinuationScore, GenerationConfig, Prompt, Scores
from fairprobe.models.replies import Answer
from fairprobe.models.server_scoring import (
    ECHO_BYTES_PER_TOKEN,
    ECHO_PROMPTS_PER_REQUEST,
    Branch,
    Echo,
    ScoringAnswerError,
    branches,
    check_total,
    choices_of,
    echo_body,
    echoed,
    first_position_scores,
    parts_by_size,
    position_groups,
    position_read,
    positions_body,
    read_token_ids,
    score_ids,
    score_text,
    server_root,
    tokenize_body,
    tree_scores,
)
from fairprobe.models.tokens import Tokens
from fairprobe.models.transport import GaveUp
from fairprobe.records import message_dicts

# Scoring failures asked again prompt by prompt (a refusal, no answer past the retries), so one prompt at fault
# (longer than the server's context, one that makes it fail) fails alone.
ALONE_FAILURES = ("scoring rejected", "scoring failed")


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


class ServerScorer(Tokens):
    """Exact scores over the server; `scoring_requests` counts the scoring requests sent, `_turn` hands echo
    requests the endpoints in turn (models/api.py sets both)."""

    scoring_requests: int
    _turn: itertools.count[int]

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
