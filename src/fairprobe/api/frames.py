"""Tidy rows of results for pandas: one row per model x set x subset x metric (value and 95% interval), one row
per sample. pandas is the optional extra `fairprobe[pandas]`; the rows themselves are plain dicts."""

from __future__ import annotations

from typing import Any

from fairprobe.errors import ConfigError
from fairprobe.records import MetricValue, Summary

OVERALL = "all"  # the subset column of a set's own (not a subset's) metrics


def metric_row(model: str, set_name: str, subset: str, n: int, name: str, metric: MetricValue) -> dict[str, Any]:
    """One metric as a tidy row; `bound_low`/`bound_high` where the value is only known to lie in an interval."""
    low, high = metric.ci95
    bounds = metric.bounds or (None, None)
    return {
        "model": model,
        "set": set_name,
        "subset": subset,
        "metric": name,
        "value": metric.value,
        "ci_low": low,
        "ci_high": high,
        "n": metric.n if metric.n is not None else n,
        "bound_low": bounds[0],
        "bound_high": bounds[1],
    }


def summary_rows(summary: Summary, model: str | None = None) -> list[dict[str, Any]]:
    """Every metric of a run, set by set, the set's own first (subset "all"), then each subset's."""
    label = model or summary.model
    rows = []
    for set_name, result in summary.results.items():
        for name, metric in result.metrics.items():
            rows.append(metric_row(label, set_name, OVERALL, result.n, name, metric))
        for subset, part in result.subsets.items():
            for name, metric in part.metrics.items():
                rows.append(metric_row(label, set_name, subset, part.n, name, metric))
    return rows


def sample_row(model: str, sample: dict[str, Any]) -> dict[str, Any]:
    """One sample as a row: its fields, with nested objects one level flat (`meta.occupation`, ...)."""
    row: dict[str, Any] = {"model": model}
    for key, value in sample.items():
        if isinstance(value, dict):
            row.update({f"{key}.{inner}": v for inner, v in value.items()})
        else:
            row[key] = value
    return row


def method_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A mitigation comparison (compare.json) as rows: set x method x metric with value and interval."""
    rows = []
    for set_name, entry in result.get("sets", {}).items():
        methods = entry.get("methods", {})
        for method in result.get("method_order") or list(methods):
            row = methods[method]
            for name, obj in row.get("metrics", {}).items():
                metric = metric_row("", set_name, OVERALL, row.get("n", 0), name, MetricValue.model_validate(obj))
                rows.append({"method": method, **{k: v for k, v in metric.items() if k != "model"}})
    return rows


def setting_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A decoding sweep (sweep.json) as rows: set x setting with GAS over seeds and its interval."""
    rows = []
    for set_name, entry in result.get("sets", {}).items():
        greedy = entry.get("greedy", {}).get("gas")
        if greedy is not None:
            gas = MetricValue.model_validate(greedy)
            rows.append(
                {
                    "set": set_name,
                    "setting": "greedy",
                    "parameter": None,
                    "parameter_value": None,
                    "gas": gas.value,
                    "ci_low": gas.ci95[0],
                    "ci_high": gas.ci95[1],
                }
            )
        for label, row in entry.get("settings", {}).items():
            gas = MetricValue.model_validate(row["gas"])
            rows.append(
                {
                    "set": set_name,
                    "setting": label,
                    "parameter": row.get("parameter"),
                    "parameter_value": row.get("value"),
                    "gas": gas.value,
                    "ci_low": gas.ci95[0],
                    "ci_high": gas.ci95[1],
                }
            )
    return rows


def frame(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of the rows; without pandas, a one-line error saying how to get it."""
    try:
        import pandas as pd
    except ImportError:
        raise ConfigError('to_pandas() needs pandas: pip install "fairprobe[pandas]"') from None
    return pd.DataFrame.from_records(rows)
