"""The fairness suite's console view: one row per metric (its sets have different metrics), values with CIs."""

from __future__ import annotations

from rich.table import Table

from fairprobe.records import Summary
from fairprobe.report.console import format_metric

# The metrics each fairness set shows first, in this order; the rest follow alphabetically.
HEADLINE = (
    "hit_rate",
    "undetermined_share",
    "mcnemar_p",
    "female_only_yes",
    "male_only_yes",
    "anti_rate",
    "stereotype_gap",
    "accuracy",
    "dp_difference",
    "eo_difference",
    "accuracy_pro",
    "accuracy_anti",
    "accuracy_gap",
)


def fairness_table(summary: Summary) -> Table:
    """Rows of (probe set, metric, value [95% CI], note) for every set in the summary."""
    table = Table(title=f"fairprobe fairness summary: {summary.model}", header_style="bold cyan")
    for col in ("probe set", "n", "metric", "value [95% CI]", "note"):
        table.add_column(col, justify="right" if col in ("n", "value [95% CI]") else "left")
    for set_name, result in summary.results.items():
        names = sorted(result.metrics, key=lambda k: (HEADLINE.index(k) if k in HEADLINE else len(HEADLINE), k))
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
