"""The paper family's readings: each headline metric of a set in one plain-words sentence."""

from __future__ import annotations

from collections.abc import Sequence

from fairprobe.formatting import format_metric, pct, pct_ci
from fairprobe.records import Sample, SetResult


def likelier_gender(samples: Sequence[Sample]) -> str:
    """Which gender's words the next-word probabilities favour, over the prompts that have them."""
    sums = [s for s in (x.word_prob_sums() for x in samples) if s is not None]
    if not sums:
        return ""
    male = sum(1 for f, m in sums if m > f)
    female = sum(1 for f, m in sums if f > m)
    likelier, other, share = ("male", "female", male) if male >= female else ("female", "male", female)
    return f"; {likelier} words were likelier than {other} ones after {pct(share / len(sums))} of prompts"


def read_gas(result: SetResult, samples: Sequence[Sample]) -> str:
    """'In 24% (95% CI 18–32%) of continuations the model used a gendered word; when it did, 54% ... were male.'"""
    m = result.metrics
    text = f"In {pct_ci(m['gas'])} of continuations the model used a gendered word"
    gas_m, gas_f = m.get("gas_m"), m.get("gas_f")
    if gas_m and gas_f and gas_m.value is not None and gas_f.value is not None:
        lean, share = ("male", gas_m) if gas_m.value >= gas_f.value else ("female", gas_f)
        text += f"; when it did, {pct_ci(share)} were {lean}"
    return text + "."


def read_gld(result: SetResult, samples: Sequence[Sample]) -> str:
    """GLD in words, with which gender's words were likelier how often."""
    return (
        f"Next-word probabilities of gendered words lean to one gender by {format_metric(result.metrics['gld'], digits=None)} "
        f"on a 0 (balanced) to 1 (one gender only) scale (GLD){likelier_gender(samples)}."
    )


def read_add(result: SetResult, samples: Sequence[Sample]) -> str:
    """ADD (and ln ADD) in words."""
    log = result.metrics.get("log_add")
    log_text = f", ln ADD = {log.value:.2f}" if log and log.value is not None else ""
    return (
        f"Female and male next-word distributions diverge by ADD = {format_metric(result.metrics['add'], digits=None)}"
        f"{log_text} (0 = identical)."
    )


def read_stereotype_following(result: SetResult, samples: Sequence[Sample]) -> str | None:
    """The stereotype direction in words, explicit and implicit together (said once, by the explicit metric)."""
    explicit, implicit = (result.metrics.get(k) for k in ("stereotype_following", "stereotype_following_implicit"))
    if explicit is None or (explicit.value is None and (implicit is None or implicit.value is None)):
        return None
    text = "Stereotype direction (0 = none, +1 = always the stereotyped gender): "
    if explicit.value is not None:
        text += f"explicit {format_metric(explicit, digits=None)} ({explicit.note})"
    else:
        text += f"explicit n/a ({explicit.note})"
    if implicit is not None and implicit.value is not None:
        text += f"; implicit {format_metric(implicit, digits=None)} (next-word lean)"
    return text + "."


def read_neutral_share(result: SetResult, samples: Sequence[Sample]) -> str:
    """neutral_share in words, with the group most often likeliest as the next word."""
    text = (
        f"They/them words hold {pct_ci(result.metrics['neutral_share'])} of the next-word probability of all "
        "gendered and neutral words (neutral share)"
    )
    counts: dict[str, int] = {}
    for s in samples:
        if s.likeliest_group_name():
            counts[s.likeliest_group_name()] = counts.get(s.likeliest_group_name(), 0) + 1
    if counts:
        top = max(counts, key=lambda k: counts[k])
        text += f"; the likeliest group was {top} after {pct(counts[top] / sum(counts.values()))} of prompts"
    return text + "."
