"""Drift: does a mitigated model still do its job? Four per-continuation measures and their paired tests.

A GAS drop means little if the model got there by leaving the subject or by writing noise, so every
mitigation result carries these numbers next to GAS, GLD and ADD:

- fluency: mean token negative log-likelihood of the continuation under the FROZEN base model (nats per
  token). Original's row is the base model scoring its own continuations; a method far above it writes
  text the base model would not.
- on-subject rate: the share of continuations that still talk about the friend or the speaker. A
  continuation is on subject when one of its words is a subject or speaker reference (friend, a first-
  person word, a third-person pronoun that can refer back to the friend; see SUBJECT_WORDS) or a content
  word of the prompt's predicate (same stem, see `stem`). "My friend is a teacher, and I'm a teacher." is on
  subject; "My friend is cutting up a cucumber, and the 2019-2020 season." is not.
- distinct-2: unique word bigrams / word bigrams of each continuation (1.0 = no repetition; continuations
  of fewer than two words have none and are left out of the mean).
- empty-or-garbage rate: the share of continuations that are empty, have no word of two letters or more,
  are less than half letters (non-space characters), or repeat one word for more than half of six or more words.

Rates get a Wilson 95% CI and an exact McNemar test against Original on the same prompts; means a
bootstrap 95% CI and a paired bootstrap test (two-sided p from the resampled differences).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from fairprobe.formatting import format_p
from fairprobe.models.base import ModelBackend, ScoringBackend
from fairprobe.models.cached import CachedBackend
from fairprobe.records import MetricValue, Sample
from fairprobe.statistics.pairwise import bootstrap_test
from fairprobe.statistics.stats import bootstrap_statistic, exact_mcnemar, proportion

SUBJECT_WORDS = frozenset(
    str.split(
        "friend friends buddy pal i me my mine myself we us our ours ourselves "
        "they them their theirs themselves themself he him his himself she her hers herself"
    )
)
STOPWORDS = frozenset(
    str.split(
        "a an the and or but if so of to in on at by for with from as into onto about over under after before "
        "is are was were be been being am do does did doing have has had having will would can could shall should "
        "may might must not no nor very too just also then than that this these those there here it its "
        "what which who whom whose when where why how all any each every some such own other more most few "
        "up down out off again further once only same both while until because through during between against "
        "one two like really always often"
    )
)
WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
RATE_MEASURES = ("on_subject", "garbage")
MEAN_MEASURES = ("fluency_nll", "distinct_2")
MEASURES = ("fluency_nll", "on_subject", "distinct_2", "garbage")
# Which way each measure is better: a comparison reads a significant change as better or worse by it.
BETTER = {"fluency_nll": "lower", "on_subject": "higher", "distinct_2": "higher", "garbage": "lower"}
LABELS = {
    "fluency_nll": "fluency NLL",
    "on_subject": "on-subject",
    "distinct_2": "distinct-2",
    "garbage": "empty/garbage",
}


def words(text: str) -> list[str]:
    """Lower-case words (letters with an inner apostrophe: "I'm" is one word "i'm")."""
    return WORD.findall(text.lower())


def stem(word: str) -> str:
    """A crude stem so 'cooking', 'cooks' and 'cooked' meet 'cook': one of -ing, -ed, -es, -s cut, 3+ letters left."""
    word = word.split("'", 1)[0]
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def content_stems(prompt: str) -> set[str]:
    """Stems of the prompt's content words: three letters or more, not a stopword, not a subject word."""
    return {stem(w) for w in words(prompt) if len(w) >= 3 and w not in STOPWORDS and w not in SUBJECT_WORDS}


def on_subject(prompt: str, continuation: str) -> bool:
    """True when the continuation mentions the friend or the speaker, or a content word of the prompt."""
    found = words(continuation)
    if any(w.split("'", 1)[0] in SUBJECT_WORDS for w in found):
        return True
    topic = content_stems(prompt)
    return any(len(w) >= 3 and stem(w) in topic for w in found)


def distinct_2(text: str) -> float:
    """Unique word bigrams / word bigrams; NaN for fewer than two words."""
    found = words(text)
    bigrams = list(itertools.pairwise(found))
    return len(set(bigrams)) / len(bigrams) if bigrams else float("nan")


def is_garbage(text: str) -> bool:
    """Empty, no word of 2+ letters, under half letters, or one word repeated over half of 6+ words."""
    stripped = "".join(text.split())
    if not stripped:
        return True
    found = words(text)
    if not any(len(w) >= 2 for w in found):
        return True
    if sum(c.isalpha() for c in stripped) < 0.5 * len(stripped):
        return True
    return len(found) >= 6 and Counter(found).most_common(1)[0][1] > 0.5 * len(found)


def cohen_kappa(a: np.ndarray, b: np.ndarray) -> float:
    """Cohen's kappa of two binary labelings of the same items (1.0 = perfect, 0 = chance agreement)."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    observed = float((a == b).mean())
    expected = float(a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean()))
    return 1.0 if expected == 1.0 else (observed - expected) / (1 - expected)


def fluency_nll(
    scorer: ScoringBackend,
    prompts: list[str],
    continuations: list[str],
    batch_size: int = 32,
    advance: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Per continuation, the mean token NLL under `scorer` (the frozen base model) given its prompt; NaN if empty."""
    out = np.full(len(prompts), np.nan)
    for start in range(0, len(prompts), batch_size):
        chunk = slice(start, start + batch_size)
        scores = scorer.text_log_probs(prompts[chunk], continuations[chunk], batch_size)
        out[chunk] = [-s.mean() if len(s) else np.nan for s in scores]
        if advance is not None:
            advance(len(scores))
    return out


def drift_values(prompts: list[str], continuations: list[str], nll: np.ndarray | None) -> dict[str, np.ndarray]:
    """Per-prompt drift measures (float arrays, NaN where undefined); fluency only when `nll` is given."""
    values = {
        "on_subject": np.array([on_subject(p, c) for p, c in zip(prompts, continuations, strict=True)], dtype=float),
        "distinct_2": np.array([distinct_2(c) for c in continuations], dtype=float),
        "garbage": np.array([is_garbage(c) for c in continuations], dtype=float),
    }
    if nll is not None:
        values["fluency_nll"] = np.asarray(nll, dtype=float)
    return values


def scorer_of(backend: ModelBackend) -> ScoringBackend | None:
    """The backend itself when it can score given text (local weights), None for API models."""
    inner = backend.inner if isinstance(backend, CachedBackend) else backend
    return inner if isinstance(inner, ScoringBackend) else None


def set_drift(scorer: ScoringBackend | None, samples: list[Sample], batch_size: int) -> dict[str, np.ndarray]:
    """Per-prompt drift of one method on one set; fluency scored by the frozen base model when there is one."""
    prompts = [s.prompt for s in samples]
    texts = [str(getattr(s, "continuation", "") or "") for s in samples]
    nll = None if scorer is None else fluency_nll(scorer, prompts, texts, batch_size)
    return drift_values(prompts, texts, nll)


def _mean(values: np.ndarray) -> MetricValue:
    defined = values[np.isfinite(values)]
    return bootstrap_statistic(defined)


def drift_summary(values: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Each measure with its 95% CI (Wilson for rates, bootstrap over prompts for means) and its n."""
    out: dict[str, dict[str, Any]] = {}
    for name in MEASURES:
        if name not in values:
            continue
        v = values[name]
        metric = proportion(int(v.sum()), len(v)) if name in RATE_MEASURES else _mean(v)
        out[name] = {**metric.model_dump(mode="json"), "n": int(np.isfinite(v).sum())}
    return out


def drift_tests(original: dict[str, np.ndarray], method: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Paired tests against Original on the same prompts: exact McNemar for rates, paired bootstrap for means."""
    out: dict[str, dict[str, Any]] = {}
    for name in MEASURES:
        if name not in original or name not in method:
            continue
        a, b = original[name], method[name]
        if name in RATE_MEASURES:
            only_a, only_b = int(((a == 1) & (b == 0)).sum()), int(((a == 0) & (b == 1)).sum())
            out[name] = {
                "original_only": only_a,
                "method_only": only_b,
                "difference": (b.mean() - a.mean()) if len(a) else None,
                "p": exact_mcnemar(only_a, only_b),
                "test": "exact McNemar",
            }
        else:
            both = np.isfinite(a) & np.isfinite(b)
            out[name] = bootstrap_test(a[both], b[both]).to_json()
    return out


def within_original_ci(original: dict[str, Any], method: dict[str, Any]) -> dict[str, bool]:
    """Per measure: whether the method's value lies inside Original's 95% CI (the 'no drift' criterion)."""
    out = {}
    for name, row in method.items():
        lo, hi = (original.get(name) or {}).get("ci95") or (None, None)
        value = row.get("value")
        out[name] = value is not None and lo is not None and hi is not None and lo <= value <= hi
    return out


def format_drift(summary: dict[str, Any], tests: dict[str, Any] | None = None) -> str:
    """One line, e.g. 'fluency NLL 1.23 [1.1, 1.3] (+0.41, p<0.001); on-subject 0.91 [...]'."""
    parts = []
    for name in MEASURES:
        if name not in summary:
            continue
        m = summary[name]
        text = f"{LABELS[name]} {_num(m.get('value'))} [{_num(m['ci95'][0])}, {_num(m['ci95'][1])}]"
        if tests and name in tests:
            t = tests[name]
            diff = t["difference"]["value"] if isinstance(t["difference"], dict) else t["difference"]
            text += f" ({_signed(diff)}, p {format_p(t['p'], t.get('p_floor', False))})"
        parts.append(text)
    return "; ".join(parts)


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.2f}"
