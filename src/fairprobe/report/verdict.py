"""The one-sentence verdict at the top of report.html and at the end of the console output.

It is generated from the summary's metrics and their 95% intervals only, so it never claims more
than the intervals allow: a direction is named only when the interval of GAS(M) excludes 50% (or
the signed next-word lean's interval excludes 0), and explicit and implicit bias are said to
disagree only when both have a direction and the directions differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.severity import Thresholds, default_thresholds

STRENGTH = {"A": "slight", "B": "mild", "C": "noticeable", "D": "strong"}
PAIR_METRICS = ("female_only_yes", "male_only_yes")


def unit_of(result: SetResult) -> str:
    """What a set's n counts: 'pairs' for counterfactual pair sets, 'prompts' otherwise."""
    return "pairs" if any(k in result.metrics for k in PAIR_METRICS) else "prompts"


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}" if abs(x) >= 0.01 or x == 0 else f"{x:.3f}"


def with_ci(m: MetricValue, signed: bool = False) -> str:
    """'0.09 [0.07, 0.12]' (signed: '+0.12 [+0.08, +0.15]')."""
    fmt = (lambda x: "n/a" if x is None else f"{x:+.2f}") if signed else _num
    lo, hi = m.ci95
    return fmt(m.value) + ("" if lo is None or hi is None else f" [{fmt(lo)}, {fmt(hi)}]")


def _defined(m: MetricValue | None) -> bool:
    return m is not None and m.value is not None and None not in m.ci95


def _side(m: MetricValue | None, centre: float, above: str, below: str) -> str | None:
    """`above` or `below` when the metric's interval lies wholly on that side of `centre`, else None."""
    if not _defined(m):
        return None
    lo, hi = m.ci95  # type: ignore[union-attr]
    return above if lo > centre else below if hi < centre else None  # type: ignore[operator]


def explicit_direction(result: SetResult) -> str | None:
    """'male' or 'female' when GAS(M)'s interval excludes 50%, else None."""
    return _side(result.metrics.get("gas_m"), 0.5, "male", "female")


def implicit_direction(result: SetResult) -> str | None:
    """'female' or 'male' when the signed next-word lean's interval excludes 0, else None."""
    return _side(result.metrics.get("implicit_lean"), 0.0, "female", "male")


@dataclass
class _Lean:
    direction: str
    sets: list[str]
    headline: str


def _leans(summary: Summary, direction_of: Callable[[SetResult], str | None], strength_metric: str) -> list[_Lean]:
    """Sets grouped by direction; the headline set of a group has the highest lower bound of its metric."""
    groups: dict[str, list[str]] = {}
    for name, result in summary.results.items():
        d = direction_of(result)
        if d:
            groups.setdefault(d, []).append(name)

    def strength(name: str) -> float:
        m = summary.results[name].metrics.get(strength_metric)
        return abs(m.ci95[0] or 0.0) if m else 0.0

    return [_Lean(d, sets, max(sets, key=strength)) for d, sets in sorted(groups.items(), key=lambda g: -len(g[1]))]


def _share(result: SetResult, direction: str) -> str:
    m = result.metrics["gas_m" if direction == "male" else "gas_f"]
    return f"{100 * (m.value or 0):.0f}% {direction}"


def _sets(names: list[str], total: int) -> str:
    return "every set" if len(names) == total and total > 1 else ", ".join(names)


def paper_clause(summary: Summary, thresholds: Thresholds) -> str | None:
    """Explicit lean (when a gender is named) and next-word lean, with their agreement or disagreement."""
    paper = {k: r for k, r in summary.results.items() if "gas" in r.metrics}
    if not paper:
        return None
    sub = Summary(fairprobe_version=summary.fairprobe_version, model=summary.model, results=paper)
    explicit = _leans(sub, explicit_direction, "gas_m")
    implicit = _leans(sub, implicit_direction, "implicit_lean")
    if explicit:
        first = explicit[0]
        r = paper[first.headline]
        grade = thresholds.grade(first.headline, "gas", r.metrics["gas"], r.n)
        word = STRENGTH[grade.point] if grade else "a"
        text = (
            f"{word} {first.direction} lean when a gender is named on {_sets(first.sets, len(paper))} "
            f"(GAS {with_ci(r.metrics['gas'])}; {_share(r, first.direction)} on {first.headline})"
        )
        text += "".join(f", {o.direction} on {', '.join(o.sets)}" for o in explicit[1:])
    else:
        best = max(paper, key=lambda k: paper[k].metrics["gas"].value or 0.0)
        text = (
            f"no clear direction when a gender is named (GAS {with_ci(paper[best].metrics['gas'])} on {best}; "
            "the female/male split's interval includes 50% on every set)"
        )
    if not implicit:
        return text
    return text + "; next-word probabilities lean " + implicit_clause(paper, explicit, implicit)


def implicit_clause(paper: dict[str, SetResult], explicit: list[_Lean], implicit: list[_Lean]) -> str:
    """'male on stsb (...) but female on template (...), the opposite of the explicit lean on other prompts'.

    Directions that agree with the explicit lean come first; a direction opposite to it is said to be so,
    on the same prompts (both intervals exclude parity on a set) or on other prompts.
    """
    named = {e.direction for e in explicit}
    explicit_sets = {e.direction: set(e.sets) for e in explicit}
    parts = []
    for lean in sorted(implicit, key=lambda i: i.direction not in named):
        part = (
            f"{lean.direction} on {_sets(lean.sets, len(paper))} "
            f"(lean {with_ci(paper[lean.headline].metrics['implicit_lean'], signed=True)} on {lean.headline})"
        )
        if named and lean.direction not in named:
            opposite = set(lean.sets) & set().union(*explicit_sets.values())
            where = f"on {', '.join(sorted(opposite))}" if opposite else "on other prompts"
            part += f", opposite to the explicit lean {where}"
        parts.append(part)
    return " but ".join(parts)


def _pct_ci(m: MetricValue) -> str:
    """'4% (95% CI 1-9%)'."""
    lo, hi = m.ci95
    ci = "" if lo is None or hi is None else f" (95% CI {100 * lo:.0f}–{100 * hi:.0f}%)"
    return f"{100 * (m.value or 0.0):.0f}%{ci}"


def fairness_clauses(summary: Summary) -> list[str]:
    """Counterfactual flips and stereotype following, each with its interval."""
    out = []
    for name, r in summary.results.items():
        m = r.metrics
        if unit_of(r) == "pairs" and m.get("hit_rate") is not None:
            hit = m["hit_rate"]
            if hit.value is None:
                out.append(f"no {name} pair could be read, so its flip rate is n/a")
            else:
                out.append(f"the answer changed with gender alone in {_pct_ci(hit)} of {name} pairs")
        elif "stereotype_gap" in m and _defined(m["stereotype_gap"]):
            gap = m["stereotype_gap"]
            lo, hi = gap.ci95
            lean = "follows" if lo > 0 else "goes against" if hi < 0 else "shows no clear preference for"  # type: ignore[operator]
            out.append(f"on {name} it {lean} occupational stereotypes (gap {with_ci(gap, signed=True)})")
    return out


def verdict(summary: Summary, thresholds: Thresholds | None = None) -> str:
    """One sentence on the whole run, from the metrics and their 95% intervals."""
    thresholds = thresholds or default_thresholds()
    clauses = [c for c in (paper_clause(summary, thresholds), *fairness_clauses(summary)) if c]
    if not clauses:
        return f"{summary.model}: no metric with an interval to judge."
    text = "; ".join(clauses)
    return f"{summary.model}: {text}."
