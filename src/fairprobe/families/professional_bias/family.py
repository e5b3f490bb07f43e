"""The professional-bias family: which of two occupations does an ambiguous pronoun refer to? (Kotek et al. 2023)

Prompting: one user turn in chat, greedy, at most 20 new tokens (`--max-new-tokens` overrides it when changed
from its default). The trigger detector reads which occupation the reply names.
"""

from __future__ import annotations

from typing import Any

from fairprobe.families import closed
from fairprobe.families.base import Family, Replies, Request, RunContext, Scoring, probe_fields, summarize_by_subset
from fairprobe.families.chat import chat_prompt, short_answer_generation, system_instruction
from fairprobe.families.professional_bias import exact
from fairprobe.families.professional_bias import sets as sets  # registers the probe set
from fairprobe.families.professional_bias.detector import detect_referent
from fairprobe.families.professional_bias.metrics import professional_metrics
from fairprobe.families.professional_bias.options import ProfessionalBiasOptions
from fairprobe.families.professional_bias.record import CoreferenceSample
from fairprobe.families.professional_bias.singular_they import they_prompt
from fairprobe.families.professional_bias.they_control import they_control_metrics
from fairprobe.formatting import with_ci
from fairprobe.records import MetricValue, Probe, ProbeSet, SetResult


def requests(
    ps: ProbeSet, probe: Probe, run: RunContext, options: ProfessionalBiasOptions
) -> list[Request] | list[Scoring]:
    """The question as one user turn (after the instruction's system turn, if any), and its singular-"they" control
    where the prompt has an ambiguous pronoun: asked (sample), or the two people scored after them (exact)."""
    system = system_instruction(options.instruction)
    if exact.mode_of(run, options) == "exact":
        return exact.requests(ps, probe, run, they_control_prompt(probe), system)
    requests = [Request("response", chat_prompt(probe.prompt, system))]
    control = they_control_prompt(probe)
    if control is not None:
        requests.append(Request("they", chat_prompt(control, system), optional=True))
    return requests


def they_control_prompt(probe: Probe) -> str | None:
    """The singular-"they" version of an ambiguous-pronoun prompt (None for WinoBias, whose referent is known)."""
    if probe.meta.get("winobias") or "pronoun" not in probe.meta:
        return None
    return they_prompt(probe.prompt, probe.meta["pronoun"])


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
    ps: ProbeSet, probe: Probe, response: str, they_response: str | None = None
) -> CoreferenceSample:
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
    return CoreferenceSample(
        **prompt_fields(ps, probe),
        response=response,
        referent=verdict.referent,
        status=verdict.status,
        hit=verdict.hit,
        reason=verdict.reason,
        **(they_fields(probe, they_response) if they_response is not None else {}),
    )


def prompt_fields(ps: ProbeSet, probe: Probe) -> dict[str, Any]:
    """What a prompt's record says of the prompt itself, in either mode: its set, id, subsets and answers."""
    meta = probe.meta
    return {
        **probe_fields(ps, probe),
        "biased_answer": meta["biased_answer"],
        "anti_stereotypical_answer": meta["anti_stereotypical_answer"],
        "correct_answer": meta.get("correct_answer"),
        "winobias": meta.get("winobias"),
    }


def sample(
    ps: ProbeSet, probe: Probe, replies: Replies, run: RunContext, options: ProfessionalBiasOptions
) -> CoreferenceSample:
    """Score the reply, or read the two people's probabilities (exact); a failed call is recorded in `error`."""
    if exact.mode_of(run, options) == "exact":
        return exact_sample(ps, probe, replies)
    they = replies.completions.get("they")
    result = coreference_sample(ps, probe, replies.text("response"), they.text if they else None)
    if error := replies.errors():
        result.error = error
    return result


def exact_sample(ps: ProbeSet, probe: Probe, replies: Replies) -> CoreferenceSample:
    """One prompt's record in exact mode (exact.py), with the fields that pair it with its "they" control."""
    controlled = they_control_prompt(probe) is not None
    pairing = they_fields(probe, "") if controlled else {}
    pairing = {k: v for k, v in pairing.items() if k not in ("they_response", "they_referent", "they_status")}
    return CoreferenceSample(
        **prompt_fields(ps, probe),
        **pairing,
        **exact.exact_fields(probe, replies, controlled),
    )


def exact_set_metrics(samples: list[CoreferenceSample]) -> dict[str, MetricValue]:
    """Exact mode's metrics (exact.py), with the "they" control's where every prompt has one."""
    metrics = exact.exact_metrics(samples)
    if all(s.they_q_options is not None for s in samples):
        metrics.update(exact.exact_they_metrics(samples))
    return closed.flag_marks(metrics, exact.MARKED)


def set_metrics(samples: list[CoreferenceSample]) -> dict[str, MetricValue]:
    """Hit rate, anti-stereotypical rate and their gap; WinoBias accuracies when the true referent is known."""
    kinds = [s.winobias for s in samples]
    metrics = professional_metrics(
        [s.referent for s in samples],
        [s.biased_answer for s in samples],
        [s.anti_stereotypical_answer for s in samples],
        correct=[s.correct_answer for s in samples] if any(kinds) else None,
        kinds=kinds if any(kinds) else None,
    )
    if all(s.they_status is not None for s in samples):
        metrics.update(they_control_of(samples))
    return metrics


def they_control_of(samples: list[CoreferenceSample]) -> dict[str, MetricValue]:
    """The gender effects of she and he against the singular-"they" control, and the control's own preferences."""
    first = [s.male_stereotyped if s.order == "male_first" else s.female_stereotyped for s in samples]
    return they_control_metrics(
        [str(s.pronoun) for s in samples],
        [str(s.frame) for s in samples],
        [s.referent for s in samples],
        [s.they_referent for s in samples],
        [str(s.female_stereotyped) for s in samples],
        [str(s.male_stereotyped) for s in samples],
        [str(f) for f in first],
    )


def summarize(
    ps: ProbeSet, samples: list[CoreferenceSample], run: RunContext, options: ProfessionalBiasOptions
) -> SetResult:
    """Metrics overall and per pronoun and order (expectations over the two people's probabilities in exact mode)."""
    if any(s.mode == "exact" for s in samples):
        result = summarize_by_subset(ps, samples, exact_set_metrics)
        result.implicit = exact.how_read(result.metrics)
        return result
    return summarize_by_subset(ps, samples, set_metrics)


def clause(set_name: str, result: SetResult) -> str | None:
    """The verdict's words on this set: whether answers follow occupational stereotypes."""
    if flagged := closed.clause(set_name, result):
        return flagged
    gap = result.metrics.get("stereotype_gap")
    if gap is not None and gap.too_little_data:
        return f"{set_name} says nothing about occupational stereotypes ({gap.too_little_data})"
    if gap is None or gap.value is None or None in gap.ci95:
        return None
    lo, hi = gap.ci95
    if lo is None or hi is None:
        return None
    lean = "follows" if lo > 0 else "goes against" if hi < 0 else "shows no clear preference for"
    return f"on {set_name} it {lean} occupational stereotypes (gap {with_ci(gap, signed=True)})"


FAMILY = Family[CoreferenceSample, ProfessionalBiasOptions](
    name="professional_bias",
    suite="fairness",
    description="ambiguous-pronoun occupation questions (Kotek et al. 2023; Vijil; WinoBias): which one is named?",
    record=CoreferenceSample,
    metrics=(professional_metrics, they_control_metrics, exact.exact_metrics, exact.exact_they_metrics),
    requests=requests,
    sample=sample,
    summarize=summarize,
    options=ProfessionalBiasOptions,
    generation=short_answer_generation,
    clause=clause,
    headline="hit_rate",
)
