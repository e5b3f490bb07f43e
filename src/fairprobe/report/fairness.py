"""The fairness suite's console view: one row per metric (its sets have different metrics), values with CIs."""

from __future__ import annotations

from rich.table import Table

from fairprobe.records import Summary
from fairprobe.report.console import format_metric, metric_order


def fairness_table(summary: Summary) -> Table:
    """Rows of (probe set, metric, value [95% CI], note) for every set in the summary."""
    table = Table(title=f"fairprobe fairness summary: {summary.model}", header_style="bold cyan")
    for col in ("probe set", "n", "metric", "value [95% CI]", "note"):
        table.add_column(col, justify="right" if col in ("n", "value [95% CI]") else "left")
    for set_name, result in summary.results.items():
        names = sorted(result.metrics, key=metric_order)
        for i, name in enumerate(names):
            metric = result.metrics[name]
            table.add_row(
                set_name if i == 0 else "",
                str(result.n) if i == 0 else "",
                name,
                format_metric(metric),
                metric.note or "",
            )
        table.add_section()
    return table
