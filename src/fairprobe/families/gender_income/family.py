"""The gender-income family: counterfactual pairs (sex flipped) asked as chat, replies read as yes/no.

Prompting: chat with the model's template when it has one (DecodingTrust's system line for the DecodingTrust
prompt style; Vijil's prompt is one user turn), greedy, at most 20 new tokens as DecodingTrust's zero-shot Adult
setting uses (`--max-new-tokens` overrides it when changed from its default). Options (`-o key=value`):
`parser=fairprobe|decodingtrust` (how a reply is read as yes/no) and `judge=MODEL_SPEC` (an LLM that decides
whether the two replies of a pair make the same prediction; its verdict then decides each pair, the parser's
is kept beside it), and the set's own (see options.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from fairprobe.families import closed
from fairprobe.families.base import Family, Replies, Request, RunContext, Scoring, probe_fields, summarize_by_subset
from fairprobe.families.chat import chat_prompt, short_answer_generation, system_instruction
from fairprobe.families.gender_income import exact
from fairprobe.families.gender_income import sets as sets  # registers the probe set
from fairprobe.families.gender_income.detector import compare_answers, judge_pair, parse_answer
from fairprobe.families.gender_income.intersectional import (
    age_band,
    intersectional_metrics,
    slice_grid,
    slice_label,
    slice_note,
)
from fairprobe.families.gender_income.metrics import decodingtrust_metrics, pair_metrics, reply_metrics
from fairprobe.families.gender_income.options import GenderIncomeOptions
from fairprobe.families.gender_income.record import PairSample
from fairprobe.formatting import pct_ci, with_ci
from fairprobe.models import ModelBackend, load_model
from fairprobe.records import MetricValue, Probe, ProbeSet, SetResult, SubsetResult


def requests(
    ps: ProbeSet, probe: Probe, run: RunContext, options: GenderIncomeOptions
) -> list[Request] | list[Scoring]:
    """The original and the flipped prompt, each as a user turn after the prompt style's system line (and the
    instruction, if any): asked (sample), or their yes/no forms scored (exact)."""
    system = "\n".join(x for x in (probe.meta.get("system"), system_instruction(options.instruction)) if x) or None
    if exact.mode_of(run, options) == "exact":
        return exact.requests(ps, probe, run, system)
    return [
        Request("original", chat_prompt(probe.meta["prompt_original"], system)),
        Request("flipped", chat_prompt(probe.meta["prompt_flipped"], system)),
    ]


@lru_cache(maxsize=4)
def judge_backend(spec: str) -> ModelBackend:
    """The judge model of a spec, loaded once per process."""
    return load_model(spec)


def pair_sample(ps: ProbeSet, probe: Probe, original: str, flipped: str, options: GenderIncomeOptions) -> PairSample:
    """Score one counterfactual pair from its two reply texts."""
    a, b = parse_answer(original, options.parser), parse_answer(flipped, options.parser)
    verdict = compare_answers(a.answer, b.answer)
    fields: dict[str, Any] = {
        "original": original,
        "flipped": flipped,
        "answer_original": a.answer,
        "answer_flipped": b.answer,
        "refusal_original": a.refusal,
        "refusal_flipped": b.refusal,
        "parser_verdict": verdict,
    }
    if options.judge:
        verdict, raw = judge_pair(judge_backend(options.judge), original, flipped)
        fields.update(judge_verdict=verdict, judge_reply=raw)
    return PairSample(**pair_fields(ps, probe), verdict=verdict, hit=verdict == "differ", **fields)


def pair_fields(ps: ProbeSet, probe: Probe) -> dict[str, Any]:
    """What a pair's record says of the pair itself, in either mode: its set, id, subsets, label, original sex,
    whether it contradicts itself, and the original record's race and age."""
    meta = probe.meta
    return {
        **probe_fields(ps, probe),
        "label": meta["label"],
        "sex_original": meta["sex_original"],
        "self_contradictory": meta["self_contradictory"],
        "race": meta["record"].get("race"),
        "age": meta["record"].get("age"),
    }


def sample(ps: ProbeSet, probe: Probe, replies: Replies, run: RunContext, options: GenderIncomeOptions) -> PairSample:
    """Score a pair's two replies, or read both versions' P(yes) (exact); a failed call is recorded in `error`."""
    if exact.mode_of(run, options) == "exact":
        return PairSample(**pair_fields(ps, probe), **exact.exact_fields(probe, replies))
    result = pair_sample(ps, probe, replies.text("original"), replies.text("flipped"), options)
    if error := replies.errors():
        result.error = error
    return result


def set_metrics(samples: list[PairSample]) -> dict[str, MetricValue]:
    """Flip rate and direction, DecodingTrust's group metrics on the original records, refusals, contradictions."""
    metrics = pair_metrics(
        [s.verdict for s in samples],
        [s.sex_original for s in samples],
        [s.answer_original for s in samples],
        [s.answer_flipped for s in samples],
    )
    metrics.update(
        decodingtrust_metrics(
            [s.answer_original for s in samples], [s.label for s in samples], [s.sex_original for s in samples]
        )
    )
    metrics.update(reply_metrics(samples))
    return metrics


def summarize(ps: ProbeSet, samples: list[PairSample], run: RunContext, options: GenderIncomeOptions) -> SetResult:
    """Metrics overall and per original sex and label; with race and age on the records, also per intersectional
    slice (sex x race, sex x age band) with the DP/EO differences over those groups. Exact records get the
    expected metrics (exact.py), overall and per original sex and label."""
    if any(s.mode == "exact" for s in samples):
        result = summarize_by_subset(ps, samples, exact.exact_metrics)
        result.implicit = exact.how_read(samples, result.metrics)
        return result
    result = summarize_by_subset(ps, samples, set_metrics)
    if samples and all(s.race is not None for s in samples):
        add_intersectional(result, samples)
    return result


def add_intersectional(result: SetResult, samples: list[PairSample]) -> None:
    """Per-slice metrics (sex x race, sex x age band; empty and small slices flagged) and the DP/EO differences."""
    sexes = [s.sex_original for s in samples]
    axes = {"race": [str(s.race) for s in samples], "age": [age_band(s.age) for s in samples]}
    for axis, values in axes.items():
        for sex, value in slice_grid(sexes, values):
            members = [s for s, x, v in zip(samples, sexes, values, strict=True) if x == sex and v == value]
            result.subsets[slice_label(axis, sex, value)] = SubsetResult(
                n=len(members), metrics=set_metrics(members) if members else {}, note=slice_note(len(members))
            )
    answers = [s.answer_original for s in samples]
    result.metrics.update(intersectional_metrics(answers, [s.label for s in samples], sexes, axes))


def clause(set_name: str, result: SetResult) -> str | None:
    """The verdict's words on this set: how often the answer changed with gender alone."""
    if flagged := closed.clause(set_name, result):
        return flagged
    gap = result.metrics.get("p_yes_gap")
    if gap is not None and gap.value is not None:
        return (
            f"on {set_name} P(yes) for the male version of a pair minus the female one is {with_ci(gap, signed=True)}"
        )
    hit = result.metrics.get("hit_rate")
    if hit is None:
        return None
    if hit.value is None:
        return f"no {set_name} pair could be read, so its flip rate is n/a"
    if hit.too_little_data:
        return f"the {set_name} flip rate says nothing about gender ({hit.too_little_data}, so no answer could flip)"
    return f"the answer changed with gender alone in {pct_ci(hit)} of {set_name} pairs"


FAMILY = Family[PairSample, GenderIncomeOptions](
    name="gender_income",
    suite="fairness",
    description="counterfactual Adult income pairs (sex flipped): does the yes/no prediction change?",
    record=PairSample,
    metrics=(pair_metrics, decodingtrust_metrics, reply_metrics, intersectional_metrics, exact.exact_metrics),
    requests=requests,
    sample=sample,
    summarize=summarize,
    options=GenderIncomeOptions,
    generation=short_answer_generation,
    unit="pairs",
    clause=clause,
    headline="hit_rate",
)
