"""The paper family: continue neutral prompts, detect gendered words (GAS), read next-word probabilities (GLD, ADD).

Each prompt asks one generation (`continuation`) and, beside it, one scoring request (`next_words`): the female and
male word of every attribute pair and the extra groups' words, each after a space. The runner reads the scores
from the generation call itself, so a prompt costs one model call. The (N, 2) pairs, the groups and the top-k
bounds are this family's business; the backend only scores continuations.
"""

from __future__ import annotations

import numpy as np

from fairprobe.families.base import Family, MetricTable, Replies, Request, RunContext, Scoring, summarize_by_subset
from fairprobe.families.paper.groups import likeliest_group
from fairprobe.families.paper.metrics import (
    failure_metrics,
    gas_metrics,
    group_masses,
    group_share_metrics,
    implicit_record,
    next_word_metrics,
    paper_metrics,
)
from fairprobe.families.paper.options import PaperOptions
from fairprobe.families.paper.record import PaperSample
from fairprobe.families.paper.sets import load_statement_file
from fairprobe.families.paper.stereotype import STEREOTYPED_GENDER, stereotype_following, stereotype_metrics
from fairprobe.families.paper.words import detect_gendered_words
from fairprobe.models.base import Scores
from fairprobe.records import MetricValue, Probe, ProbeSet, SetResult

NEXT_WORDS = "next_words"


def sentence_of(prompt: str) -> str:
    """A paper prompt 'My friend is a nurse, and' as the full neutral sentence 'My friend is a nurse.'."""
    return prompt.removesuffix(", and").rstrip(" ,") + "."


def sentences(ps: ProbeSet) -> list[str]:
    """The set's prompts as full neutral sentences: what a comparison's perplexity is measured on."""
    return [sentence_of(p.prompt) for p in ps.probes]


def requests(ps: ProbeSet, probe: Probe, run: RunContext, options: PaperOptions) -> list[Request | Scoring]:
    """The continuation of the prompt (after the instruction, when instruction guiding is on) and the scores of
    every attribute and group word as the next word (read from the same call)."""
    prompt = (options.instruction or "") + probe.prompt
    asked: list[Request | Scoring] = [Request("continuation", prompt)]
    if options.implicit == "on":
        asked.append(Scoring(NEXT_WORDS, prompt, options.continuations(), optional=True))
    return asked


def sample(ps: ProbeSet, probe: Probe, replies: Replies, run: RunContext, options: PaperOptions) -> PaperSample:
    """Score one continuation: the gendered words it uses and the next-word probabilities of the word pairs."""
    reply = replies.completions["continuation"]
    verdict = detect_gendered_words(reply.text, options.attribute_words())
    fields: dict[str, object] = {"words_found": verdict.words, "first_gender": verdict.first_gender}
    if reply.error:
        fields["error"] = reply.error
    scores = replies.scores.get(NEXT_WORDS)
    if scores is not None:
        fields.update(probability_fields(scores, options))
    if options.implicit == "off":
        fields["implicit"] = "off"
    return PaperSample.model_validate(
        {"set": ps.name, "id": probe.id, "prompt": probe.prompt, "continuation": reply.text, "subsets": probe.subsets}
        | fields
    )


def probability_fields(scores: Scores, options: PaperOptions) -> dict[str, object]:
    """P(female)/P(male) per pair (null where only bounded), how a server read them, and the extra groups.

    A word known only by a bound (a server's top-k) is null with its bound in `p_upper`, never 0; the bound is
    tightened by the mass the known words leave over.
    """
    fields: dict[str, object] = {}
    if scores.mode is not None:
        fields["implicit"] = scores.mode
    if scores.error is not None:
        return {**fields, "scoring_error": scores.error}
    if scores.mode == "topk":
        fields["top_logprobs"] = scores.top_logprobs
    if not any(c.status != "unavailable" for c in scores.continuations):
        return fields
    n = 2 * len(options.attribute_words().pairs)
    probs, known, upper = word_box(scores, 0, n)
    fields["p_female"] = [float(x) if k else None for x, k in zip(probs[0::2], known[0::2], strict=True)]
    fields["p_male"] = [float(x) if k else None for x, k in zip(probs[1::2], known[1::2], strict=True)]
    if scores.mode == "topk" or not known.all():
        fields["p_known"] = [[bool(a), bool(b)] for a, b in zip(known[0::2], known[1::2], strict=True)]
        fields["p_upper"] = [[float(a), float(b)] for a, b in zip(upper[0::2], upper[1::2], strict=True)]
    if scores.mode == "exact" and not known.all():
        fields["unscored_words"] = int((~known).sum())
    if options.attribute_words().groups:
        fields.update(group_fields(scores, n, options, fields))
    return fields


def word_box(scores: Scores, start: int, stop: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Probabilities, which are known exactly, and upper bounds of continuations start..stop (a bound is at most
    the mass the known ones leave over)."""
    part = scores.continuations[start:stop]
    known = np.array([c.status == "exact" for c in part], dtype=bool)
    probs = np.array([c.prob if c.prob is not None and k else 0.0 for c, k in zip(part, known, strict=True)])
    rest = max(0.0, 1.0 - float(probs.sum()))
    bounds = np.array([1.0 if c.prob is None else min(c.prob, rest) for c in part])
    return probs, known, np.where(known, probs, bounds)


def group_fields(scores: Scores, start: int, options: PaperOptions, binary: dict[str, object]) -> dict[str, object]:
    """The extra groups' word probabilities (null where unknown; `p_groups_upper` bounds them) and the likeliest
    group after the prompt (female, male or an extra group; `undecided` where bounds leave it open)."""
    groups = options.attribute_words().groups
    probs, known, upper = word_box(scores, start, len(scores.continuations))
    values: dict[str, list[float | None]] = {}
    bounds: dict[str, list[float]] = {}
    at = 0
    for name, words in groups:
        span = slice(at, at + len(words))
        values[name] = [float(x) if k else None for x, k in zip(probs[span], known[span], strict=True)]
        bounds[name] = [float(x) for x in upper[span]]
        at += len(words)
    out: dict[str, object] = {"p_groups": values}
    if not known.all():
        out["p_groups_upper"] = bounds
    one = PaperSample.model_validate({"set": "", "id": "", "prompt": "", "continuation": "", **binary, **out})
    names, lower, upper_mass = group_masses([one])
    out["likeliest_group"] = likeliest_group(names, lower[0], upper_mass[0])
    return out


def summarize(ps: ProbeSet, samples: list[PaperSample], run: RunContext, options: PaperOptions) -> SetResult:
    """GAS, GLD, ADD and, where the prompts declare a stereotyped gender, the stereotype direction, overall and per
    subset, with how an API's probabilities were read."""
    stereotype_of = {p.id: str(p.meta.get(STEREOTYPED_GENDER)) for p in ps.probes}
    stratum_of = {p.id: tuple(p.subsets) for p in ps.probes}

    def metrics(group: list[PaperSample]) -> dict[str, MetricValue]:
        return {**paper_metrics(group), **stereotype_metrics(group, stereotype_of, stratum_of)}

    result = summarize_by_subset(ps, samples, metrics)
    result.implicit = implicit_record(samples)
    return result


FAMILY = Family[PaperSample, PaperOptions](
    name="paper",
    suite="paper",
    description="conditional generation (Dong et al. 2024): GAS from the continuation, GLD/ADD from next-word "
    "probabilities",
    record=PaperSample,
    metrics=(gas_metrics, stereotype_following, failure_metrics, next_word_metrics, group_share_metrics),
    requests=requests,
    sample=sample,
    summarize=summarize,
    options=PaperOptions,
    headline="gas",
    compared=("gas", "gld", "add", "log_add"),
    drift=True,
    sentences=sentences,
    prefixes={"file:": load_statement_file},
    tables=(
        MetricTable(
            "gas_split",
            "GAS(F) / GAS(M) split with Delta (paper Table 10)",
            "GAS(F) and GAS(M): shares of gendered continuations whose first attribute word is female / male.",
            (("GAS", "gas"), ("GAS(F)", "gas_f"), ("GAS(M)", "gas_m"), ("Delta", "delta")),
            figure_title="GAS(F) / GAS(M) with Delta (paper Table 10)",
        ),
    ),
)
