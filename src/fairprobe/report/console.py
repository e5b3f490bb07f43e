"""The summary printed at the end of a run: a table that fits the terminal, then the one-sentence verdict."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from fairprobe import formatting
from fairprobe.families import metric_info, metric_order
from fairprobe.records import MetricValue, Summary
from fairprobe.report.severity import Thresholds, default_thresholds

COLOURS = {"A": "green", "B": "yellow", "C": "dark_orange", "D": "red"}


def format_metric(m: MetricValue | None, digits: int = 3, name: str = "", set_name: str | None = None) -> str:
    """A value with its 95% interval, e.g. `0.412 [0.35, 0.47]`; counts as whole numbers; `n/a` when undefined;
    bounds as `0.1 to 0.5`."""
    info = metric_info(set_name, name) if name else None
    return formatting.format_metric(m, digits, count=bool(info and info.count))


def cell(set_name: str, name: str, m: MetricValue | None, n: int, thresholds: Thresholds) -> Text:
    """A metric's console text, coloured by its mark when the whole interval lies in one mark."""
    text = format_metric(m, name=name, set_name=set_name)
    grade = thresholds.grade(set_name, name, m, n)
    if grade is None:
        return Text(text + "~", style="grey50") if m is not None and m.too_little_data else Text(text)
    if grade.too_little is not None:
        return Text(text + "~", style="grey50")
    return Text(text + ("" if grade.certain else "?"), style=COLOURS[grade.point] if grade.certain else "")


def header(name: str) -> str:
    """A column header: a long metric name broken at its underscores, so the header is never wider than a value."""
    return name.replace("_", "_\n") if len(name) > 14 else name


def _wide(summary: Summary, names: list[str], thresholds: Thresholds) -> Any:
    from rich.table import Table

    table = Table(title=Text(f"fairprobe summary: {summary.model}"), header_style="bold cyan")
    table.add_column("probe set", style="bold", no_wrap=True)
    table.add_column("n", justify="right", no_wrap=True)
    for name in names:
        table.add_column(header(name), justify="right", no_wrap=True)
    for set_name, result in summary.results.items():
        cells = [
            cell(set_name, k, result.metrics[k], result.n, thresholds) if k in result.metrics else Text("")
            for k in names
        ]
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


def summary_table(summary: Summary, width: int = 180, thresholds: Thresholds | None = None) -> Any:
    """One row per set when every metric is a column or set aside and it fits in `width`, else one per set and metric.

    Cells never wrap: a value and its interval stay on one line.
    """
    thresholds = thresholds or default_thresholds()
    infos = [metric_info(s, k) for s, r in summary.results.items() for k in r.metrics]
    names = sorted({i.name for i in infos if i and i.console == "column"}, key=metric_order)
    if names and all(i and i.console for i in infos):
        cells = [
            max(len(format_metric(r.metrics.get(k), name=k, set_name=s)) + 1 for s, r in summary.results.items())
            for k in names
        ]
        label = max(len(k) for k in summary.results)
        if label + 8 + sum(c + 3 for c in cells) <= width:
            return _wide(summary, names, thresholds)
    return _long(summary, thresholds)


def print_summary(summary: Summary, console: Any = None) -> None:
    """Print the summary table, a legend for its flags, and the one-sentence verdict."""
    from rich.console import Console

    console = console or Console(markup=False)
    console.print(summary_table(summary, console.width))
    console.print(
        "[95% CI]; colour = severity mark (green slight, yellow mild, orange noticeable, red strong); ? = the interval "
        "spans several marks; ~ = too little data to judge (no mark); n/a = undefined on this data. "
        "Every metric: summary.json and report.html.",
        style="dim",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    print_verdict(summary, console)


def print_verdict(summary: Summary, console: Any) -> None:
    """The verdict, then, for a run with harm types, one line saying where its draws are (not the list)."""
    from fairprobe.report.verdict import drawn_line, verdict

    console.print(verdict(summary), markup=False, highlight=False, soft_wrap=True)
    if line := drawn_line(summary):
        console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)


def _leaderboard_columns(obj: dict[str, Any], width: int) -> list[str]:
    """The headline columns that fit `width`: each set's sort metric first, then its family's console columns in
    their order, as many as fit beside the set and model names."""
    wanted: list[str] = []
    for entry in obj["sets"]:
        present = {k for r in entry["rows"] for k in r["metrics"]}
        console = [
            k
            for k in sorted(present, key=metric_order)
            if (i := metric_info(entry["set"], k)) and i.console == "column"
        ]
        for name in [entry["sort_by"], *console]:
            if name and name not in wanted:
                wanted.append(name)
    names = [len(e["set"]) for e in obj["sets"]] + [len(r["model"]) for e in obj["sets"] for r in e["rows"]]
    used = max(names, default=10) * 2 + 12
    chosen = []
    for name in wanted:
        cells = [
            len(format_metric(MetricValue(**r["metrics"][name]), name=name))
            for e in obj["sets"]
            for r in e["rows"]
            if name in r["metrics"]
        ]
        need = max([len(header(name).split("\n")[0]), *cells]) + 4
        if used + need <= width:
            chosen.append(name)
            used += need
    return chosen


def leaderboard_table(obj: dict[str, Any], width: int = 180) -> Any:
    """A comparison at a glance: per set, the models in rank order with the headline columns that fit `width` (each
    set's sort metric, then its family's console columns); every metric is in leaderboard.md and report.html."""
    from rich.table import Table

    names = _leaderboard_columns(obj, width)
    table = Table(title=Text("model comparison (best first)"), header_style="bold cyan")
    for col in ("probe set", "#", "model", *names):
        table.add_column(header(col), justify="left" if col in ("probe set", "model") else "right", no_wrap=True)
    for entry in obj["sets"]:
        for rank, row in enumerate(entry["rows"], start=1):
            cells = [
                cell(entry["set"], k, MetricValue(**row["metrics"][k]), row["n"], default_thresholds())
                if k in row["metrics"]
                else Text("")
                for k in names
            ]
            table.add_row(Text(entry["set"] if rank == 1 else ""), str(rank), Text(row["model"]), *cells)
        table.add_section()
    return table
