"""Intersectional slices of the gender-income records: sex x race and sex x age band.

Each slice is the records whose original version has that sex and race (or age band); every gender-income
metric is also computed per slice, with its size. Over the intersectional groups, the demographic-parity
difference is the largest minus the smallest selection rate (P(yes)) and the equalized-odds difference the
larger of the same spreads of the true- and false-positive rates, as fairlearn's
`MetricFrame(..., sensitive_features=[sex, race]).difference()` and `equalized_odds_difference` compute them,
over the records with a known prediction; intervals come from simultaneous bootstrap intervals of the signed
pairwise gaps (stats.max_abs_metric), since a bootstrap of the largest gap itself is biased away from 0. A group whose
rate is undefined (no record, or no record with that label) is left out of the spread instead of counting
as 0 (fairlearn would count 0), and the note names how many groups entered. Slices of fewer than 20 records
are kept but flagged; a combination with no record is listed as empty.
"""

from __future__ import annotations

import numpy as np

from fairprobe.families.base import Metric, computes
from fairprobe.families.gender_income.metrics import same_answer
from fairprobe.families.gender_income.readings import read_gap
from fairprobe.records import MetricValue
from fairprobe.statistics.stats import max_abs_metric

SMALL_SLICE = 20
AGE_BANDS = ((17, 29), (30, 44), (45, 59), (60, 200))
AXES = ("race", "age")


def age_band(age: object) -> str:
    """The age band of a record's age ("17-29", "30-44", "45-59", "60+"; "unknown" when unreadable)."""
    try:
        years = int(str(age).strip())
    except ValueError:
        return "unknown"
    for lo, hi in AGE_BANDS:
        if lo <= years <= hi:
            return f"{lo}+" if hi >= 200 else f"{lo}-{hi}"
    return "unknown"


def slice_label(axis: str, sex: str, value: str) -> str:
    """The subset name of one intersectional slice, e.g. `sex-race:Female/White`."""
    return f"sex-{axis}:{sex}/{value}"


def slice_grid(sexes: list[str], values: list[str]) -> list[tuple[str, str]]:
    """Every (sex, value) combination of the observed sexes and values, empty ones included, in sorted order."""
    return [(s, v) for s in sorted(set(sexes)) for v in sorted(set(values))]


def slice_note(n: int) -> str | None:
    """The flag of a slice: empty, or too small to read with confidence; None otherwise."""
    if n == 0:
        return "empty: no record in this slice"
    if n < SMALL_SLICE:
        return f"small slice: {n} records (fewer than {SMALL_SLICE}); read with care"
    return None


def _rates(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.full(np.broadcast_shapes(num.shape, den.shape), np.nan), where=den > 0)


def _pair_gaps(rates: np.ndarray) -> np.ndarray:
    """r_i - r_j for every pair of groups i < j (last axis); NaN where either rate is undefined. The largest
    absolute gap is the largest minus the smallest defined rate."""
    i, j = np.triu_indices(rates.shape[-1], k=1)
    return rates[..., i] - rates[..., j]


def group_gaps(values: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """Per replicate, the signed pairwise gaps whose largest absolute value is the DP difference over groups, and
    those (TPR and FPR gaps together) of the EO difference; `values` (..., n, 3) = [prediction, label, group code]."""
    pred, label = values[..., 0], values[..., 1]
    onehot = (values[..., 2, None] == np.arange(n_groups)).astype(np.float64)  # (..., n, G)
    size = onehot.sum(axis=-2)
    pos = (label[..., None] * onehot).sum(axis=-2)
    selection = _rates((pred[..., None] * onehot).sum(axis=-2), size)
    tpr = _rates(((pred * label)[..., None] * onehot).sum(axis=-2), pos)
    fpr = _rates(((pred * (1 - label))[..., None] * onehot).sum(axis=-2), size - pos)
    return _pair_gaps(selection), np.concatenate([_pair_gaps(tpr), _pair_gaps(fpr)], axis=-1)


def intersectional_differences(
    predictions: np.ndarray, labels: np.ndarray, groups: list[str], axis: str
) -> dict[str, MetricValue]:
    """`dp_difference_sex_<axis>` and `eo_difference_sex_<axis>` over the intersectional groups, bootstrap CIs.

    `predictions`/`labels` are 1 for "yes" (records with a known prediction only); `groups` names each
    record's intersectional group.
    """
    names = sorted(set(groups))
    codes = np.searchsorted(names, np.asarray(groups, dtype=object).astype(str)) if groups else np.zeros(0)
    values = np.stack([np.asarray(predictions, float), np.asarray(labels, float), codes.astype(float)], axis=-1)
    out = {}
    for k, kind in enumerate(("dp", "eo")):
        metric = max_abs_metric(values.reshape(-1, 3), lambda v, k=k: group_gaps(v, len(names))[k])
        metric.n = len(values)
        if metric.value is None:
            metric.note = f"undefined: fewer than two sex x {axis} groups with a defined rate"
        else:
            metric.note = f"largest minus smallest rate over {len(names)} sex x {axis} groups ({len(values)} records)"
        out[f"{kind}_difference_sex_{axis}"] = metric
    return out


INTERSECTIONAL = tuple(
    Metric(
        f"{kind}_difference_sex_{axis}",
        f"{kind.upper()} difference (sex x {axis})",
        order=order,
        bounds=(0.1, 0.2, 0.4),
        what=f"{words} over the sex x {axis} groups (largest minus smallest)",
        reading=read_gap(f"{kind}_difference_sex_{axis}", f"{words} across sex x {axis} groups")
        if kind == "dp"
        else None,
        value_range=(0.0, 1.0),
    )
    for order, (kind, axis, words) in enumerate(
        (
            ("dp", "race", "spread of 'yes' rates"),
            ("eo", "race", "equalized-odds spread"),
            ("dp", "age", "spread of 'yes' rates"),
            ("eo", "age", "equalized-odds spread"),
        ),
        start=26,
    )
)


@computes(*INTERSECTIONAL)
def intersectional_metrics(
    answers: list[str], labels: list[str], sexes: list[str], slices: dict[str, list[str]]
) -> dict[str, MetricValue]:
    """DP and EO differences over sex x every slicing axis (`slices`: axis -> each record's value)."""
    a = np.asarray(answers, dtype=object)
    known = a != "unknown"
    pred = (a[known] == "yes").astype(np.float64)
    lab = (np.asarray(labels, dtype=object)[known] == "yes").astype(np.float64)
    out: dict[str, MetricValue] = {}
    for axis, values in slices.items():
        groups = [f"{s}/{v}" for s, v, k in zip(sexes, values, known, strict=True) if k]
        out.update(intersectional_differences(pred, lab, groups, axis))
    for metric in out.values():
        metric.too_little_data = same_answer(list(answers))
    return out
