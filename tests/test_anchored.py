"""Anchored answers: each sampled reply read where it names its option, the options' exact probabilities scored
there; and `auto`, which picks per set exact (options hold at least half the first token's probability) or
anchored. A fake model gives fixed replies and fixed probabilities, so every number is known by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import exact_scores
from fairprobe.families.base import RunContext
from fairprobe.families.closed import ClosedAnswers, read_mass
from fairprobe.families.genderbench import anchored
from fairprobe.models.base import Completion, ModelBackend, ScoreRequest, Scores
from fairprobe.options import RunOptions
from fairprobe.report.verdict import verdict
from fairprobe.runner import read_samples, run

FORMS = ("yes", "Yes", "no", "No")
# The first token's probabilities: direct's options hold 0.3 (anchored), discrimination-tamkin's 0.7 (exact).
FIRST_DIRECT = {"yes": 0.05, "Yes": 0.05, "no": 0.1, "No": 0.1}
FIRST_TAMKIN = {"yes": 0.3, "Yes": 0.1, "no": 0.2, "No": 0.1}
# After a preamble: q_yes = 0.2 / 0.3.
AFTER = {"yes": 0.12, "Yes": 0.08, "no": 0.06, "No": 0.04}
REPLIES = ("The answer is yes.", "I cannot say.", "Yes, I agree.")


def first_table(prompt: Any) -> dict[str, float]:
    """The first token's table of a prompt: direct's prompts ask whether one agrees."""
    return FIRST_DIRECT if "Do you agree" in prompt[-1].content else FIRST_TAMKIN


class ReplyBackend(ModelBackend):
    """Replies REPLIES[r] to the r-th repetition (its place in the call, each prompt asked len(REPLIES) times in a
    row); a continuation `preamble + form` has the first token's probability of `form` where the preamble is
    empty, AFTER's otherwise. Records every seed it was given and every prompt it generated for."""

    name = "replies"
    has_chat_template = True

    def __init__(self) -> None:
        self.seeds: list[int] = []
        self.generated: list[str] = []
        self.scored: list[tuple[str, ...]] = []

    def identity(self) -> dict[str, Any]:
        return {"id": "replies"}

    def generate(self, prompts, config, score=None, seeds=None) -> list[Completion]:
        self.seeds.extend(seeds or [])
        out = []
        for i, prompt in enumerate(prompts):
            self.generated.append(prompt[-1].content)
            wanted = score[i] if score else ()
            scores = exact_scores([first_table(prompt)[c] for c in wanted]) if wanted else None
            out.append(Completion(text=REPLIES[i % len(REPLIES)], scores=scores))
        return out

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        out = []
        for r in requests:
            self.scored.append(r.continuations)
            probs = []
            for text in r.continuations:
                form = next(f for f in sorted(FORMS, key=len, reverse=True) if text.endswith(f))
                table = first_table(r.prompt) if text == form else AFTER
                probs.append(table[form])
            out.append(exact_scores(probs))
        return out


def test_a_reply_naming_its_option_after_a_preamble_is_read_there() -> None:
    replies = [["The correct answer is (b)", "I do not know"]]
    asked = anchored.scorings(["prompt"], replies, [["b", None]], ClosedAnswers.letters(("a", "b", "c")))
    assert [s.key for s in asked] == ["p0r0@"]  # the reply that names no option is not scored
    preamble = "The correct answer is "
    assert asked[0].continuations == tuple(f"{preamble}({x})" for x in ("a", "A", "b", "B", "c", "C"))
    scores = {"p0r0@": exact_scores([0.1, 0.1, 0.3, 0.1, 0.2, 0.2])}
    offsets, read, error = anchored.read(replies, [["b", None]], scores, ClosedAnswers.letters(("a", "b", "c")))
    assert error is None and offsets == [[len(preamble), None]]
    assert read[0][0] == pytest.approx([0.2, 0.4, 0.4]) and read[0][1] is None
    counts, undetected, attempts = anchored.counts(read, 3)
    assert counts[0].tolist() == pytest.approx([0.2, 0.4, 0.4])
    assert undetected.tolist() == [1.0] and attempts.tolist() == [2.0]


def test_anchors_are_where_the_parser_reads_the_option() -> None:
    assert anchored.anchor("So (A) or maybe (b)", "a") == 3
    assert anchored.anchor("Yesterday I said YES.", "yes") == 17  # a whole word only, any case
    assert anchored.anchor("no idea", "yes") is None


def test_auto_picks_per_set_and_anchored_reads_each_reply_where_it_answers(tmp_path: Path) -> None:
    backend = ReplyBackend()
    options = RunOptions(
        suite="genderbench",
        probes=["direct", "discrimination-tamkin"],
        limit=2,
        out=tmp_path,
        probe_options={"repetitions": 3},
        use_cache=False,
    )
    summary = run(options, backend=backend)
    direct, tamkin = summary.results["direct"], summary.results["discrimination-tamkin"]
    # direct: the options hold 0.3 at the first token, so its replies are sampled and read where they answer.
    # Per item: "The answer is yes." -> q_yes = 0.2 / 0.3 after "The answer is "; "I cannot say." undetected;
    # "Yes, I agree." -> q_yes = 0.1 / 0.3 at the start. Expected yes 1, no 1, undetected 1 of 3.
    assert direct.implicit["mode"] == "anchored" and "30%" in direct.implicit["why"]
    assert "under half" in direct.implicit["why"] and "flag" not in direct.implicit
    assert direct.metrics["fail_rate"].value == pytest.approx(0.5)
    assert direct.metrics["undetected_rate_attempts"].value == pytest.approx(1 / 3)
    assert direct.metrics["option_mass"].value == pytest.approx(0.3)
    assert "off_option_share" not in direct.metrics  # not flagged: anchored reads the answers after a preamble
    assert "mostly answers otherwise" not in (direct.metrics["fail_rate"].too_little_data or "")
    # discrimination-tamkin: 0.7 at the first token, read there; nothing generated for it.
    assert tamkin.implicit["mode"] == "exact" and "70%" in tamkin.implicit["why"]
    assert tamkin.metrics["option_mass"].value == pytest.approx(0.7)
    assert all("Do you agree" in text for text in backend.generated)
    # Six replies (two items, three repetitions), each drawn from its own seed.
    assert len(backend.seeds) == 6 and len(set(backend.seeds)) == 6
    records = [r for r in read_samples(tmp_path / "samples.jsonl") if r.set == "direct"]
    assert [r.mode for r in records] == ["anchored", "anchored"]
    first = records[0]
    assert first.anchors == [[14, None, 0]]
    assert np.allclose(first.anchored[0][0], [2 / 3, 1 / 3]) and first.anchored[0][1] is None
    assert np.allclose(first.anchored[0][2], [1 / 3, 2 / 3])
    assert first.reply_text() == "anchored after 'The answer is ': the options' probabilities 0.67, 0.33"
    said = verdict(summary)
    assert "direct: auto: the options hold 30% of the first token's probability (under half)" in said
    assert "discrimination-tamkin: auto" not in said  # read exactly: nothing to flag
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["implicit"]["sets"]["direct"]["mode"] == "anchored"
    assert manifest["implicit"]["sets"]["discrimination-tamkin"]["mode"] == "exact"
    assert read_mass(direct, records) == (
        "Replies sampled and read where each names an option, the options' probabilities scored there; at the "
        "reply's start the options hold 30% (95% CI 30–30%) of the probability (option_mass). Mode chosen by auto: "
        "the options hold 30% of the first token's probability (under half): the replies are sampled and read "
        "where each names an option."
    )


def test_anchored_mode_where_nothing_scores_exactly_is_refused_in_one_line() -> None:
    from fairprobe.errors import ConfigError
    from fairprobe.families import family_of_set, load_probe_set

    family = family_of_set("direct")
    ps = load_probe_set("direct", limit=1, limit_order="first")
    options = family.parse_options({"mode": "anchored"}, "direct")
    served = RunContext(scoring="topk")  # a server told -M implicit=topk
    with pytest.raises(ConfigError) as raised:
        family.requests(ps, ps.probes[0], served, options)
    assert str(raised.value) == (
        "direct: -o mode=anchored scores each reply's options exactly, which a server that gives only top-k "
        "logprobs cannot: use -o mode=sample"
    )


def test_auto_asks_each_scoring_once_without_the_call_cache(tmp_path: Path) -> None:
    """`settle` scores a set's options to pick its mode; the batches take those scores instead of asking again, so
    with no call cache each scoring reaches the model once (exact mode here: 0.7 at the first token)."""

    class Counting(ReplyBackend):
        def __init__(self) -> None:
            super().__init__()
            self.asked: list[tuple[str, tuple[str, ...]]] = []

        def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
            self.asked.extend((json.dumps([m.content for m in r.prompt]), r.continuations) for r in requests)
            return super().loglikelihood(requests)

    backend = Counting()
    options = RunOptions(
        suite="genderbench", probes=["discrimination-tamkin"], limit=3, out=tmp_path, batch_size=2, use_cache=False
    )
    summary = run(options, backend=backend)
    tamkin = summary.results["discrimination-tamkin"]
    assert tamkin.implicit["mode"] == "exact" and tamkin.metrics["option_mass"].value == pytest.approx(0.7)
    records = read_samples(tmp_path / "samples.jsonl")
    assert [len(r.q or []) for r in records] == [3, 3, 3]  # three items, each with three prompts read exactly
    # 3 x 3 = 9 scorings, each asked once: by settle, then taken by the batches (before: 18, each twice).
    assert len(backend.asked) == len(set(backend.asked)) == 9
    assert backend.generated == []
