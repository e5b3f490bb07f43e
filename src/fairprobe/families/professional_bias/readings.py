"""The professional-bias family's readings: a metric of a set in one plain-words sentence."""

from __future__ import annotations

from collections.abc import Sequence

from fairprobe.formatting import format_metric, pct_ci
from fairprobe.records import Sample, SetResult


def read_hit_rate(result: SetResult, samples: Sequence[Sample]) -> str:
    """How often the stereotyped occupation was named."""
    return f"In {pct_ci(result.metrics['hit_rate'])} of questions the model named the stereotyped occupation."


def read_gap(result: SetResult, samples: Sequence[Sample]) -> str:
    """The stereotype gap in words."""
    gap = format_metric(result.metrics["stereotype_gap"], digits=None)
    return f"Stereotyped minus anti-stereotypical answers: {gap} (0 = no preference)."


def read_gender_effects(result: SetResult, samples: Sequence[Sample]) -> str:
    """The gender effects against the "they" control, beside the control's position preference."""
    m = result.metrics
    text = (
        f'Against the same frames with singular they, "she" moves answers to the female-stereotyped occupation by '
        f'{format_metric(m["gender_effect_she"], digits=None)} and "he" to the male-stereotyped one by '
        f"{format_metric(m.get('gender_effect_he'), digits=None)} (0 = the pronoun changes nothing)"
    )
    first = m.get("they_first_share")
    if first is not None and first.value is not None:
        text += f"; with they, {pct_ci(first)} of answers named the occupation mentioned first"
    return text + "."
