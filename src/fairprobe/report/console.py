"""The summary printed at the end of a run: a table that fits the terminal, then the one-sentence verdict."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from fairprobe.records import MetricValue, Summary
from fairprobe.report.severity import Thresholds, default_thresholds

# Metrics that count pairs: printed as whole numbers, never as shares.
COUNT_METRICS = frozenset({"female_only_yes", "male_only_yes"})
# The paper suite's columns in the console (Delta = |2 GAS(F) - 1|; the report and summary.json hold every metric).
PAPER_COLUMNS = ("gas", "gas_f", "gld", "implicit_lean", "log_add", "neutral_share")
COLOURS = {"A": "green", "B": "yellow", "C": "dark_orange", "D": "red"}


def format_metric(m: MetricValue | None, digits: int = 3, name: str = "") -> str:
    """A value with its 95% interval, e.g. `0.412 [0.35, 0.47]`; counts as whole numbers; `n/a` when undefined;
    bounds as `0.1 to 0.5`."""
    if m is not None and m.value is None and m.bounds is not None and None not in m.bounds:
        return f"{m.bounds[0]:.{digits}f} to {m.bounds[1]:.{digits}f}"
    if m is None or m.value is None:
        return "n/a"
    if name in COUNT_METRICS:
        return f"{m.value:.0f}"
    lo, hi = m.ci95
    text = f"{m.value:.{digits}f}"
    if lo is not None and hi is not None:
        text += f" [{lo:.{digits - 1}f}, {hi:.{digits - 1}f}]"
    return text


# Metrics shown first, in this order (paper suite, then fairness suite); others follow alphabetically.
METRIC_ORDER = (
    "gas",
    "gas_f",
    "gas_m",
    "delta",
    "gld",
    "implicit_lean",
    "add",
    "log_add",
    "neutral_share",
    "xe_share",
    "ze_share",
    "ey_share",
    "hit_rate",
    "undetermined_share",
    "mcnemar_p",
    "female_only_yes",
    "male_only_yes",
    "male_yes_share",
    "anti_rate",
    "stereotype_gap",
    "accuracy",
    "dp_difference",
    "eo_difference",
    "accuracy_pro",
    "accuracy_anti",
    "accuracy_gap",
    "gender_effect_she",
    "gender_effect_he",
    "they_female_share",
    "they_first_share",
    "dp_difference_sex_race",
    "eo_difference_sex_race",
    "dp_difference_sex_age",
    "eo_difference_sex_age",
)


def metric_order(name: str) -> tuple[int, str]:
    """Sort key: the headline metrics first, in METRIC_ORDER, then alphabetical."""
    return (METRIC_ORDER.index(name) if name in METRIC_ORDER else len(METRIC_ORDER), name)


def cell(set_name: str, name: str, m: MetricValue | None, n: int, thresholds: Thresholds) -> Text:
    """A metric's console text, coloured by its mark when the whole interval lies in one mark."""
    text = format_metric(m, name=name)
    grade = thresholds.grade(set_name, name, m, n)
    if grade is None:
        return Text(text)
    flag = "" if grade.certain else "?"
    flag += "*" if grade.low_n else ""
    return Text(text + flag, style=COLOURS[grade.point] if grade.certain else "")


def _wide(summary: Summary, names: list[str], thresholds: Thresholds) -> Any:
    from rich.table import Table

    table = Table(title=Text(f"fairprobe summary: {summary.model}"), header_style="bold cyan")
    table.add_column("probe set", style="bold", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    for name in names:
        table.add_column(name, justify="right", no_wrap=True)
    for set_name, result in summary.results.items():
        cells = [cell(set_name, k, result.metrics.get(k), result.n, thresholds) for k in names]
        table.add_row(Text(set_name), str(result.n), *cells)
    return table


def _long(summary: Summary, thresholds: Thresholds) -> Any:
    from rich.table import Table

    notes = any(m.note for r in summary.results.values() for m in r.metrics.values())
    table = Table(title=Text(f"fairprobe summary: {summary.model}"), header_style="bold cyan")
    for col in ("probe set", "n", "metric", "value [95% CI]", *(["note"] if notes else [])):
        table.add_column(col, justify="right" if col in ("n", "value [95% CI]") else "left", no_wrap=col != "note")
    for set_name, result in summary.results.items():
        for i, name in enumerate(sorted(result.metrics, key=metric_order)):
            m = result.metrics[name]
            first = i == 0
            row = [Text(set_name) if first else "", str(result.n) if first else "", Text(name)]
            row.append(cell(set_name, name, m, result.n, thresholds))
            table.add_row(*row, *([Text(m.note or "")] if notes else []))
        table.add_section()
    return table


def summary_table(summary: Summary, width: int = 160, thresholds: Thresholds | None = None) -> Any:
    """One row per set (paper suite, when it fits in `width`), else one row per set and metric.

    Cells never wrap: a value and its interval stay on one line.
    """
    thresholds = thresholds or default_thresholds()
    present = {k for r in summary.results.values() for k in r.metrics}
    names = [k for k in PAPER_COLUMNS if k in present]
    if names and present <= {*METRIC_ORDER[:8], "undetermined", "coverage", "covered_mass"}:
        cells = [max(len(format_metric(r.metrics.get(k), name=k)) + 2 for r in summary.results.values()) for k in names]
        label = max(len(k) for k in summary.results)
        if label + 8 + sum(c + 3 for c in cells) <= width:
            return _wide(summary, names, thresholds)
    return _long(summary, thresholds)


def print_summary(summary: Summary, console: Any = None) -> None:
    """Print the summary table, a legend for its flags, and the one-sentence verdict."""
    from rich.console import Console

    from fairprobe.report.verdict import verdict

    console = console or Console(markup=False)
    console.print(summary_table(summary, console.width))
    console.print(
        "[95% CI]; colour = severity mark; ? = the interval spans several marks; * = fewer than 30 cases; "
        "n/a = undefined on this data. Every metric: summary.json and report.html.",
        style="dim",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print(verdict(summary), markup=False, highlight=False, soft_wrap=True)
