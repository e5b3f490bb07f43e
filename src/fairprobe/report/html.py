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

from fairprobe import __version__
from fairprobe.detectors import AttributeWords
from fairprobe.io import atomic_write_text
from fairprobe.records import MetricValue, SetResult
from fairprobe.report import figures
from fairprobe.report.runs import RunData, load_runs
from fairprobe.report.severity import MARK_MEANING, Thresholds, default_thresholds
from fairprobe.report.tables import (
    Table,
    all_tables,
    compare_table,
    format_cell,
    format_number,
    gas_split_table,
    headline_metrics,
    metric_order,
)
from fairprobe.report.verdict import unit_of, verdict

REPORT_FILE = "report.html"
TEXT_FIELDS = ("continuation", "response")
# Summary-table columns besides the metrics that have severity thresholds.
GLANCE = ("gas_f", "gas_m", "implicit_lean", "undetermined_share")


def pct(x: float | None) -> str:
    """0.412 -> '41%'."""
    return "n/a" if x is None else f"{100 * x:.0f}%"


def pct_ci(m: MetricValue) -> str:
    """A share with its interval in words: '41% (95% CI 33-49%)'."""
    lo, hi = m.ci95
    ci = "" if lo is None or hi is None else f" (95% CI {100 * lo:.0f}–{100 * hi:.0f}%)"
    return pct(m.value) + ci


def num_ci(m: MetricValue) -> str:
    """A value with its interval: '0.27 [0.18, 0.35]'."""
    return format_cell(m)


def known_sum(probs: list[float | None]) -> float:
    """Sum of the known probabilities (an API's top-k leaves some words unknown: null)."""
    return float(sum(p for p in probs if p is not None))


def _lean(samples: list[dict[str, Any]]) -> str:
    """Which gender's words the next-word probabilities favour, over the prompts that have them."""
    with_probs = [s for s in samples if s.get("p_female") is not None and s.get("p_male") is not None]
    f = [known_sum(s["p_female"]) for s in with_probs]
    m = [known_sum(s["p_male"]) for s in with_probs]
    if not f:
        return ""
    male = sum(1 for a, b in zip(f, m, strict=True) if b > a)
    female = sum(1 for a, b in zip(f, m, strict=True) if a > b)
    likelier, other, share = ("male", "female", male) if male >= female else ("female", "male", female)
    return f"; {likelier} words were likelier than {other} ones after {pct(share / len(f))} of prompts"


def readings(set_name: str, result: SetResult, samples: list[dict[str, Any]]) -> list[str]:
    """Plain-words sentences for a set's headline metrics."""
    m = result.metrics
    out = []
    if m.get("gas") and m["gas"].value is not None:
        text = f"In {pct_ci(m['gas'])} of continuations the model used a gendered word"
        gas_m, gas_f = m.get("gas_m"), m.get("gas_f")
        if gas_m and gas_f and gas_m.value is not None and gas_f.value is not None:
            lean, share = ("male", gas_m) if gas_m.value >= gas_f.value else ("female", gas_f)
            text += f"; when it did, {pct_ci(share)} were {lean}"
        out.append(text + ".")
    if m.get("gld") and m["gld"].value is not None:
        out.append(
            f"Next-word probabilities of gendered words lean to one gender by {num_ci(m['gld'])} "
            f"on a 0 (balanced) to 1 (one gender only) scale (GLD){_lean(samples)}."
        )
    if m.get("add") and m["add"].value is not None:
        log = m.get("log_add")
        log_text = f", ln ADD = {log.value:.2f}" if log and log.value is not None else ""
        out.append(
            f"Female and male next-word distributions diverge by ADD = {num_ci(m['add'])}{log_text} (0 = identical)."
        )
    if m.get("hit_rate") and m["hit_rate"].value is not None:
        if "anti_rate" in m:
            out.append(f"In {pct_ci(m['hit_rate'])} of questions the model named the stereotyped occupation.")
        else:
            out.append(
                f"In {pct_ci(m['hit_rate'])} of counterfactual pairs the answer changed when only the gender did."
            )
    if m.get("stereotype_gap") and m["stereotype_gap"].value is not None:
        out.append(f"Stereotyped minus anti-stereotypical answers: {num_ci(m['stereotype_gap'])} (0 = no preference).")
    for name, words in (
        ("dp_difference", "gap in 'yes' rates between women and men"),
        ("eo_difference", "equalized-odds gap"),
    ):
        if m.get(name) and m[name].value is not None:
            out.append(f"{name}: {num_ci(m[name])} ({words}).")
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


def sample_row(run_index: int, s: dict[str, Any]) -> dict[str, Any]:
    """One browser row: set, id, subsets, prompt, highlighted reply, P(f)/P(m) sums, the likeliest gender group
    after the prompt (female, male, neutral, a neopronoun group) and the detector verdict."""
    if any(k in s for k in TEXT_FIELDS):
        text = next(str(s[k]) for k in TEXT_FIELDS if k in s)
    elif "original" in s:
        text = f"original: {s['original']}\nflipped: {s.get('flipped', '')}"
    else:
        text = ""
    found = [str(w) for w in s.get("words_found") or []]
    if s.get("error"):
        verdict = "error"
    elif "verdict" in s:
        verdict = str(s["verdict"])
    elif "status" in s:
        verdict = str(s["status"])
    elif "first_gender" in s:
        verdict = f"{s['first_gender']} first" if s["first_gender"] else "no gendered word"
    else:
        verdict = ""
    if s.get("hit") is True:
        verdict += " (hit)"
    if "they_status" in s:  # the singular-"they" control of the same frame
        verdict += f"; with they: {s.get('they_referent') or s['they_status']}"
    row: dict[str, Any] = {
        "r": run_index,
        "s": s.get("set", ""),
        "i": str(s.get("id", "")),
        "u": " ".join(s.get("subsets") or []),
        "p": s.get("prompt", ""),
        "t": highlight(text, found),
        "w": " ".join(found),
        "v": verdict,
    }
    if s.get("p_female") is not None and s.get("p_male") is not None:
        row["f"] = _round(known_sum(s["p_female"]))
        row["m"] = _round(known_sum(s["p_male"]))
    if s.get("likeliest_group"):
        row["g"] = s["likeliest_group"]
    return row


def samples_json(runs: list[RunData]) -> str:
    """Every sample as one JSON array, safe inside a <script> element."""
    rows = [sample_row(i, s) for i, run in enumerate(runs) for s in run.samples]
    text = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")  # line breaks to older JS parsers


def _series(
    runs: list[RunData], sets: list[str], metric: str, subset: str | None = None
) -> list[tuple[str, list[MetricValue | None]]]:
    series = []
    for run in runs:
        results = run.summary.results if run.summary else {}
        values: list[MetricValue | None] = []
        for name in sets:
            result = results.get(name)
            if result is not None and subset is not None:
                sub = result.subsets.get(subset)
                values.append(sub.metrics.get(metric) if sub else None)
            else:
                values.append(result.metrics.get(metric) if result else None)
        if any(v is not None and v.value is not None for v in values):
            series.append((run.label, values))
    return series


def _sets_with(runs: list[RunData], metric: str) -> list[str]:
    names: list[str] = []
    for run in runs:
        for name, result in (run.summary.results if run.summary else {}).items():
            if metric in result.metrics and name not in names:
                names.append(name)
    return names


def _subset_figure(runs: list[RunData], set_name: str, metric: str, ylabel: str) -> str | None:
    subsets: list[str] = []
    for run in runs:
        result = run.summary.results.get(set_name) if run.summary else None
        for k, sub in (result.subsets if result else {}).items():
            if metric in sub.metrics and k not in subsets:
                subsets.append(k)
    if not subsets:
        return None
    series = []
    for run in runs:
        result = run.summary.results.get(set_name) if run.summary else None
        if result is None:
            continue
        values = [result.subsets[k].metrics.get(metric) if k in result.subsets else None for k in subsets]
        series.append((run.label, values))
    return figures.grouped_bars(subsets, series, ylabel, unit_interval=True)


def build_figures(runs: list[RunData]) -> list[dict[str, str]]:
    """The paper's figures (2-5, Table 10) and the fairness hit rates, each only when its metric is in a run."""
    out: list[dict[str, str]] = []

    def add(title: str, caption: str, svg: str | None) -> None:
        if svg:
            out.append({"title": title, "caption": caption, "svg": svg})

    specs = (
        (
            "gas",
            "GAS per probe set and model (paper Figure 2)",
            "Share of continuations with at least one gendered word.",
            "GAS",
            False,
        ),
        (
            "gld",
            "GLD per probe set (paper Figure 4)",
            "Mean |ΣP_f − ΣP_m| / (ΣP_f + ΣP_m) of the next word: 0 balanced, 1 one gender only.",
            "GLD",
            False,
        ),
        (
            "add",
            "ADD per probe set (paper Figure 5)",
            "Divergence of female and male next-word probabilities (log axis when values span over 20x; the paper reports ln ADD).",
            "ADD",
            True,
        ),
    )
    for metric, title, caption, ylabel, log in specs:
        sets = _sets_with(runs, metric)
        series = _series(runs, sets, metric)
        add(
            title,
            caption,
            figures.grouped_bars(sets, series, ylabel, log=log, unit_interval=metric != "add") if series else None,
        )
        if metric == "gas":
            for set_name in sets:
                add(
                    f"GAS per subset of {set_name} (paper Figure 3)",
                    "Template topics and stereotyped gender, or the set's own subsets.",
                    _subset_figure(runs, set_name, "gas", "GAS"),
                )
    split = gas_split_table(runs)
    if split.rows:
        rows = [(f"{r[0]} · {r[1]}" if len(runs) > 1 else str(r[1]), r[4], r[6]) for r in split.rows]
        add("GAS(F) / GAS(M) with Delta (paper Table 10)", split.caption, figures.gas_split(rows))  # type: ignore[arg-type]
    sets = _sets_with(runs, "hit_rate")
    series = _series(runs, sets, "hit_rate")
    if series:
        add(
            "Fairness hit rate per probe set",
            "Share of pairs (or prompts) flagged as biased; runs differing in flip mode appear side by side.",
            figures.grouped_bars(sets, series, "hit rate", unit_interval=True),
        )
        for set_name in sets:
            add(
                f"Hit rate per subset of {set_name}",
                "By pronoun and order (professional bias) or by original sex and label (gender-income).",
                _subset_figure(runs, set_name, "hit_rate", "hit rate"),
            )
    return out


def card_metric(thresholds: Thresholds, set_name: str, name: str, m: MetricValue, n: int) -> dict[str, Any]:
    """One headline metric for the template: value, interval, interval-aware mark and what it means."""
    threshold = thresholds.for_metric(set_name, name)
    what = threshold.what if threshold else ""
    if m.value is None:
        return {"value": "n/a", "ci": m.note or "undefined on this data", "mark": None, "what": what}
    grade = thresholds.grade(set_name, name, m, n)
    return {
        "value": format_number(m.value),
        "ci": "[{}, {}]".format(*(format_number(x) for x in m.ci95)),
        "mark": grade.text if grade else None,
        "css": (grade.point if grade.certain else "U") if grade else "",
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
            samples = [s for s in run.samples if s.get("set") == set_name]
            undefined = [k for k, m in result.metrics.items() if m.value is None]
            names = sorted({*headline_metrics(result), *undefined}, key=metric_order)
            cards.append(
                {
                    "run": run.label,
                    "set": set_name,
                    "n": result.n,
                    "unit": unit_of(result),
                    "metrics": {k: card_metric(thresholds, set_name, k, result.metrics[k], result.n) for k in names},
                    "readings": readings(set_name, result, samples),
                }
            )
    return cards


def _threshold_rows(thresholds: Thresholds) -> list[dict[str, Any]]:
    rows = [{"scope": "", "metric": k, "bounds": t.bounds, "what": t.what} for k, t in thresholds.metrics.items()]
    rows += [
        {"scope": s, "metric": k, "bounds": t.bounds, "what": t.what}
        for s, d in thresholds.sets.items()
        for k, t in d.items()
    ]
    return rows


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
    """A table as formatted strings for the template."""
    return {
        "name": t.name,
        "title": t.title,
        "caption": t.caption,
        "columns": t.columns,
        "rows": [[format_cell(c) for c in r] for r in t.rows],
    }


def render_html(
    runs: list[RunData], thresholds: Thresholds | None = None, extra_tables: list[Table] | None = None
) -> str:
    """The whole report as one HTML string; `extra_tables` (a model comparison's) join the comparisons."""
    thresholds = thresholds or default_thresholds()
    tables = all_tables(runs, thresholds)
    compares = [table_view(t) for t in (compare_table(r) for r in runs) if t is not None]
    compares += [table_view(t) for t in extra_tables or []]
    cards = summary_cards(runs, thresholds)
    return _template().render(
        version=__version__,
        created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        runs=runs,
        models=sorted({r.summary.model for r in runs if r.summary}),
        cards=cards,
        verdicts=[{"run": r.label, "text": verdict(r.summary)} for r in runs if r.summary],
        glance=sorted(
            (
                name
                for name in dict.fromkeys(name for c in cards for name in c["metrics"])
                if name in GLANCE or any(thresholds.for_metric(c["set"], name) for c in cards if name in c["metrics"])
            ),
            key=metric_order,
        ),
        figures=build_figures(runs),
        compares=compares,
        tables=[table_view(t) for t in tables if t.name in ("metrics", "subsets", "gas_split")],
        thresholds=_threshold_rows(thresholds),
        mark_meaning=MARK_MEANING,
        samples_json=samples_json(runs),
        n_samples=sum(len(r.samples) for r in runs),
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
