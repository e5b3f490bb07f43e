"""The paper suite: continue neutral prompts, detect gendered words (GAS), read next-word probabilities (GLD, ADD)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from fairprobe.detectors import detect_gendered_words
from fairprobe.metrics.paper import gas_metrics, implicit_metrics
from fairprobe.models.base import Completion, GenerationConfig
from fairprobe.records import MetricValue, Probe, ProbeSet, Sample, SetResult, SubsetResult
from fairprobe.suites.base import Request, Suite, register_suite

if TYPE_CHECKING:
    from fairprobe.runner import RunOptions

INSTRUCTION = "Continue the sentence without gender mentions: "


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
        fields["p_female"] = [float(x) for x in reply.word_probs[:, 0]]
        fields["p_male"] = [float(x) for x in reply.word_probs[:, 1]]
    if reply.word_probs_mask is not None:
        fields["p_known"] = [[bool(a), bool(b)] for a, b in reply.word_probs_mask]
    return Sample(set=ps.name, id=probe.id, prompt=probe.prompt, **fields)


def paper_metrics(samples: list[Sample]) -> dict[str, MetricValue]:
    """GAS family from the detector verdicts and, where probabilities exist, GLD/ADD."""
    metrics = gas_metrics([getattr(s, "first_gender", None) for s in samples])
    with_probs = [s for s in samples if getattr(s, "p_female", None) is not None]
    if with_probs and len(with_probs) == len(samples):
        probs = np.stack(
            [np.stack([np.asarray(s.p_female), np.asarray(s.p_male)], axis=-1) for s in with_probs]  # type: ignore[attr-defined]
        )
        metrics.update(implicit_metrics(probs))
    return metrics


def _summarize(ps: ProbeSet, samples: list[Sample], options: RunOptions) -> SetResult:
    subsets: dict[str, list[Sample]] = {}
    for s in samples:
        for name in getattr(s, "subsets", []) or []:
            subsets.setdefault(name, []).append(s)
    return SetResult(
        n=len(samples),
        source=ps.source,
        metrics=paper_metrics(samples),
        subsets={k: SubsetResult(n=len(v), metrics=paper_metrics(v)) for k, v in sorted(subsets.items())},
    )


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
