"""The fairness suite: counterfactual gender-income pairs (`pairwise` detector) and professional bias (`trigger`).

Prompting: chat with the model's template when it has one (DecodingTrust's system line for the
DecodingTrust prompt style; Vijil's prompt is one user turn), greedy, at most 20 new tokens as
DecodingTrust's zero-shot Adult setting uses (`--max-new-tokens` overrides it when changed from
its default). Suite options (`-o key=value`): `parser=fairprobe|decodingtrust` (how a reply is
read as yes/no) and `judge=MODEL_SPEC` (an LLM that decides whether the two replies of a pair make
the same prediction; its verdict then decides each pair, the parser's is kept beside it).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from fairprobe.detectors.answers import compare_answers, judge_pair, parse_answer
from fairprobe.detectors.trigger import detect_referent
from fairprobe.metrics.fairness import decodingtrust_metrics, pair_metrics, professional_metrics
from fairprobe.metrics.intersectional import age_band, intersectional_metrics, slice_grid, slice_label, slice_note
from fairprobe.metrics.stats import proportion
from fairprobe.metrics.they_control import they_control_metrics
from fairprobe.models import ModelBackend, load_model
from fairprobe.models.base import Completion, GenerationConfig, Prompt
from fairprobe.probes.singular_they import they_prompt
from fairprobe.records import ChatMessage, MetricValue, Probe, ProbeSet, Sample, SetResult, SubsetResult
from fairprobe.suites.base import Request, Suite, register_suite, summarize_by_subset

if TYPE_CHECKING:
    from fairprobe.runner import RunOptions

MAX_NEW_TOKENS = 20


def suite_option(options: RunOptions, key: str, default: str | None = None) -> str | None:
    """A fairness suite option from `-o key=value` (probe options carry them)."""
    value = options.probe_options.get(key, default)
    return None if value is None else str(value)


def _generation(options: RunOptions) -> GenerationConfig:
    gen = options.generation
    if gen.max_new_tokens == GenerationConfig().max_new_tokens:
        return gen.model_copy(update={"max_new_tokens": MAX_NEW_TOKENS})
    return gen


def chat_prompt(text: str, system: str | None) -> Prompt:
    """A user turn (after an optional system turn); backends without a chat template join the contents."""
    messages = [ChatMessage(role="system", content=system)] if system else []
    return [*messages, ChatMessage(role="user", content=text)]


def _requests(ps: ProbeSet, probe: Probe, options: RunOptions) -> list[Request]:
    if ps.kind == "pairs":
        system = probe.meta.get("system")
        return [
            Request("original", chat_prompt(probe.meta["prompt_original"], system)),
            Request("flipped", chat_prompt(probe.meta["prompt_flipped"], system)),
        ]
    requests = [Request("response", chat_prompt(probe.prompt, None))]
    control = they_control_prompt(probe)
    if control is not None:
        requests.append(Request("they", chat_prompt(control, None), optional=True))
    return requests


def they_control_prompt(probe: Probe) -> str | None:
    """The singular-"they" version of an ambiguous-pronoun prompt (None for WinoBias, whose referent is known)."""
    if probe.meta.get("winobias") or "pronoun" not in probe.meta:
        return None
    return they_prompt(probe.prompt, probe.meta["pronoun"])


@lru_cache(maxsize=4)
def judge_backend(spec: str) -> ModelBackend:
    """The judge model of a spec, loaded once per process."""
    return load_model(spec)


def pair_sample(ps: ProbeSet, probe: Probe, original: str, flipped: str, options: RunOptions) -> Sample:
    """Score one counterfactual pair from its two reply texts."""
    mode = suite_option(options, "parser", "fairprobe") or "fairprobe"
    a, b = parse_answer(original, mode), parse_answer(flipped, mode)
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
    judge = suite_option(options, "judge")
    if judge:
        verdict, raw = judge_pair(judge_backend(judge), original, flipped)
        fields.update(judge_verdict=verdict, judge_reply=raw)
    meta = probe.meta
    # The record's race and age (intersectional slices), after the fields of the first release.
    fields.update(race=meta["record"].get("race"), age=meta["record"].get("age"))
    return Sample(
        set=ps.name,
        id=probe.id,
        prompt=probe.prompt,
        subsets=probe.subsets,
        verdict=verdict,
        hit=verdict == "differ",
        label=meta["label"],
        sex_original=meta["sex_original"],
        self_contradictory=meta["self_contradictory"],
        **fields,
    )


def they_fields(probe: Probe, they_response: str) -> dict[str, Any]:
    """The "they" control of one prompt: its reply, the occupation it names, and what pairs it with the prompt."""
    meta = probe.meta
    control = they_control_prompt(probe) or ""
    verdict = detect_referent(
        they_response, meta["male_stereotyped"], meta["female_stereotyped"], meta["biased_answer"], prompt=control
    )
    frame = meta.get("template_id")
    return {
        "pronoun": meta["pronoun"],
        "order": meta["order"],
        "frame": str(frame) if frame is not None else f"{meta['male_stereotyped']}/{meta['female_stereotyped']}",
        "male_stereotyped": meta["male_stereotyped"],
        "female_stereotyped": meta["female_stereotyped"],
        "they_response": they_response,
        "they_referent": verdict.referent,
        "they_status": verdict.status,
    }


def coreference_sample(
    ps: ProbeSet, probe: Probe, response: str, options: RunOptions, they_response: str | None = None
) -> Sample:
    """Score one professional-bias reply (and its singular-"they" control when it was asked)."""
    meta = probe.meta
    action = probe.prompt.rsplit("', who ", 1)[-1].rstrip("?") if "', who " in probe.prompt else None
    verdict = detect_referent(
        response,
        meta["male_stereotyped"],
        meta["female_stereotyped"],
        meta["biased_answer"],
        prompt=probe.prompt,
        action=None if action is None or action.startswith("does ") else action,
    )
    return Sample(
        set=ps.name,
        id=probe.id,
        prompt=probe.prompt,
        subsets=probe.subsets,
        response=response,
        referent=verdict.referent,
        status=verdict.status,
        hit=verdict.hit,
        reason=verdict.reason,
        biased_answer=meta["biased_answer"],
        anti_stereotypical_answer=meta["anti_stereotypical_answer"],
        correct_answer=meta.get("correct_answer"),
        winobias=meta.get("winobias"),
        **(they_fields(probe, they_response) if they_response is not None else {}),
    )


def _sample(ps: ProbeSet, probe: Probe, replies: dict[str, Completion], options: RunOptions) -> Sample:
    if ps.kind == "pairs":
        sample = pair_sample(ps, probe, replies["original"].text, replies["flipped"].text, options)
    else:
        they = replies.get("they")
        sample = coreference_sample(ps, probe, replies["response"].text, options, they.text if they else None)
    errors = [r.error for r in replies.values() if r.error]
    if errors:
        sample.error = "; ".join(errors)  # type: ignore[attr-defined]
    return sample


def _pair_set_metrics(samples: list[Sample]) -> dict[str, MetricValue]:
    get = lambda key: [getattr(s, key) for s in samples]  # noqa: E731
    metrics = pair_metrics(get("verdict"), get("sex_original"), get("answer_original"))
    metrics.update(decodingtrust_metrics(get("answer_original"), get("label"), get("sex_original")))
    refusals = sum(1 for s in samples if s.refusal_original or s.refusal_flipped)  # type: ignore[attr-defined]
    metrics["refusal_share"] = proportion(refusals, len(samples))
    metrics["self_contradictory_share"] = proportion(sum(1 for s in samples if s.self_contradictory), len(samples))  # type: ignore[attr-defined]
    return metrics


def _coreference_metrics(samples: list[Sample]) -> dict[str, MetricValue]:
    get = lambda key: [getattr(s, key) for s in samples]  # noqa: E731
    kinds = get("winobias")
    metrics = professional_metrics(
        get("referent"),
        get("biased_answer"),
        get("anti_stereotypical_answer"),
        correct=get("correct_answer") if any(kinds) else None,
        kinds=kinds if any(kinds) else None,
    )
    if all(getattr(s, "they_status", None) is not None for s in samples):
        first = [s.male_stereotyped if s.order == "male_first" else s.female_stereotyped for s in samples]  # type: ignore[attr-defined]
        metrics.update(
            they_control_metrics(
                get("pronoun"),
                get("frame"),
                get("referent"),
                get("they_referent"),
                get("female_stereotyped"),
                get("male_stereotyped"),
                first,
            )
        )
    return metrics


def summarize_samples(ps: ProbeSet, samples: list[Sample]) -> SetResult:
    """Metrics of a fairness set, overall and per subset (sex/label for pairs, pronoun/order for prompts).

    Pairs whose samples carry race and age also get the intersectional slices (sex x race, sex x age band)
    and the DP/EO differences over them.
    """
    if ps.kind != "pairs":
        return summarize_by_subset(ps, samples, _coreference_metrics)
    result = summarize_by_subset(ps, samples, _pair_set_metrics)
    if samples and all(getattr(s, "race", None) is not None for s in samples):
        add_intersectional(result, samples)
    return result


def add_intersectional(result: SetResult, samples: list[Sample]) -> None:
    """Per-slice metrics (sex x race, sex x age band; empty and small slices flagged) and the DP/EO differences."""
    sexes = [str(s.sex_original) for s in samples]  # type: ignore[attr-defined]
    axes = {"race": [str(s.race) for s in samples], "age": [age_band(s.age) for s in samples]}  # type: ignore[attr-defined]
    for axis, values in axes.items():
        for sex, value in slice_grid(sexes, values):
            members = [s for s, x, v in zip(samples, sexes, values, strict=True) if x == sex and v == value]
            result.subsets[slice_label(axis, sex, value)] = SubsetResult(
                n=len(members), metrics=_pair_set_metrics(members) if members else {}, note=slice_note(len(members))
            )
    answers = [str(s.answer_original) for s in samples]  # type: ignore[attr-defined]
    result.metrics.update(intersectional_metrics(answers, [str(s.label) for s in samples], sexes, axes))  # type: ignore[attr-defined]


def _summarize(ps: ProbeSet, samples: list[Sample], options: RunOptions) -> SetResult:
    return summarize_samples(ps, samples)


FAIRNESS = register_suite(
    Suite(
        name="fairness",
        needs_word_probs=False,
        generation=_generation,
        requests=_requests,
        sample=_sample,
        summarize=_summarize,
    )
)
