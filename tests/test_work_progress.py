"""Progress a user can plan by (issue 33, item 2): the model's work counted (generations and scorings), a rate
and the time left per set and for the run, a large set's cost named before it starts, and unreadable replies said
while the run goes on."""

from __future__ import annotations

import io
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import shared_data_dir
from fairprobe.families import RunContext, family_of_set, load_probe_set
from fairprobe.families.gender_income.record import PairSample
from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.families.professional_bias.record import CoreferenceSample
from fairprobe.models.api import open_endpoint
from fairprobe.models.base import Completion, GenerationConfig
from fairprobe.plan import RunPlan
from fairprobe.progress import (
    PlainProgress,
    RichProgress,
    SilentProgress,
    WorkClock,
    answers_came,
    count_text,
    counting_answers,
    rate_text,
    rich_bars,
)
from fairprobe.runfolder import RunWriter
from fairprobe.runner import RunOptions, run, run_set
from fairprobe.setwork import SetWork, Unread, run_clock, set_work
from openai_servers import scripted
from test_runner import ScriptedBackend, options


class FakeClock:
    """A clock that moves only when told: what the progress measures is then known exactly."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_the_run_clock_counts_resumed_work_as_done_and_paces_by_the_asked() -> None:
    now = FakeClock()
    clock = WorkClock(900, now=now)
    clock.skipped(100)  # saved by an earlier run: done, but not in the pace
    assert clock.line() == "run: 100/900 model calls (11%), 0s"  # no pace measured: no rate, no time left
    clock.asked_for(20, 60.0)  # 20 calls in a minute: 780 left take 39 minutes
    now.t += 75
    assert clock.line() == "run: 120/900 model calls (13%), 1m15s, 20.0/min, ~39m00s left"
    assert (rate_text(90, 30.0), rate_text(3, 60.0)) == ("3.0/s", "3.0/min")
    assert [count_text(n) for n in (950, 12_345, 1_500_000, 2.54, 25.0)] == ["950", "12.3k", "1.5M", "2.5", "25"]
    clock.asked_for(80, 120.0, (160_000, 8_000))  # tokens said: the rate is theirs over the 120 s that said them
    assert clock.line() == "run: 200/900 model calls (22%), 1m15s, 1.4k tok/s, ~21m00s left"  # 700 calls, 1.8 s each
    assert clock.tokens_line("hiring-bloomberg") == ("hiring-bloomberg: 160k prompt tokens read, 8.0k generated")


def test_a_large_sets_cost_is_named_before_it_starts() -> None:
    long_prompts = SetWork(generations=2500, scorings=0, chars=2500 * 12_000, prompts=2500, new_tokens=300)
    assert long_prompts.cost_line("hiring-bloomberg", 500, "items") == (
        "hiring-bloomberg: 500 items, 2,500 generations, ~3,000-token prompts, up to 300 new tokens a reply"
    )
    many = SetWork(scorings=600, chars=600 * 1080, prompts=600)
    assert (
        many.cost_line("diversity-med-qa", 100, "items")
        == "diversity-med-qa: 100 items, 600 scorings, ~270-token prompts"
    )
    assert SetWork(generations=160, chars=160 * 27, prompts=160).cost_line("template", 160, "prompts") is None
    ps = load_probe_set("hiring-bloomberg", data_dir=shared_data_dir(), limit=4)
    family = family_of_set("hiring-bloomberg")
    work = set_work(family, ps, RunContext(), family.parse_options({}, "hiring-bloomberg"))
    assert (work.generations, work.scorings, work.calls, work.new_tokens) == (8, 0, 8, 300)  # two prompts an item
    assert work.cost_line("hiring-bloomberg", 4, family.unit) == (
        "hiring-bloomberg: 4 items, 8 generations, ~3,100-token prompts, up to 300 new tokens a reply"
    )


class Seen(SilentProgress):
    """A display that keeps each status it would show (the measured clock's, at every advance) and each note."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.label = ""
        self.clock: WorkClock | None = None

    def start(self, label: str, total: int) -> None:
        self.label = label

    def measure(self, clock: WorkClock) -> None:
        self.clock = clock

    def advance(self, n: int) -> None:
        assert self.clock is not None
        self.events.append(self.clock.status(self.label))

    def note(self, text: str) -> None:
        self.events.append(f"note: {text}")


class TokenBackend(ScriptedBackend):
    """The scripted model saying its tokens (7 prompt tokens read and 3 made a reply), each call taking 2 s of
    the fake clock."""

    def __init__(self, now: FakeClock) -> None:
        super().__init__()
        self.now = now

    def generate(self, *args: Any, **kwargs: Any) -> list[Completion]:
        self.now.t += 2.0
        return [replace(c, prompt_tokens=7, new_tokens=3) for c in super().generate(*args, **kwargs)]


def template_set(limit: int) -> tuple[Any, Any]:
    return load_probe_set("template", data_dir=shared_data_dir(), limit=limit), family_of_set("template")


def test_progress_counts_the_backends_tokens_and_moves_each_batch_with_a_rate_and_time_left() -> None:
    now, seen = FakeClock(), Seen()
    ps, family = template_set(15)
    opts = options(None, limit=15, batch_size=5)
    plan = RunPlan.build(opts)
    work = set_work(family, ps, plan.context, plan.bound("template").options)
    clock = run_clock([work, work], now)  # the run: this set and another like it
    run_set(TokenBackend(now), plan.bound("template"), ps, plan, None, seen, clock)
    # three batches of 5 generations (the scores ride on them), 2 s each: 50 tokens in 2 s, 25 tokens a second
    assert seen.events == [
        "template: 5/15 (33%), 2s, 25 tok/s, ~4s left",
        "template: 10/15 (67%), 4s, 25 tok/s, ~2s left",
        "template: 15/15 (100%), 6s, 25 tok/s",
        "note: template: 105 prompt tokens read, 45 generated",
    ]
    assert (clock.read, clock.made, clock.asking) == (105, 45, 6.0)
    assert clock.line() == "run: 15/30 model calls (50%), 6s, 25 tok/s, ~6s left"


def test_the_runs_time_left_paces_each_sets_calls_by_their_expected_tokens() -> None:
    now = FakeClock()
    scorings = SetWork(scorings=100, chars=100 * 400, prompts=100)  # 100 tokens a call
    generations = SetWork(generations=10, chars=10 * 400, prompts=10, new_tokens=300)  # 100 + 300 tokens a call
    assert (scorings.weight, generations.weight) == (100.0, 400.0)
    clock = run_clock([scorings, generations], now)
    clock.asked_for(100, 100.0, None, scorings.weight)  # 10,000 tokens' work in 100 s: 4,000 left take 40 s
    assert clock.line() == "run: 100/110 model calls (91%), 0s, 1.0/s, ~40s left"  # not the 10 s its calls say


class PassingBackend(TokenBackend):
    """The token-saying model answering each call in passes of two prompts, 1 s of the fake clock each, as a local
    model splits a batch (its batch size, its memory budget)."""

    def generate(self, prompts: list[Any], *args: Any, **kwargs: Any) -> list[Completion]:
        out = []
        for start in range(0, len(prompts), 2):
            part = super().generate(prompts[start : start + 2], *args, **kwargs)
            self.now.t -= 1.0  # TokenBackend's 2 s a call: 1 s a pass here
            answers_came(len(part), (7 * len(part), 3 * len(part)))
            out.extend(part)
        return out


def test_a_batch_answered_in_passes_moves_the_progress_at_each_pass() -> None:
    now, seen = FakeClock(), Seen()
    ps, _ = template_set(10)
    plan = RunPlan.build(options(None, limit=10, batch_size=5))
    run_set(PassingBackend(now), plan.bound("template"), ps, plan, None, seen, WorkClock(10, now=now))
    # batches of 5 in passes of 2, 2 and 1 prompts, 1 s each: 20 tokens a second for the passes of two
    assert seen.events == [
        "template: 2/10 (20%), 1s, 20 tok/s, ~4s left",
        "template: 4/10 (40%), 2s, 20 tok/s, ~3s left",
        "template: 5/10 (50%), 3s, 17 tok/s, ~3s left",
        "template: 7/10 (70%), 4s, 18 tok/s, ~2s left",
        "template: 9/10 (90%), 5s, 18 tok/s, ~1s left",
        "template: 10/10 (100%), 6s, 17 tok/s",
        "note: template: 70 prompt tokens read, 30 generated",
    ]


def test_a_servers_answers_move_the_progress_one_by_one_with_their_usage() -> None:
    told: list[tuple[int, tuple[int, int] | None]] = []
    with scripted() as (url, _), counting_answers(lambda n, tokens: told.append((n, tokens))):
        model = open_endpoint("test", base_url=url, implicit="topk", concurrency=2)
        replies = model.generate([f"p{i}" for i in range(3)], GenerationConfig(max_new_tokens=7))
    # the test server's usage says the tokens it made (every one asked), not those it read
    assert told == [(1, (0, 7))] * 3
    assert [(r.prompt_tokens, r.new_tokens) for r in replies] == [(None, 7)] * 3


def test_a_resumed_sets_saved_batches_count_as_done_not_in_the_pace(tmp_path: Path) -> None:
    now = FakeClock()
    ps, _ = template_set(15)
    plan = RunPlan.build(options(tmp_path / "r", limit=15, batch_size=5))
    bound = plan.bound("template")
    writer = RunWriter(tmp_path / "r", "fp")
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C in the second batch: the first is saved
        run_set(ScriptedBackend(interrupt_on=2), bound, ps, plan, writer)
    writer.close()
    seen = Seen()
    run_set(TokenBackend(now), bound, ps, plan, RunWriter(tmp_path / "r", "fp"), seen, WorkClock(15, now=now))
    assert seen.events[:3] == [
        "template: 5/15 (33%), 0s",  # the first batch was saved: done at once, no pace yet
        "template: 10/15 (67%), 2s, 25 tok/s, ~2s left",
        "template: 15/15 (100%), 4s, 25 tok/s",
    ]


def test_log_lines_without_a_terminal_one_an_update() -> None:
    now, stream = FakeClock(), io.StringIO()
    ps, _ = template_set(10)
    plain = PlainProgress(stream, heartbeat=0.0)  # a line at every update (and no heartbeat thread)
    plan = RunPlan.build(options(None, limit=10, batch_size=5))
    run_set(TokenBackend(now), plan.bound("template"), ps, plan, None, plain, WorkClock(10, now=now))
    lines = [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]
    assert lines == [
        "template: 0/10 (0%), 0s",
        "template: 5/10 (50%), 2s, 25 tok/s, ~2s left",
        "template: 10/10 (100%), 4s, 25 tok/s",
        "template: 70 prompt tokens read, 30 generated",
    ]
    assert all(len(line) <= 80 for line in stream.getvalue().splitlines())


def test_the_terminal_bars_fit_80_columns() -> None:
    now, out = FakeClock(), io.StringIO()
    console = Console(file=out, width=80, force_terminal=False, color_system=None)
    bars = rich_bars(console)
    shown = RichProgress(bars)
    clock = WorkClock(4000, now=now)
    shown.start("hiring-bloomberg", 4000)
    shown.measure(clock)
    clock.asked_for(40, 130.0, (124_000, 12_000))
    now.t += 130
    shown.advance(40)
    console.print(bars.make_tasks_table(bars.tasks))
    row = out.getvalue().rstrip("\n")
    assert "\n" not in row and len(row) <= 80, row
    assert row.startswith("hiring-bloomberg ") and row.endswith(" 40/4000 0:00:00 ~3h34m 1.0k tok/s"), row


def gb_sample(i: int, answers: list[str | None]) -> GenderBenchSample:
    return GenderBenchSample(set="hiring-an", id=str(i), prompt="p", mode="sample", answers=[answers])


def test_mostly_unreadable_replies_are_said_once_while_the_run_goes_on() -> None:
    unread = Unread("hiring-an")
    batch = [gb_sample(i, [None, None, "yes", None]) for i in range(4)]
    assert unread.add(batch) is None  # 16 replies: too few to say
    assert unread.add([gb_sample(9, [None, None, None, None])]) == (
        "hiring-an: 16 of 20 replies so far (80%) could not be read (the model does not follow the answer format): "
        "the set's metrics rest on the rest"
    )
    assert unread.add([gb_sample(10, [None] * 4)]) is None  # said once
    assert unread.end() is None
    readable = Unread("hiring-an")
    assert readable.add([gb_sample(i, ["yes", None, "no", "yes"]) for i in range(6)]) is None  # 6 of 24
    assert readable.end() is None
    few = Unread("hiring-an")
    assert few.add([gb_sample(1, [None, None, "no"])]) is None  # 3 replies: too few to say while running
    assert few.end() == (
        "hiring-an: 2 of 3 replies (67%) could not be read (the model does not follow the answer format): "
        "the set's metrics rest on the rest"
    )


def hiring_an_run(limit: int) -> list[str]:
    """The progress events of a hiring-an run whose replies never name a decision, in batches of 8."""
    now, seen = FakeClock(), Seen()
    ps = load_probe_set("hiring-an", data_dir=shared_data_dir(), limit=limit)
    opts = RunOptions(suite="genderbench", probes=["hiring-an"], limit=limit, batch_size=8, data_dir=shared_data_dir())
    plan = RunPlan.build(opts)
    run_set(TokenBackend(now), plan.bound("hiring-an"), ps, plan, None, seen, WorkClock(limit, now=now))
    return [e.split(",")[0] if not e.startswith("note") else e for e in seen.events]


def test_the_unreadable_line_comes_once_after_the_batch_that_makes_them_most() -> None:
    line = "could not be read (the model does not follow the answer format): the set's metrics rest on the rest"
    assert hiring_an_run(30) == [
        "hiring-an: 8/30 (27%)",
        "hiring-an: 16/30 (53%)",
        "hiring-an: 24/30 (80%)",
        f"note: hiring-an: 24 of 24 replies so far (100%) {line}",  # 20 replies or more: said after this batch
        "hiring-an: 30/30 (100%)",
        "note: hiring-an: 210 prompt tokens read, 90 generated",
    ]
    assert hiring_an_run(5)[-1] == f"note: hiring-an: 5 of 5 replies (100%) {line}"  # a small set: at its end


class SlowBackend(ScriptedBackend):
    """The scripted model taking 0.6 s a batch: a set of two batches takes over a second, so it has a pace."""

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.6)
        return super().generate(*args, **kwargs)


def test_a_run_shows_each_sets_rate_and_the_runs_time_left(tmp_path: Path) -> None:
    stream = io.StringIO()
    with PlainProgress(stream) as shown:
        run(options(tmp_path / "r", limit=10, batch_size=5), backend=SlowBackend(), progress=shown)
    lines = [line.split("] ", 1)[1] for line in stream.getvalue().splitlines()]
    assert lines[0] == "template: 0/10 (0%), 0s"
    assert re.fullmatch(r"template: 10/10 \(100%\), [1-9]s, [0-9.]+/s", lines[1]), lines[1]
    assert re.fullmatch(r"run: 10/20 model calls \(50%\), [1-9]s, [0-9.]+/s, ~[1-9]s left", lines[2]), lines[2]
    assert lines[3] == "llm-gen-1: 0/10 (0%), 0s"


def test_the_fairness_families_count_their_unreadable_replies() -> None:
    answers = {"original": "Maybe.", "flipped": "Yes.", "answer_original": "unknown", "answer_flipped": "yes"}
    pair = PairSample.model_validate(
        {"set": "gender-income", "id": "1", "prompt": "p", "verdict": "undetermined", "hit": False, **answers}
        | {"label": ">50K", "sex_original": "Female", "self_contradictory": False, "parser_verdict": "undetermined"}
        | {"refusal_original": False, "refusal_flipped": False}
    )
    assert pair.unreadable() == (1, 2)
    base = {"set": "professional-bias", "id": "1", "prompt": "p", "hit": None, "reason": "r"}
    base |= {"biased_answer": "nurse", "anti_stereotypical_answer": "doctor", "referent": None}
    assert CoreferenceSample(**base, response="Hmm.", status="none").unreadable() == (1, 1)
    assert CoreferenceSample(**base, response="It is ambiguous.", status="ambiguous").unreadable() == (0, 1)


@pytest.mark.slow
def test_the_local_model_says_the_tokens_it_read_and_made(embedded_backend: Any) -> None:
    prompts = ["My friend is a nurse, and", "The engineer who designed the bridge over the river said that"]
    passes: list[tuple[int, tuple[int, int] | None]] = []
    with counting_answers(lambda n, tokens: passes.append((n, tokens))):
        replies = embedded_backend.generate(prompts, GenerationConfig(max_new_tokens=12))
    read = [len(embedded_backend.tokenizer(p).input_ids) for p in prompts]  # each row's own, not the padded width
    assert [r.prompt_tokens for r in replies] == read and read[0] < read[1]
    assert [r.new_tokens for r in replies] == [12, 12]  # greedy continuations that do not end within 12 tokens
    assert passes == [(2, (sum(read), 24))]  # one pass (the batch fits), told as it came
