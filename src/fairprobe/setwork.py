"""What a probe set asks of the model, counted before and while it runs (runner.py): its model calls (generations,
and scorings that are not read from a generation), the cost said before a large set starts, and the line said once
when most of a set's replies cannot be read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fairprobe.families import Family
from fairprobe.families.base import Request, RunContext, Scoring
from fairprobe.records import ProbeSet, Sample


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
    """What a set asks of the model: generations, scorings of their own, and the prompts' characters."""

    generations: int = 0
    scorings: int = 0
    chars: int = 0
    prompts: int = 0

    @property
    def calls(self) -> int:
        """Model calls: generations and the scorings that are calls of their own."""
        return self.generations + self.scorings

    def cost_line(self, name: str, items: int, unit: str) -> str | None:
        """The set's expected cost before it starts, when it is large (long prompts, or many calls an item)."""
        tokens = self.chars / max(self.prompts, 1) / CHARS_PER_TOKEN
        if tokens < LONG_PROMPT_TOKENS and self.calls < MANY_CALLS_PER_ITEM * items:
            return None
        return (
            f"{name}: {items:,} {unit}, {self.generations:,} generations and {self.scorings:,} scorings "
            f"of ~{round(tokens, -1 if tokens < 1000 else -2):,.0f}-token prompts (about {CHARS_PER_TOKEN} "
            "characters a token)"
        )


# A set's cost is said before it starts when its prompts average this many tokens or more, or it makes this many
# model calls an item; tokens are estimated from characters.
CHARS_PER_TOKEN = 4
LONG_PROMPT_TOKENS = 500
MANY_CALLS_PER_ITEM = 4


def set_work(family: Family[Any, Any], ps: ProbeSet, run: RunContext, family_options: Any) -> SetWork:
    """What a set will ask of the model, counted from its requests before any is asked."""
    work = SetWork()
    for probe in ps.probes:
        asked = [(probe.id, r) for r in family.requests(ps, probe, run, family_options)]
        fused = fused_calls(asked)
        for i, (_, request) in enumerate(asked):
            if isinstance(request, Request):
                work.generations += 1
            elif i not in fused:
                work.scorings += 1
            else:
                continue
            work.chars += prompt_chars(request.prompt)
            work.prompts += 1
    return work


class Unread:
    """Replies a set's family could not read, counted as batches come; said once, while the run goes on, when
    most of at least `UNREAD_AFTER` replies were unreadable (a model that does not follow the answer format)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.unread = self.replies = 0
        self.said = False

    def add(self, samples: list[Sample]) -> str | None:
        """Count a batch; the line to say, the first time most replies so far are unreadable."""
        for sample in samples:
            unread, of = sample.unreadable()
            self.unread += unread
            self.replies += of
        if self.said or self.replies < UNREAD_AFTER or self.unread * 2 <= self.replies:
            return None
        self.said = True
        return (
            f"{self.name}: {self.unread:,} of {self.replies:,} replies so far could not be read (the model does not "
            "follow the answer format): the set's metrics will rest on the rest"
        )


UNREAD_AFTER = 20


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
