"""The one-sentence verdict at the top of report.html and at the end of the console output.

It is generated from the summary's metrics and their 95% intervals only, so it never claims more
than the intervals allow: a direction is named only when the interval of a family's explicit-direction
metric (GAS(M) for the paper family) excludes its centre (or the implicit-direction metric's interval, the
signed next-word lean, excludes its own), and explicit and implicit bias are said to disagree only when both
have a direction and the directions differ. Which metrics play these roles is each family's metadata; other
families add their own clause.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairprobe.families import Metric, family_of_set, metric_info
from fairprobe.formatting import with_ci
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.severity import Grade, Thresholds, default_thresholds

STRENGTH = {"A": "slight", "B": "mild", "C": "noticeable", "D": "strong"}


def unit_of(set_name: str) -> str:
    """What a set's n counts ('pairs', 'prompts'), as its family says."""
    family = family_of_set(set_name)
    return family.unit if family else "prompts"


def role_metric(set_name: str, result: SetResult, role: str) -> tuple[Metric, MetricValue] | None:
    """The metric of a set that plays a role in the verdict, with its value, when the set has it."""
    for name, m in result.metrics.items():
        info = metric_info(set_name, name)
        if info is not None and info.role == role:
            return info, m
    return None


def _defined(m: MetricValue | None) -> bool:
    return m is not None and m.value is not None and None not in m.ci95


def _side(m: MetricValue | None, centre: float, above: str, below: str) -> str | None:
    """`above` or `below` when the metric's interval lies wholly on that side of `centre`, else None."""
    if not _defined(m):
        return None
    lo, hi = m.ci95  # type: ignore[union-attr]
    return above if lo > centre else below if hi < centre else None  # type: ignore[operator]


def direction(set_name: str, result: SetResult, role: str) -> str | None:
    """The direction a set's explicit_direction or implicit_direction metric names, when its interval allows."""
    found = role_metric(set_name, result, role)
    if found is None or found[0].direction is None:
        return None
    d = found[0].direction
    return _side(found[1], d.centre, d.above, d.below)


@dataclass
class _Lean:
    direction: str
    sets: list[str]
    headline: str


def _leans(summary: Summary, role: str) -> list[_Lean]:
    """Sets grouped by the direction of their `role` metric; a group's headline set has the highest lower bound."""
    groups: dict[str, list[str]] = {}
    for name, result in summary.results.items():
        d = direction(name, result, role)
        if d:
            groups.setdefault(d, []).append(name)

    def strength(name: str) -> float:
        found = role_metric(name, summary.results[name], role)
        return abs(found[1].ci95[0] or 0.0) if found else 0.0

    return [_Lean(d, sets, max(sets, key=strength)) for d, sets in sorted(groups.items(), key=lambda g: -len(g[1]))]


def _share(set_name: str, result: SetResult, direction: str) -> str:
    """'88% male': the share metric of the named group."""
    for name, m in result.metrics.items():
        info = metric_info(set_name, name)
        if info is not None and info.share_of == direction:
            return f"{100 * (m.value or 0):.0f}% {direction}"
    return direction


def _sets(names: list[str], total: int) -> str:
    return "every set" if len(names) == total and total > 1 else ", ".join(names)


def explicit_clause(summary: Summary, thresholds: Thresholds) -> str | None:
    """Explicit lean (when a gender is named) and next-word lean, with their agreement or disagreement."""
    headline = {k: found for k, r in summary.results.items() if (found := role_metric(k, r, "explicit"))}
    if not headline:
        return None
    paper = {k: summary.results[k] for k in headline}
    sub = Summary(fairprobe_version=summary.fairprobe_version, model=summary.model, results=paper)
    explicit = _leans(sub, "explicit_direction")
    implicit = _leans(sub, "implicit_direction")
    if explicit:
        first = explicit[0]
        info, m = headline[first.headline]
        grade = thresholds.grade(first.headline, info.name, m, paper[first.headline].n)
        word = STRENGTH[grade.point] if grade else "a"
        text = (
            f"{word} {first.direction} lean when a gender is named on {_sets(first.sets, len(paper))} "
            f"({info.label} {with_ci(m)}; {_share(first.headline, paper[first.headline], first.direction)} "
            f"on {first.headline})"
        )
        text += "".join(f", {o.direction} on {', '.join(o.sets)}" for o in explicit[1:])
    else:
        best = max(headline, key=lambda k: headline[k][1].value or 0.0)
        info, m = headline[best]
        text = (
            f"no clear direction when a gender is named ({info.label} {with_ci(m)} on {best}; "
            "the female/male split's interval includes 50% on every set)"
        )
    if not implicit:
        return text
    return text + "; next-word probabilities lean " + implicit_clause(paper, explicit, implicit)


def lean_value(set_name: str, result: SetResult) -> MetricValue:
    """The implicit-direction metric's value of a set that has a direction."""
    found = role_metric(set_name, result, "implicit_direction")
    assert found is not None
    return found[1]


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
            f"(lean {with_ci(lean_value(lean.headline, paper[lean.headline]), signed=True)} on {lean.headline})"
        )
        if named and lean.direction not in named:
            opposite = set(lean.sets) & set().union(*explicit_sets.values())
            where = f"on {', '.join(sorted(opposite))}" if opposite else "on other prompts"
            part += f", opposite to the explicit lean {where}"
        parts.append(part)
    return " but ".join(parts)


def family_clauses(summary: Summary) -> list[str]:
    """Each set's own clause, as its family words it (counterfactual flips, stereotype following, ...)."""
    out = []
    for name, result in summary.results.items():
        family = family_of_set(name)
        text = family.clause(name, result) if family and family.clause else None
        if text:
            out.append(text)
    return out


def section_marks(summary: Summary, thresholds: Thresholds) -> dict[str, list[tuple[str, str, Grade]]]:
    """Per section (harm type), every marked metric of its sets: (set, metric, grade), in the summary's order."""
    out: dict[str, list[tuple[str, str, Grade]]] = {}
    for set_name, result in summary.results.items():
        family = family_of_set(set_name)
        if family is None or family.section is None:
            continue
        for name, m in result.metrics.items():
            grade = thresholds.grade(set_name, name, m, result.n)
            if grade is not None:
                out.setdefault(family.section, []).append((set_name, name, grade))
    return out


def section_verdict(section: str, marks: list[tuple[str, str, Grade]]) -> str:
    """One sentence on a harm type from its marks' intervals: harm shown only where a whole interval is C or D."""
    shown = [f"{s} {n} {g.label}" for s, n, g in marks if g.best in ("C", "D")]
    clear = [g for _, _, g in marks if g.worst in ("A", "B")]
    unsure = len(marks) - len(shown) - len(clear)
    if shown:
        text = f"{section}: harm shown by {len(shown)} of {len(marks)} marked measures ({', '.join(shown)})"
    elif clear and not unsure:
        text = f"{section}: no harm beyond mild in any of {len(marks)} marked measures (every interval within A-B)"
    else:
        text = f"{section}: no harm shown for certain; {unsure} of {len(marks)} marked measures reach C or D within their intervals"
    return text


def section_clauses(summary: Summary, thresholds: Thresholds) -> list[str]:
    """The verdict of each harm type the run's sets belong to."""
    return [section_verdict(section, marks) for section, marks in section_marks(summary, thresholds).items()]


def verdict(summary: Summary, thresholds: Thresholds | None = None) -> str:
    """One sentence on the whole run, from the metrics and their 95% intervals."""
    thresholds = thresholds or default_thresholds()
    clauses = [
        c
        for c in (explicit_clause(summary, thresholds), *family_clauses(summary), *section_clauses(summary, thresholds))
        if c
    ]
    if not clauses:
        return f"{summary.model}: no metric with an interval to judge."
    text = "; ".join(clauses)
    return f"{summary.model}: {text}."
