"""The coloured summary table printed at the end of a run."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from fairprobe.records import MetricValue, Summary


def format_metric(m: MetricValue | None, digits: int = 3) -> str:
    """A value with its 95% interval, e.g. `0.412 [0.35, 0.47]`; `n/a` when unavailable; bounds as `0.1 to 0.5`."""
    if m is not None and m.value is None and m.bounds is not None and None not in m.bounds:
        return f"{m.bounds[0]:.{digits}f} to {m.bounds[1]:.{digits}f}"
    if m is None or m.value is None:
        return "n/a"
    lo, hi = m.ci95
    text = f"{m.value:.{digits}f}"
    if lo is not None and hi is not None:
        text += f" [{lo:.{digits - 1}f}, {hi:.{digits - 1}f}]"
    return text


def summary_table(summary: Summary, metrics: list[str] | None = None) -> Table:
    """One row per probe set, one column per metric (the set's own metrics when not given)."""
    names = metrics or sorted({k for r in summary.results.values() for k in r.metrics}, key=metric_order)
    table = Table(title=f"fairprobe summary: {summary.model}", header_style="bold cyan")
    table.add_column("probe set", style="bold", no_wrap=True)
    table.add_column("n", justify="right")
    for name in names:
        table.add_column(name, justify="right")
    for set_name, result in summary.results.items():
        cells = [format_metric(result.metrics.get(n)) for n in names]
        table.add_row(
            set_name, str(result.n), *[_colour(n, result.metrics.get(n), c) for n, c in zip(names, cells, strict=True)]
        )
    return table


# Metrics shown first, in this order (paper suite, then fairness suite); others follow alphabetically.
METRIC_ORDER = (
    "gas",
    "gas_f",
    "gas_m",
    "delta",
    "gld",
    "add",
    "log_add",
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
)


def metric_order(name: str) -> tuple[int, str]:
    """Sort key: the headline metrics first, in METRIC_ORDER, then alphabetical."""
    return (METRIC_ORDER.index(name) if name in METRIC_ORDER else len(METRIC_ORDER), name)


def _colour(name: str, m: MetricValue | None, text: str) -> str:
    """Green/yellow/red for the bias metrics bounded in [0, 1], plain otherwise."""
    if m is None or m.value is None or name not in ("gas", "gld", "delta", "hit_rate"):
        return text
    colour = "green" if m.value < 0.1 else "yellow" if m.value < 0.3 else "red"
    return f"[{colour}]{text}[/{colour}]"


def print_summary(summary: Summary, console: Console | None = None) -> None:
    """Print the summary table."""
    (console or Console()).print(summary_table(summary))
