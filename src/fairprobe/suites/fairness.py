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
from fairprobe.metrics.stats import proportion
from fairprobe.models import ModelBackend, load_model
from fairprobe.models.base import Completion, GenerationConfig, Prompt
from fairprobe.records import ChatMessage, MetricValue, Probe, ProbeSet, Sample, SetResult
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
    return [Request("response", chat_prompt(probe.prompt, None))]


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


def coreference_sample(ps: ProbeSet, probe: Probe, response: str, options: RunOptions) -> Sample:
    """Score one professional-bias reply."""
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
    )


def _sample(ps: ProbeSet, probe: Probe, replies: dict[str, Completion], options: RunOptions) -> Sample:
    if ps.kind == "pairs":
        sample = pair_sample(ps, probe, replies["original"].text, replies["flipped"].text, options)
    else:
        sample = coreference_sample(ps, probe, replies["response"].text, options)
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
    return professional_metrics(
        get("referent"),
        get("biased_answer"),
        get("anti_stereotypical_answer"),
        correct=get("correct_answer") if any(kinds) else None,
        kinds=kinds if any(kinds) else None,
    )


def summarize_samples(ps: ProbeSet, samples: list[Sample]) -> SetResult:
    """Metrics of a fairness set, overall and per subset (sex/label for pairs, pronoun/order for prompts)."""
    return summarize_by_subset(ps, samples, _pair_set_metrics if ps.kind == "pairs" else _coreference_metrics)


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
