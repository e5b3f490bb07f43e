"""Tidy rows of results for pandas: one row per model x set x subset x metric (value and 95% interval), one row
per sample. pandas is the optional extra `fairprobe[pandas]`; the rows themselves are plain dicts."""

from __future__ import annotations

from typing import Any

from fairprobe.errors import ConfigError
from fairprobe.records import MetricValue, Summary
from fairprobe.report.severity import Thresholds, default_thresholds, too_little_data

OVERALL = "all"  # the subset column of a set's own (not a subset's) metrics


def metric_row(
    model: str, set_name: str, subset: str, n: int, name: str, metric: MetricValue, thresholds: Thresholds | None = None
) -> dict[str, Any]:
    """One metric as a tidy row, as the console shows it: value, 95% interval, its count, the severity mark (None
    for an unmarked metric and for too little data), why the data is too little to judge, and the metric's note;
    `bound_low`/`bound_high` where the value is only known to lie in an interval."""
    low, high = metric.ci95
    bounds = metric.bounds or (None, None)
    count = metric.n if metric.n is not None else n
    grade = (thresholds or default_thresholds()).grade(set_name, name, metric, n)
    return {
        "model": model,
        "set": set_name,
        "subset": subset,
        "metric": name,
        "value": metric.value,
        "ci_low": low,
        "ci_high": high,
        "n": count,
        "mark": None if grade is None or grade.too_little is not None else grade.label,
        "too_little_data": too_little_data(set_name, name, metric, count),
        "note": metric.note,
        "bound_low": bounds[0],
        "bound_high": bounds[1],
    }


def summary_rows(summary: Summary, model: str | None = None) -> list[dict[str, Any]]:
    """Every metric of a run, set by set, the set's own first (subset "all"), then each subset's."""
    label = model or summary.model
    thresholds = default_thresholds()
    rows = []
    for set_name, result in summary.results.items():
        for name, metric in result.metrics.items():
            rows.append(metric_row(label, set_name, OVERALL, result.n, name, metric, thresholds))
        for subset, part in result.subsets.items():
            for name, metric in part.metrics.items():
                rows.append(metric_row(label, set_name, subset, part.n, name, metric, thresholds))
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
    """A mitigation comparison (compare.json) as rows, as its report shows it: set x method x measure, each
    metric (`kind` "metric") and each drift measure ("drift") with value, interval, mark, and its paired test
    against Original (`p`, `p_holm`, `relative_change`; `unchanged` where a decoding-only method cannot change
    it), and each method's perplexity ("perplexity")."""
    rows = []
    for set_name, entry in result.get("sets", {}).items():
        methods = entry.get("methods", {})
        for method in result.get("method_order") or list(methods):
            rows += method_measure_rows(set_name, method, methods[method])
    return rows


def method_measure_rows(set_name: str, method: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """One method's rows of one set: its metrics, its drift measures and its perplexity."""
    out = []
    tests, drift_tests = row.get("vs_original", {}), row.get("drift_vs_original", {})
    for kind, values, tested in (
        ("metric", row.get("metrics", {}), tests),
        ("drift", row.get("drift", {}), drift_tests),
    ):
        for name, obj in values.items():
            metric = metric_row("", set_name, OVERALL, row.get("n", 0), name, MetricValue.model_validate(obj))
            test = tested.get(name, {})
            out.append(
                {
                    "method": method,
                    "kind": kind,
                    **{k: v for k, v in metric.items() if k != "model"},
                    "p": test.get("p_mcnemar", test.get("p")),
                    "p_holm": test.get("p_holm"),
                    "relative_change": test.get("relative_change"),
                    "unchanged": "unchanged_by_design" in test,
                }
            )
    if row.get("perplexity") is not None:
        change = row.get("perplexity_relative_change")
        out.append({"method": method, "kind": "perplexity", "set": set_name, "subset": OVERALL, "metric": "perplexity"})
        out[-1].update(value=row["perplexity"], n=row.get("n"), relative_change=change)
    return out


def pairwise_rows(leaderboard: dict[str, Any]) -> list[dict[str, Any]]:
    """A many-models comparison's paired tests as rows: set x metric x model pair, B - A with its interval, the
    test, p and Holm's p over every test of the comparison."""
    rows = []
    for t in leaderboard.get("pairwise", []):
        difference = MetricValue.model_validate(t["difference"]) if t.get("difference") else None
        low, high = difference.ci95 if difference is not None else (None, None)
        rows.append(
            {
                "set": t["set"],
                "metric": t["metric"],
                "model_a": t["a"],
                "model_b": t["b"],
                "test": t.get("test"),
                "n": t.get("n"),
                "difference": difference.value if difference is not None else None,
                "ci_low": low,
                "ci_high": high,
                "p": t.get("p"),
                "p_holm": t.get("p_holm"),
                "equal": bool(t.get("equal")),
            }
        )
    return rows


def setting_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A decoding sweep (sweep.json) as rows: set x setting with its headline metric over seeds and its interval
    (a column named by the metric: `gas` for the paper's sets)."""
    rows = []
    for set_name, entry in result.get("sets", {}).items():
        head = entry.get("headline", "gas")
        found = [("greedy", None, None, entry.get("greedy", {}).get(head))]
        found += [
            (label, row.get("parameter"), row.get("value"), row.get(head))
            for label, row in entry.get("settings", {}).items()
        ]
        for label, parameter, value, metric in found:
            if metric is None:
                continue
            m = MetricValue.model_validate(metric)
            rows.append(
                {
                    "set": set_name,
                    "setting": label,
                    "parameter": parameter,
                    "parameter_value": value,
                    head: m.value,
                    "ci_low": m.ci95[0],
                    "ci_high": m.ci95[1],
                }
            )
    return rows


def sweep_drift_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A decoding sweep's drift as rows: set x setting (greedy first) x measure, with value, interval, n and the
    setting's paired test against greedy (`p`)."""
    rows = []
    for set_name, entry in result.get("sets", {}).items():
        settings = [("greedy", entry.get("greedy_drift", {}), {})]
        settings += [
            (k, v.get("drift", {}), v.get("drift_vs_greedy", {})) for k, v in entry.get("settings", {}).items()
        ]
        for label, drift, tests in settings:
            for name, obj in drift.items():
                m = MetricValue.model_validate(obj)
                test = tests.get(name, {})
                rows.append(
                    {"set": set_name, "setting": label, "measure": name, "value": m.value, "ci_low": m.ci95[0]}
                    | {"ci_high": m.ci95[1], "n": obj.get("n"), "p": test.get("p"), "p_holm": test.get("p_holm")}
                )
    return rows


def frame(rows: list[dict[str, Any]]) -> Any:
    """A pandas DataFrame of the rows; without pandas, a one-line error saying how to get it."""
    try:
        import pandas as pd
    except ImportError:
        raise ConfigError('to_pandas() needs pandas: pip install "fairprobe[pandas]"') from None
    return pd.DataFrame.from_records(rows)
