"""Probe families: one folder each (`paper/`, `gender_income/`, `professional_bias/`), found through a registry.

A family declares its probe sets, options, requests (generation and scoring), detector, metrics with their
metadata (next to the functions that compute them) and its sample record; the shared machinery reads them from here. Add one with `register_family(Family(...))` or the
entry-point group `fairprobe.families` (see docs/development.md).
"""

from fairprobe.families.base import (
    Direction,
    Family,
    Figure,
    Metric,
    MetricFunction,
    MetricTable,
    NoOptions,
    ProbeSetEntry,
    Replies,
    Request,
    RunContext,
    Scoring,
    all_families,
    computes,
    family_of_set,
    headline_metric,
    load_probe_set,
    metric_info,
    metric_order,
    probe_set,
    register_family,
    summarize_by_subset,
)

__all__ = [
    "Direction",
    "Family",
    "Figure",
    "Metric",
    "MetricFunction",
    "MetricTable",
    "NoOptions",
    "ProbeSetEntry",
    "Replies",
    "Request",
    "RunContext",
    "Scoring",
    "all_families",
    "computes",
    "family_of_set",
    "headline_metric",
    "load_probe_set",
    "metric_info",
    "metric_order",
    "probe_set",
    "register_family",
    "summarize_by_subset",
]
