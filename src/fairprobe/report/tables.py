"""Every table of a report (metrics, subsets, the families' own, comparisons) and their Markdown and CSV exports."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Any

from fairprobe.families import MetricTable, all_families, metric_info, metric_order
from fairprobe.formatting import format_metric, format_number, markdown_table
from fairprobe.records import MetricValue, SetResult
from fairprobe.report.runs import RunData
from fairprobe.report.severity import Thresholds

Cell = str | int | float | MetricValue | None

P_VALUE_KEY = re.compile(r"^(p|pvalue|p_value)$|_p$|_p_value$|_pvalue$")


@dataclass
class Table:
    """A titled table; a MetricValue cell is `value [lo, hi]` in Markdown and three columns in CSV."""

    name: str
    title: str
    columns: list[str]
    rows: list[list[Cell]]
    caption: str = ""


def format_cell(cell: Cell) -> str:
    """A cell as text: numbers to 3 significant digits, metrics as `value [lo, hi]`."""
    if isinstance(cell, MetricValue):
        return format_metric(cell, digits=None)
    if isinstance(cell, int | float):
        return format_number(cell)
    return "" if cell is None else str(cell)


def percent(x: float | None) -> str | None:
    """A relative change as a signed percentage: 2.5 -> '+250%' (as compare.md writes it)."""
    return None if x is None else f"{x:+.0%}"


def significance(p: float | None) -> str:
    """The usual marks: *** p < 0.001, ** p < 0.01, * p < 0.05."""
    if p is None:
        return ""
    return "***" if p < 0.001 else "**" if p < 0.01 else "*" if p < 0.05 else ""


def _metric_rows(runs: list[RunData], thresholds: Thresholds, subsets: bool) -> list[list[Cell]]:
    rows: list[list[Cell]] = []
    for run in runs:
        if run.summary is None:
            continue
        for set_name, result in run.summary.results.items():
            parts: list[tuple[str, int, dict[str, MetricValue]]] = (
                [(k, s.n, s.metrics) for k, s in result.subsets.items()]
                if subsets
                else [("", result.n, result.metrics)]
            )
            for subset, n, metrics in parts:
                for name in sorted(metrics, key=metric_order):
                    m = metrics[name]
                    lo, hi = m.ci95
                    head: list[Cell] = [run.label, set_name, subset] if subsets else [run.label, set_name]
                    grade = thresholds.grade(set_name, name, m, n)
                    value: Cell = format_metric(m, digits=None) if m.value is None else m.value
                    rows.append([*head, n, name, value, lo, hi, grade.label if grade else ""])
    return rows


def metrics_table(runs: list[RunData], thresholds: Thresholds) -> Table:
    """Every metric of every probe set and run, with its 95% interval and severity mark (interval-aware, low n flagged)."""
    columns = ["run", "set", "n", "metric", "value", "ci95_low", "ci95_high", "mark"]
    return Table("metrics", "Metrics per probe set", columns, _metric_rows(runs, thresholds, subsets=False))


def subsets_table(runs: list[RunData], thresholds: Thresholds) -> Table:
    """Every metric per subset (template topic, stereotyped gender, pronoun, order ...)."""
    columns = ["run", "set", "subset", "n", "metric", "value", "ci95_low", "ci95_high", "mark"]
    return Table("subsets", "Metrics per subset", columns, _metric_rows(runs, thresholds, subsets=True))


def family_table(runs: list[RunData], spec: MetricTable) -> Table:
    """A family's own table (e.g. the paper's Table 10) over the sets that have its metrics."""
    rows: list[list[Cell]] = []
    for run in runs:
        for set_name, result in (run.summary.results if run.summary else {}).items():
            if spec.columns[1][1] in result.metrics:
                get = result.metrics.get
                rows.append([run.label, set_name, result.n, *(get(metric) for _, metric in spec.columns)])
    return Table(spec.name, spec.title, ["run", "set", "n", *(h for h, _ in spec.columns)], rows, spec.caption)


def family_tables(runs: list[RunData]) -> list[tuple[MetricTable, Table]]:
    """Every registered family's own tables, with their specs."""
    return [(spec, family_table(runs, spec)) for family in all_families() for spec in family.tables]


def _metric_leaves(
    obj: Any, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], dict[str, Any], dict[str, Any]]]:
    """(path, leaf, parent) for every {"value": ...} object nested in a comparison JSON."""
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if isinstance(value, dict) and "value" in value:
                found.append(((*path, str(key)), value, obj))
            elif isinstance(value, dict | list):
                found.extend(_metric_leaves(value, (*path, str(key))))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            label = str(value.get("name") or value.get("method") or i) if isinstance(value, dict) else str(i)
            found.extend(_metric_leaves(value, (*path, label)))
    return found


def _p_value(name: str, leaf: dict[str, Any], parent: dict[str, Any]) -> float | None:
    for key, value in leaf.items():
        if P_VALUE_KEY.search(key) and isinstance(value, int | float):
            return float(value)
    for key in (f"{name}_p", f"{name}_p_value", f"{name}_pvalue"):
        if isinstance(parent.get(key), int | float):
            return float(parent[key])
    return None


# The drift measures `fairprobe compare` writes per method (mitigation/drift.py), in display order.
DRIFT_COLUMNS = {
    "fluency_nll": "fluency NLL",
    "on_subject": "on-subject",
    "distinct_2": "distinct-2",
    "garbage": "empty/garbage",
}


def _vs_original(vs: dict[str, Any], name: str) -> Cell:
    """A GLD/ADD difference against Original: the difference, or why there is none to test."""
    test = vs.get(name) or {}
    if test.get("unchanged_by_design"):
        return "unchanged by design"
    if test.get("equal"):
        return "equal"
    return MetricValue(**test["difference"]) if "difference" in test else None


def _p_of(test: dict[str, Any]) -> float | None:
    """A test's Holm-corrected p-value (its raw one where it has none; None for an untested difference)."""
    return test.get("p_holm", test.get("p_mcnemar", test.get("p")))


def _marks(tests: dict[str, dict[str, Any]]) -> list[str]:
    """['GAS**', 'ADD*']: the measures whose Holm-corrected test against Original is significant."""
    return [f"{k}{significance(_p_of(t))}" for k, t in tests.items() if significance(_p_of(t))]


def label_of(name: str) -> str:
    """A metric's declared label (its name when no family declares it)."""
    info = metric_info(None, name)
    return info.label if info else name


def method_cells(row: dict[str, Any], shown: list[str], mcnemar: list[str], differences: list[str]) -> list[Cell]:
    """One method's cells after set, method and n: metrics, paired tests against Original, significance."""
    metrics = {k: MetricValue(**v) for k, v in row.get("metrics", {}).items()}
    vs = row.get("vs_original", {})
    cells: list[Cell] = [metrics.get(k) for k in shown]
    for k in mcnemar:
        cells += [percent(vs.get(k, {}).get("relative_change")), vs.get(k, {}).get("p_mcnemar")]
    cells += [_vs_original(vs, k) for k in differences]
    return [*cells, ", ".join(_marks({label_of(k): vs[k] for k in [*mcnemar, *differences] if k in vs}))]


def drift_cells(row: dict[str, Any]) -> list[Cell]:
    """One method's perplexity, drift measures and their significance against Original."""
    drift = {k: MetricValue(**v) for k, v in row.get("drift", {}).items()}
    marks = _marks(row.get("drift_vs_original", {}))
    return [row.get("perplexity"), *(drift.get(k) for k in DRIFT_COLUMNS), ", ".join(marks)]


def methods_tables(compare: dict[str, Any], name: str) -> list[Table]:
    """`fairprobe compare` output (sets -> methods -> metrics, vs_original, perplexity, drift) as the paper's Tables
    1-3 in two tables, so each fits a page: the bias metrics the file holds (in their declared order, by their
    labels) with their paired tests against Original (a McNemar-tested metric's relative change and p, a
    bootstrap-tested one's difference), then perplexity and drift. `sig` lists what differs from Original by its
    Holm-corrected test (* / ** / ***). [] for another shape.
    """
    sets = compare.get("sets")
    if not isinstance(sets, dict) or not all(isinstance(v, dict) and "methods" in v for v in sets.values()):
        return []
    rows_in = [row for result in sets.values() for row in result["methods"].values()]
    shown = sorted({k for row in rows_in for k in row.get("metrics", {})}, key=metric_order)
    tested = sorted({k for row in rows_in for k in row.get("vs_original", {})}, key=metric_order)
    mcnemar = [k for k in tested if any("p_mcnemar" in r.get("vs_original", {}).get(k, {}) for r in rows_in)]
    differences = [k for k in tested if k not in mcnemar]
    bias: list[list[Cell]] = []
    drift: list[list[Cell]] = []
    for set_name, result in sets.items():
        for method, row in sorted(result["methods"].items(), key=lambda item: item[0] != "Original"):
            bias.append([set_name, method, row.get("n"), *method_cells(row, shown, mcnemar, differences)])
            drift.append([set_name, method, *drift_cells(row)])
    columns = ["set", "method", "n", *(label_of(k) for k in shown)]
    columns += [c for k in mcnemar for c in (f"{label_of(k)} rel. change", "p (McNemar)")]
    columns += [f"{label_of(k)} diff" for k in differences]
    drawn = "".join(f" Limited run: {k} {v['drawn']}." for k, v in sets.items() if v.get("drawn"))
    return [
        Table(
            "compare",
            f"Mitigation comparison: {name}",
            [*columns, "sig"],
            bias,
            "Differences are method - Original on the same prompts. sig: what differs from Original by its "
            "Holm-corrected paired test (* p < 0.05, ** p < 0.01, *** p < 0.001): McNemar-tested metrics by exact "
            "McNemar, the others by paired bootstrap. Decoding-only methods leave next-word probabilities unchanged "
            "by design (not tested); differences within 1e-06 on every prompt are equal (not tested)." + drawn,
        ),
        Table(
            "compare_drift",
            f"Mitigation comparison: {name}: perplexity and drift",
            ["set", "method", "perplexity", *DRIFT_COLUMNS.values(), "sig"],
            drift,
            "What a method costs: perplexity of the sets' sentences, and the drift measures (fluency NLL under the "
            "base model, on-subject and garbage rates, distinct-2); sig: their Holm-corrected paired tests against "
            "Original.",
        ),
    ]


def compare_tables(run: RunData) -> list[Table]:
    """A comparison JSON as tables: `fairprobe compare` output as methods x sets, any other shape read generically.

    Generic reading: one row per path to its metrics, one column per metric, significance marked.

    The comparison file is read generically: every nested `{"value": v, "ci95": [lo, hi]}` is a cell whose
    column is its key and whose row is the path of keys above it; a p-value beside it (`p`, `p_value`,
    `*_p` in the cell, or `METRIC_p` next to it) adds * / ** / ***.
    """
    if run.compare is None:
        return []
    known = methods_tables(run.compare, run.path.name)
    if known:
        return known
    leaves = _metric_leaves(run.compare)
    if not leaves:
        return []
    columns: list[str] = []
    rows: dict[str, dict[str, str]] = {}
    for path, leaf, parent in leaves:
        metric, row = path[-1], " / ".join(path[:-1])
        if metric not in columns:
            columns.append(metric)
        cell = MetricValue(value=leaf.get("value"), ci95=tuple(leaf.get("ci95") or (None, None)))  # type: ignore[arg-type]
        p = _p_value(metric, leaf, parent)
        text = format_cell(cell)
        if p is not None:
            text += f" (p={p:.2g}){significance(p)}"
        rows.setdefault(row, {})[metric] = text
    columns.sort(key=metric_order)
    return [
        Table(
            "compare",
            f"Comparison: {run.path.name}",
            ["row", *columns],
            [[row, *[cells.get(c, "") for c in columns]] for row, cells in rows.items()],
            "* p < 0.05, ** p < 0.01, *** p < 0.001 (as reported in the comparison file).",
        )
    ]


def all_tables(runs: list[RunData], thresholds: Thresholds) -> list[Table]:
    """Every table of a report, empty ones left out."""
    tables = [metrics_table(runs, thresholds), subsets_table(runs, thresholds), *(t for _, t in family_tables(runs))]
    tables.extend(t for r in runs for t in compare_tables(r))
    return [t for t in tables if t.rows]


def to_markdown(tables: list[Table]) -> str:
    """GitHub Markdown: a heading and a pipe table per table."""
    parts = []
    for t in tables:
        lines = [f"### {t.title}", ""]
        if t.caption:
            lines += [t.caption, ""]
        lines += markdown_table(list(t.columns), [[format_cell(c) for c in row] for row in t.rows])
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def _csv_header(t: Table) -> list[str]:
    header = []
    for i, col in enumerate(t.columns):
        if any(isinstance(row[i], MetricValue) for row in t.rows):
            header += [col, f"{col}_ci95_low", f"{col}_ci95_high"]
        else:
            header.append(col)
    return header


def to_csv(t: Table) -> str:
    """One table as CSV with full-precision numbers; a metric cell becomes value, ci95_low, ci95_high."""
    expand = [any(isinstance(row[i], MetricValue) for row in t.rows) for i in range(len(t.columns))]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([inert_cell(c) for c in _csv_header(t)])
    for row in t.rows:
        out: list[Any] = []
        for cell, wide in zip(row, expand, strict=True):
            if wide:
                m = cell if isinstance(cell, MetricValue) else MetricValue(value=None)
                out += [m.value, *m.ci95]
            else:
                out.append(cell)
        writer.writerow([inert_cell(c) for c in out])
    return buffer.getvalue()


# A text cell a spreadsheet would run as a formula: it starts with =, @, a tab or a carriage return, or with
# + or - without being a plain number ("-0.25" stays a number, "-2+3" and "+cmd|..." do not run).
_FORMULA_START = ("=", "@", "\t", "\r", "+", "-")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?%?")


def inert_cell(cell: Any) -> Any:
    """A CSV cell as written: None empty, numbers as they are, a text that a spreadsheet would read as a formula
    prefixed with ' (OWASP's advice), so opening an export never runs what a model, server or file wrote."""
    if cell is None:
        return ""
    if isinstance(cell, str) and cell.startswith(_FORMULA_START) and not _PLAIN_NUMBER.fullmatch(cell):
        return "'" + cell
    return cell


def headline_metrics(set_name: str, result: SetResult) -> list[str]:
    """The metrics of a set worth a summary card: those with an interval, in display order, unless kept off cards."""
    return [
        k
        for k in sorted(result.metrics, key=metric_order)
        if None not in result.metrics[k].ci95
        and result.metrics[k].value is not None
        and ((info := metric_info(set_name, k)) is None or info.card)
    ]
