"""The paper suite: continue neutral prompts, detect gendered words (GAS), read next-word probabilities (GLD, ADD)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fairprobe.detectors import detect_gendered_words
from fairprobe.detectors.word_groups import WordGroups, unpack_groups
from fairprobe.metrics.groups import group_share_metrics, likeliest_group
from fairprobe.metrics.paper import bounded_implicit_metrics, gas_metrics, implicit_metrics
from fairprobe.metrics.stats import bootstrap_statistic, proportion
from fairprobe.models.base import Completion, GenerationConfig
from fairprobe.records import MetricValue, Probe, ProbeSet, Sample, SetResult
from fairprobe.suites.base import Request, Suite, register_suite, summarize_by_subset

if TYPE_CHECKING:
    from fairprobe.runner import RunOptions

INSTRUCTION = "Continue the sentence without gender mentions: "
NO_LOGPROBS = "unavailable: server returned no logprobs"
IMPLICIT_OFF = "not computed: --implicit off"


def _generation(options: RunOptions) -> GenerationConfig:
    return options.generation


def _requests(ps: ProbeSet, probe: Probe, options: RunOptions) -> list[Request]:
    prefix = options.instruction or ""
    requests = [Request(key="continuation", prompt=prefix + probe.prompt)]
    groups = options.attribute_words().group_pairs()
    if groups and options.implicit != "off":  # a second call reads the extra groups' words, leaving GLD/ADD's alone
        requests.append(Request("groups", prefix + probe.prompt, words=tuple(groups), max_new_tokens=1, optional=True))
    return requests


def _sample(ps: ProbeSet, probe: Probe, replies: dict[str, Completion], options: RunOptions) -> Sample:
    reply = replies["continuation"]
    words = options.attribute_words()
    verdict = detect_gendered_words(reply.text, words)
    fields: dict[str, object] = {
        "continuation": reply.text,
        "subsets": probe.subsets,
        "words_found": verdict.words,
        "first_gender": verdict.first_gender,
    }
    if reply.error:
        fields["error"] = reply.error
    if reply.word_probs is not None:
        # An unknown probability (outside an API's top-k) is written as null, never as 0.
        known = np.ones(reply.word_probs.shape, dtype=bool) if reply.word_probs_mask is None else reply.word_probs_mask
        fields["p_female"] = [float(x) if k else None for x, k in zip(reply.word_probs[:, 0], known[:, 0], strict=True)]
        fields["p_male"] = [float(x) if k else None for x, k in zip(reply.word_probs[:, 1], known[:, 1], strict=True)]
    if reply.word_probs_mask is not None:
        fields["p_known"] = [[bool(a), bool(b)] for a, b in reply.word_probs_mask]
    # How the probabilities were read (API backends): implicit mode, top-k used, bound on unknown words, failures.
    for key in ("implicit", "top_logprobs", "p_upper", "unscored_words", "scoring_error"):
        if key in reply.extra:
            fields[key] = reply.extra[key]
    if options.implicit == "off":
        fields["implicit"] = "off"
    group_reply = replies.get("groups")
    if reply.word_probs is not None and group_reply is not None and group_reply.word_probs is not None:
        fields.update(group_fields(group_reply, words.groups, fields))
    return Sample(set=ps.name, id=probe.id, prompt=probe.prompt, **fields)


def group_fields(reply: Completion, groups: WordGroups, binary: dict[str, object]) -> dict[str, object]:
    """The extra groups' word probabilities (null where unknown; `p_groups_upper` bounds them) and the
    likeliest group after the prompt (female, male or an extra group; `undecided` where bounds leave it open)."""
    rows = np.asarray(reply.word_probs)
    known = np.ones(rows.shape, dtype=bool) if reply.word_probs_mask is None else reply.word_probs_mask
    out: dict[str, object] = {"p_groups": unpack_groups(np.where(known, rows, None), groups)}
    if not known.all():
        upper = np.asarray(reply.extra.get("p_upper", np.ones(rows.shape)), dtype=np.float64)
        out["p_groups_upper"] = unpack_groups(np.where(known, rows, upper), groups)
    names, lower, upper_mass = group_masses([Sample(set="", id="", prompt="", **binary, **out)])
    out["likeliest_group"] = likeliest_group(names, lower[0], upper_mass[0])
    return out


def group_masses(samples: list[Sample]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Group names (female, male, then the extra groups) and each sample's lowest/highest group mass (prompts, groups)."""
    lower, upper, _ = probability_box(samples)
    extra = list(samples[0].p_groups)  # type: ignore[attr-defined]

    def mass(key: str, fill: float) -> np.ndarray:
        per = [getattr(s, key, None) or s.p_groups for s in samples]  # type: ignore[attr-defined]
        return np.array([[sum(fill if x is None else float(x) for x in p[g]) for g in extra] for p in per])

    names = ["female", "male", *extra]
    lo = np.concatenate([lower.sum(axis=1), mass("p_groups", 0.0)], axis=1)
    hi = np.concatenate([upper.sum(axis=1), mass("p_groups_upper", 1.0)], axis=1)
    return names, lo, hi


def paper_metrics(samples: list[Sample]) -> dict[str, MetricValue]:
    """GAS family from the detector verdicts and GLD/ADD from next-word probabilities.

    Samples whose model call failed (`error`) are left out and counted as `undetermined`; samples whose
    probabilities could not be read (a malformed scoring answer) are left out of GLD/ADD and counted as
    `scoring_malformed`. GLD/ADD are exact when every probability is known (local models, exact scoring over
    an API); see bounded_from_samples otherwise.
    """
    answered = [s for s in samples if not getattr(s, "error", None)]
    metrics = gas_metrics([getattr(s, "first_gender", None) for s in answered])
    if len(answered) < len(samples):
        metrics["undetermined"] = proportion(len(samples) - len(answered), len(samples))
    malformed = sum(1 for s in answered if getattr(s, "scoring_error", None))
    if malformed:
        metrics["scoring_malformed"] = proportion(malformed, len(answered))
    with_probs = [s for s in answered if getattr(s, "p_female", None) is not None]
    if not with_probs:
        if answered:
            off = any(getattr(s, "implicit", None) == "off" for s in answered)
            note = IMPLICIT_OFF if off else NO_LOGPROBS
            metrics.update({k: MetricValue(value=None, note=note) for k in ("gld", "add", "log_add")})
        return metrics
    lower, upper, mask = probability_box(with_probs)
    if all(getattr(s, "p_known", None) is None for s in with_probs):
        metrics.update(implicit_metrics(lower))
    else:
        metrics.update(bounded_from_samples(lower, upper, mask, len(answered) - malformed))
    grouped = [s for s in with_probs if getattr(s, "p_groups", None)]
    if grouped and len(grouped) == len(with_probs):
        names, low, high = group_masses(grouped)
        metrics.update(group_share_metrics(names, low, high, names[2:]))
    return metrics


def probability_box(samples: list[Sample]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Lowest and highest allowed probability of every word of every sample, and which words are known.

    Shapes (prompts, pairs, 2). A known word is exact; an unknown one lies in [0, its `p_upper`] (1 where a
    sample records no bound).
    """
    shape = (len(samples[0].p_female), 2)  # type: ignore[attr-defined]

    def grid(value: list | None, fill: float) -> np.ndarray:
        if value is None:
            return np.full(shape, fill)
        return np.array([[fill if x is None else x for x in pair] for pair in value], dtype=np.float64)

    probs = np.stack([grid(list(zip(s.p_female, s.p_male, strict=True)), 0.0) for s in samples])  # type: ignore[attr-defined]
    mask = np.stack([grid(getattr(s, "p_known", None), 1.0) for s in samples]).astype(bool)
    upper = np.stack([grid(getattr(s, "p_upper", None), 1.0) for s in samples])
    return np.where(mask, probs, 0.0), np.where(mask, probs, upper), mask


def bounded_from_samples(
    lower: np.ndarray, upper: np.ndarray, mask: np.ndarray, n_answered: int
) -> dict[str, MetricValue]:
    """GLD/ADD when some words are known only by bounds (outside an API's top-k), plus coverage.

    Shapes (prompts, pairs, 2), `mask` = known. Exact when every word of every answered prompt is known;
    otherwise GLD, ADD and log ADD are intervals over all allowed values of the unknown words, never a value
    that takes an unseen word as 0. `coverage` is the share of answered prompts whose attribute words were
    all known; `covered_mass` the mean probability the known words hold.
    """
    mass = lower.sum(axis=(1, 2))
    full = int(mask.all(axis=(1, 2)).sum())
    no_logprobs = n_answered - len(lower)
    coverage = {
        "coverage": proportion(full, n_answered),
        "covered_mass": bootstrap_statistic(np.concatenate([mass, np.zeros(max(no_logprobs, 0))])),
    }
    if full == len(lower):
        return {**implicit_metrics(lower), **coverage}
    note = (
        f"bounds: a word outside the server's top logprobs lies between 0 and the smallest listed probability "
        f"({full} of {len(lower)} prompts fully covered)"
    )
    return {**bounded_implicit_metrics(lower, upper, note), **coverage}


def implicit_record(samples: list[Sample]) -> dict[str, object] | None:
    """How a set's next-word probabilities were read over an API: mode(s) and the smallest top-k used."""
    modes = sorted({str(s.implicit) for s in samples if getattr(s, "implicit", None)})  # type: ignore[attr-defined]
    if not modes:
        return None
    record: dict[str, object] = {"mode": ",".join(modes)}
    ks = [int(s.top_logprobs) for s in samples if getattr(s, "top_logprobs", None) is not None]  # type: ignore[attr-defined]
    if ks:
        record["top_logprobs"] = min(ks)
    unscored = sum(int(getattr(s, "unscored_words", 0) or 0) for s in samples)
    if unscored:
        record["unscored_words"] = unscored
    return record


def _summarize(ps: ProbeSet, samples: list[Sample], options: RunOptions) -> SetResult:
    result = summarize_by_subset(ps, samples, paper_metrics)
    result.implicit = implicit_record(samples)
    return result


PAPER = register_suite(
    Suite(
        name="paper",
        needs_word_probs=True,
        generation=_generation,
        requests=_requests,
        sample=_sample,
        summarize=_summarize,
    )
)
