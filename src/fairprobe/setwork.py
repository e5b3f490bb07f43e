"""What a probe set asks of the model, counted before and while it runs (runner.py): its model calls (generations,
and scorings that are not read from a generation), the cost said before a large set starts, its progress as
batches come (`SetWatch`: calls and tokens, rate, time left), the line said once when most of a set's replies
cannot be read, and the scorings a family's `settle` asked already (`Answered`: not asked again)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from fairprobe.families import Family
from fairprobe.families.base import Replies, Request, RunContext, Scoring
from fairprobe.progress import Progress, WorkClock, counting_answers
from fairprobe.records import ProbeSet, Sample

# A set's requests as the runner asks them: (probe id, request).
Asked = list[tuple[str, Request | Scoring]]


class Answered:
    """The scores of the scorings a family's `settle` asked before its set runs, by (probe id, key): a batch takes
    them instead of asking the same scorings again, so each scoring is asked once, the call cache on or off. Only
    a scoring asked on its own is taken (one read from a generation of its prompt costs that generation nothing)."""

    def __init__(self) -> None:
        self.scores: dict[tuple[str, str], tuple[Scoring, Any]] = {}

    def asker(self, ask: Callable[[Asked], dict[str, Replies]]) -> Callable[[Asked], dict[str, Replies]]:
        """`ask`, keeping the scores it brings back."""

        def asking(asked: Asked) -> dict[str, Replies]:
            replies = ask(asked)
            for probe, request in asked:
                scores = replies[probe].scores.get(request.key) if isinstance(request, Scoring) else None
                if scores is not None:
                    self.scores[(probe, request.key)] = (request, scores)
            return replies

        return asking

    def take(self, asked: Asked) -> tuple[Asked, dict[str, dict[str, Any]]]:
        """A batch's requests less the scorings answered already (the same prompt and continuations), and their
        scores by probe id and key; each is taken once."""
        fused = fused_calls(asked)
        rest: Asked = []
        known: dict[str, dict[str, Any]] = {}
        for i, (probe, request) in enumerate(asked):
            kept = self.scores.pop((probe, request.key), None) if i not in fused else None
            if kept is not None and isinstance(request, Scoring) and kept[0] == request:
                known.setdefault(probe, {})[request.key] = kept[1]
            else:
                rest.append((probe, request))
        return rest, known


def model_calls(asked: list[tuple[str, Request | Scoring]]) -> int:
    """The model calls a batch's requests make: each generation, and each scoring not read from a generation."""
    return len(asked) - len(fused_calls(asked))


def prompt_chars(prompt: Any) -> int:
    """A prompt's length in characters (a chat prompt: its messages' contents)."""
    if isinstance(prompt, str):
        return len(prompt)
    return sum(len(str(getattr(m, "content", m))) for m in prompt)


@dataclass
class SetWork:
    """What a set asks of the model: generations, scorings of their own, the prompts' characters, and the most new
    tokens a generation may make."""

    generations: int = 0
    scorings: int = 0
    chars: int = 0
    prompts: int = 0
    new_tokens: int = 0

    @property
    def calls(self) -> int:
        """Model calls: generations and the scorings that are calls of their own."""
        return self.generations + self.scorings

    @property
    def tokens(self) -> float:
        """The tokens the set is expected to cost: its prompts' (estimated from characters) and the most its
        generations may make. A run paces its time left by them (`run_clock`)."""
        return self.chars / CHARS_PER_TOKEN + self.generations * self.new_tokens

    @property
    def weight(self) -> float:
        """A call's expected tokens, on average over the set (1 where there are none to expect)."""
        return self.tokens / self.calls if self.calls and self.tokens else 1.0

    def cost_line(self, name: str, items: int, unit: str) -> str | None:
        """The set's expected cost before it starts, when it is large (long prompts, or many calls an item):
        'hiring-bloomberg: 4 items, 8 generations, ~3,100-token prompts, up to 300 new tokens a reply'."""
        tokens = self.chars / max(self.prompts, 1) / CHARS_PER_TOKEN
        if tokens < LONG_PROMPT_TOKENS and self.calls < MANY_CALLS_PER_ITEM * items:
            return None
        calls = [f"{n:,} {what}" for n, what in ((self.generations, "generations"), (self.scorings, "scorings")) if n]
        shown = round(tokens, -1 if tokens < 1000 else -2)
        text = f"{name}: {items:,} {unit}, {', '.join(calls)}, ~{shown:,.0f}-token prompts"
        return text + (f", up to {self.new_tokens:,} new tokens a reply" if self.generations else "")


# A set's cost is said before it starts when its prompts average this many tokens or more, or it makes this many
# model calls an item; tokens are estimated from characters (docs/genderbench.md gives the measured counts).
CHARS_PER_TOKEN = 4
LONG_PROMPT_TOKENS = 500
MANY_CALLS_PER_ITEM = 4


def set_work(family: Family[Any, Any], ps: ProbeSet, run: RunContext, family_options: Any) -> SetWork:
    """What a set will ask of the model, counted from its requests before any is asked."""
    work = SetWork()
    longest = family.generation(run, family_options).max_new_tokens
    for probe in ps.probes:
        asked = [(probe.id, r) for r in family.requests(ps, probe, run, family_options)]
        fused = fused_calls(asked)
        for i, (_, request) in enumerate(asked):
            if isinstance(request, Request):
                work.generations += 1
                work.new_tokens = max(work.new_tokens, request.max_new_tokens or longest)
            elif i not in fused:
                work.scorings += 1
            else:
                continue
            work.chars += prompt_chars(request.prompt)
            work.prompts += 1
    return work


class Unread:
    """Replies a set's family could not read, counted as batches come; said once, while the run goes on, after the
    first batch where most of at least `UNREAD_AFTER` replies so far were unreadable (a model that does not follow
    the answer format), or at the set's end where most were and it was not said yet (a set of few replies)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.unread = self.replies = 0
        self.said = False

    def add(self, samples: list[Sample]) -> str | None:
        """Count a batch; the line to say, the first time most replies so far (at least `UNREAD_AFTER`) are
        unreadable."""
        for sample in samples:
            unread, of = sample.unreadable()
            self.unread += unread
            self.replies += of
        return self._said(" so far") if self.replies >= UNREAD_AFTER else None

    def end(self) -> str | None:
        """At the set's end: the line, where most replies were unreadable and it was not said yet."""
        return self._said("")

    def _said(self, when: str) -> str | None:
        if self.said or self.unread * 2 <= self.replies:
            return None
        self.said = True
        return (
            f"{self.name}: {self.unread:,} of {self.replies:,} replies{when} ({100 * self.unread / self.replies:.0f}%) "
            "could not be read (the model does not follow the answer format): the set's metrics rest on the rest"
        )


UNREAD_AFTER = 20


def tokens_of(replies: Iterable[Replies]) -> tuple[int, int] | None:
    """The prompt tokens read and new tokens made for a batch's generations, where the backend said them."""
    known = [c for r in replies for c in r.completions.values() if (c.prompt_tokens, c.new_tokens) != (None, None)]
    if not known:
        return None
    return sum(c.prompt_tokens or 0 for c in known), sum(c.new_tokens or 0 for c in known)


def run_clock(works: list[SetWork], now: Callable[[], float] = time.monotonic) -> WorkClock:
    """The clock of a run of several sets: its model calls, its time left paced by their expected tokens."""
    return WorkClock(sum(w.calls for w in works), now=now, work=sum(w.calls * w.weight for w in works))


class SetWatch:
    """A set's progress while it runs (the hook of runner.run_set): its cost said before it starts, its model
    calls counted and timed as batches come on its own clock and the run's (with the tokens the backend says), the
    tokens said at its end, and its unreadable replies said once. Its clock is the run's (injected in tests)."""

    def __init__(
        self,
        ps: ProbeSet,
        unit: str,
        work: SetWork,
        progress: Progress,
        run: WorkClock | None = None,
    ) -> None:
        self.name, self.progress, self.run = ps.name, progress, run
        self.now: Callable[[], float] = run.now if run is not None else time.monotonic
        if (cost := work.cost_line(ps.name, len(ps.probes), unit)) is not None:
            progress.note(cost)
        self.clock = WorkClock(work.calls, now=self.now)
        progress.start(ps.name, work.calls)
        progress.measure(self.clock)
        self.unread = Unread(ps.name)
        self.weight = work.weight
        self.calls = self.part = 0  # the batch under way: its calls, and those its backend said answered so far
        self.part_tokens = (0, 0)
        self.mark = self.now()

    def skipped(self, calls: int) -> None:
        """Calls of a batch found saved by an earlier run: done, not in the pace."""
        self.clock.skipped(calls)
        if self.run is not None:
            self.run.skipped(calls, self.weight)
        self.progress.advance(calls)
        self.mark = self.now()

    @contextmanager
    def asking(self, calls: int) -> Iterator[None]:
        """While a batch of `calls` model calls is asked: the parts a backend answers as they come (a local model's
        passes, `progress.answers_came`) move the progress, so a batch as large as the set does not stand at 0."""
        self.calls, self.part, self.part_tokens = calls, 0, (0, 0)
        with counting_answers(self._part):
            yield

    def _part(self, n: int, tokens: tuple[int, int] | None) -> None:
        n = min(n, self.calls - self.part)  # a scoring asked again inside a call is not a call of its own
        if n <= 0:
            return
        self.part += n
        if tokens is not None:
            self.part_tokens = (self.part_tokens[0] + tokens[0], self.part_tokens[1] + tokens[1])
        self._count(n, tokens)

    def answered(self, replies: Iterable[Replies], samples: list[Sample]) -> None:
        """The batch asked in `asking` is answered: its calls not yet counted (with their tokens), then the
        unreadable line when it is due."""
        tokens = tokens_of(replies)
        if tokens is not None:
            tokens = (max(tokens[0] - self.part_tokens[0], 0), max(tokens[1] - self.part_tokens[1], 0))
        self._count(self.calls - self.part, tokens)
        if (said := self.unread.add(samples)) is not None:
            self.progress.note(said)

    def _count(self, calls: int, tokens: tuple[int, int] | None) -> None:
        """Calls answered since the last count, timed since then (none: the time alone, the display unmoved)."""
        seconds = self.now() - self.mark
        self.clock.asked_for(calls, seconds, tokens)
        if self.run is not None:
            self.run.asked_for(calls, seconds, tokens, self.weight)
        if calls:
            self.progress.advance(calls)
        self.mark = self.now()

    def end(self) -> None:
        """The set's tokens (where known), and the unreadable line where it is due and not said yet."""
        for line in (self.clock.tokens_line(self.name), self.unread.end()):
            if line is not None:
                self.progress.note(line)


def fused_calls(asked: list[tuple[str, Request | Scoring]]) -> dict[int, int]:
    """Which scoring requests ride on a generation request (scoring index -> generation index): the first
    generation request of the same probe with the same prompt, one scoring request each."""
    taken: set[int] = set()
    out: dict[int, int] = {}
    for i, (probe, request) in enumerate(asked):
        if not isinstance(request, Scoring):
            continue
        host = next(
            (
                j
                for j, (other, r) in enumerate(asked)
                if other == probe and isinstance(r, Request) and r.prompt == request.prompt and j not in taken
            ),
            None,
        )
        if host is not None:
            taken.add(host)
            out[i] = host
    return out
