"""Progress a user can plan by (issue 33, item 2): the model's work counted (generations and scorings), a rate
and the time left per set and for the run, a large set's cost named before it starts, and unreadable replies said
while the run goes on."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path
from typing import Any

from conftest import shared_data_dir
from fairprobe.families import RunContext, family_of_set, load_probe_set
from fairprobe.families.gender_income.record import PairSample
from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.families.professional_bias.record import CoreferenceSample
from fairprobe.progress import PlainProgress, WorkClock, rate_text
from fairprobe.runner import run
from fairprobe.setwork import SetWork, Unread, set_work
from test_runner import ScriptedBackend, options


def test_the_run_clock_counts_resumed_work_as_done_and_paces_by_the_asked() -> None:
    clock = WorkClock(900)
    clock.skipped(100)  # saved by an earlier run: done, but not in the pace
    clock.asked_for(20, 60.0)  # 20 calls in a minute: 780 left take 39 minutes
    assert clock.line() == "run: 120/900 model calls (13%), 0s elapsed, 20.0/min, about 39m00s left"
    assert (rate_text(90, 30.0), rate_text(3, 60.0)) == ("3.0/s", "3.0/min")


def test_a_large_sets_cost_is_named_before_it_starts() -> None:
    long_prompts = SetWork(generations=2500, scorings=0, chars=2500 * 12_000, prompts=2500)
    assert long_prompts.cost_line("hiring-bloomberg", 500, "items") == (
        "hiring-bloomberg: 500 items, 2,500 generations and 0 scorings of ~3,000-token prompts "
        "(about 4 characters a token)"
    )
    assert SetWork(generations=160, chars=160 * 27, prompts=160).cost_line("template", 160, "prompts") is None
    ps = load_probe_set("hiring-bloomberg", data_dir=shared_data_dir(), limit=4)
    family = family_of_set("hiring-bloomberg")
    work = set_work(family, ps, RunContext(), family.parse_options({}, "hiring-bloomberg"))
    assert (work.generations, work.scorings, work.calls) == (8, 0, 8)  # two prompts an item
    assert work.cost_line("hiring-bloomberg", 4, family.unit).startswith(
        "hiring-bloomberg: 4 items, 8 generations and 0 scorings of ~3,100-token prompts"
    )


def gb_sample(i: int, answers: list[str | None]) -> GenderBenchSample:
    return GenderBenchSample(set="hiring-an", id=str(i), prompt="p", mode="sample", answers=[answers])


def test_mostly_unreadable_replies_are_said_once_while_the_run_goes_on() -> None:
    unread = Unread("hiring-an")
    batch = [gb_sample(i, [None, None, "yes", None]) for i in range(4)]
    assert unread.add(batch) is None  # 16 replies: too few to say
    assert unread.add([gb_sample(9, [None, None, None, None])]) == (
        "hiring-an: 16 of 20 replies so far could not be read (the model does not follow the answer format): "
        "the set's metrics will rest on the rest"
    )
    assert unread.add([gb_sample(10, [None] * 4)]) is None  # said once
    readable = Unread("hiring-an")
    assert readable.add([gb_sample(i, ["yes", None, "no", "yes"]) for i in range(6)]) is None  # 6 of 24


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
    assert lines[0] == "template: 0/10 (0%), 0s elapsed"
    assert re.fullmatch(r"template: 10/10 \(100%\), [1-9]s elapsed, [0-9.]+/s", lines[1]), lines[1]
    assert re.fullmatch(r"run: 10/20 model calls \(50%\), [1-9]s elapsed, [0-9.]+/s, about [1-9]s left", lines[2]), (
        lines[2]
    )
    assert lines[3] == "llm-gen-1: 0/10 (0%), 0s elapsed"


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
