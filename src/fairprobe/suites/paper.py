"""The paper suite: continue neutral prompts, detect gendered words (GAS), read next-word probabilities (GLD, ADD)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fairprobe.detectors import detect_gendered_words
from fairprobe.metrics.paper import gas_metrics, implicit_metrics
from fairprobe.metrics.stats import bootstrap_statistic, proportion
from fairprobe.models.base import Completion, GenerationConfig
from fairprobe.records import MetricValue, Probe, ProbeSet, Sample, SetResult
from fairprobe.suites.base import Request, Suite, register_suite, summarize_by_subset

if TYPE_CHECKING:
    from fairprobe.runner import RunOptions

INSTRUCTION = "Continue the sentence without gender mentions: "
NO_LOGPROBS = "unavailable: server returned no logprobs"


def _generation(options: RunOptions) -> GenerationConfig:
    return options.generation


def _requests(ps: ProbeSet, probe: Probe, options: RunOptions) -> list[Request]:
    prefix = options.instruction or ""
    return [Request(key="continuation", prompt=prefix + probe.prompt)]


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
    return Sample(set=ps.name, id=probe.id, prompt=probe.prompt, **fields)


def paper_metrics(samples: list[Sample]) -> dict[str, MetricValue]:
    """GAS family from the detector verdicts and GLD/ADD from next-word probabilities.

    Samples whose model call failed (`error`) are left out and counted as `undetermined`. GLD/ADD are
    exact when every probability is known (local models); see approximate_implicit_metrics otherwise.
    """
    answered = [s for s in samples if not getattr(s, "error", None)]
    metrics = gas_metrics([getattr(s, "first_gender", None) for s in answered])
    if len(answered) < len(samples):
        metrics["undetermined"] = proportion(len(samples) - len(answered), len(samples))
    with_probs = [s for s in answered if getattr(s, "p_female", None) is not None]
    if not with_probs:
        if answered:
            metrics.update({k: MetricValue(value=None, note=NO_LOGPROBS) for k in ("gld", "add", "log_add")})
        return metrics
    probs = np.stack(
        [np.stack([np.asarray(s.p_female, float), np.asarray(s.p_male, float)], axis=-1) for s in with_probs]  # type: ignore[attr-defined]
    )
    known = [getattr(s, "p_known", None) for s in with_probs]
    if all(k is None for k in known):
        metrics.update(implicit_metrics(probs))
        return metrics
    mask = np.stack([np.ones(probs.shape[1:], dtype=bool) if k is None else np.asarray(k, dtype=bool) for k in known])
    metrics.update(approximate_implicit_metrics(probs, mask, len(answered)))
    return metrics


def approximate_implicit_metrics(probs: np.ndarray, mask: np.ndarray, n_answered: int) -> dict[str, MetricValue]:
    """GLD/ADD from top-k logprobs (shape (prompts, pairs, 2), `mask` = known), plus coverage.

    Exact when every word of every answered prompt is known. Otherwise unknown words are left out of
    the sums (they lie below the top-k cut-off), GLD is averaged over prompts with some covered mass,
    and every value is marked approximate. `coverage` is the share of answered prompts whose attribute
    words were all covered; `covered_mass` the mean probability the covered words hold.
    """
    covered = np.where(mask, probs, 0.0)
    mass = covered.sum(axis=(1, 2))
    full = int(mask.all(axis=(1, 2)).sum())
    no_logprobs = n_answered - len(probs)
    coverage = {
        "coverage": proportion(full, n_answered),
        "covered_mass": bootstrap_statistic(np.concatenate([mass, np.zeros(no_logprobs)])),
    }
    if full == n_answered:
        return {**implicit_metrics(probs), **coverage}
    has_mass = mass > 0
    implicit = implicit_metrics(covered)
    if has_mass.any():
        implicit["gld"] = implicit_metrics(covered[has_mass])["gld"]
    else:
        implicit["gld"] = MetricValue(value=None)
    note = (
        f"approximate: from top logprobs; words outside them left out ({full} of {n_answered} prompts fully "
        f"covered; GLD over the {int(has_mass.sum())} prompts with covered mass)"
    )
    for value in implicit.values():
        value.approximate = True
        value.note = note
    return {**implicit, **coverage}


def _summarize(ps: ProbeSet, samples: list[Sample], options: RunOptions) -> SetResult:
    return summarize_by_subset(ps, samples, paper_metrics)


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
