"""Intersectional slices of gender-income: DP and EO differences over sex x race / age groups, checked against fairlearn."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from fairlearn.metrics import MetricFrame, equalized_odds_difference, selection_rate

from fairprobe.families import load_probe_set
from fairprobe.families.gender_income.family import summarize
from fairprobe.families.gender_income.intersectional import age_band, intersectional_differences
from fairprobe.families.gender_income.options import GenderIncomeOptions
from fairprobe.families.gender_income.record import PairSample
from fairprobe.options import RunOptions


def records(seed: int = 3, n: int = 240) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame(
        {
            "sex": rng.choice(["Female", "Male"], n),
            "race": rng.choice(["White", "Black", "Asian-Pac-Islander"], n),
            "label": rng.integers(0, 2, n),
        }
    )
    bias = (df["sex"] == "Male") * 0.25 + (df["race"] == "White") * 0.15
    df["pred"] = (rng.random(n) < 0.2 + bias + 0.3 * df["label"]).astype(int)
    return df


def test_differences_match_fairlearn() -> None:
    df = records()
    groups = (df["sex"] + "/" + df["race"]).tolist()
    ours = intersectional_differences(df["pred"].to_numpy(), df["label"].to_numpy(), groups, "race")
    features = df[["sex", "race"]]
    dp = MetricFrame(metrics=selection_rate, y_true=df["label"], y_pred=df["pred"], sensitive_features=features)
    assert ours["dp_difference_sex_race"].value == pytest.approx(dp.difference(), abs=1e-12)
    eo = equalized_odds_difference(df["label"], df["pred"], sensitive_features=features)
    assert ours["eo_difference_sex_race"].value == pytest.approx(eo, abs=1e-12)
    lo, hi = ours["dp_difference_sex_race"].ci95
    assert lo <= dp.difference() <= hi


def test_an_undefined_group_rate_is_left_out_not_zero() -> None:
    # A group with no positive label has no TPR: fairlearn counts 0, fairprobe leaves the group out of the TPR spread.
    df = records()
    df = df[~((df["sex"] == "Female") & (df["race"] == "Black") & (df["label"] == 1))]
    groups = (df["sex"] + "/" + df["race"]).tolist()
    ours = intersectional_differences(df["pred"].to_numpy(), df["label"].to_numpy(), groups, "race")
    defined = df[~((df["sex"] == "Female") & (df["race"] == "Black"))]
    tpr = defined[defined["label"] == 1].groupby(["sex", "race"])["pred"].mean()
    fpr = df[df["label"] == 0].groupby(["sex", "race"])["pred"].mean()
    assert ours["eo_difference_sex_race"].value == pytest.approx(max(tpr.max() - tpr.min(), fpr.max() - fpr.min()))


def test_age_bands() -> None:
    assert [age_band(a) for a in ("17", "29", "30", "44", "45", "59", "60", "90", "x")] == [
        "17-29",
        "17-29",
        "30-44",
        "30-44",
        "45-59",
        "45-59",
        "60+",
        "60+",
        "unknown",
    ]


def pair(i: int, sex: str, race: str, age: str, answer: str, label: str) -> PairSample:
    return PairSample(
        set="gender-income",
        id=str(i),
        prompt="p",
        subsets=[],
        verdict="same",
        hit=False,
        label=label,
        sex_original=sex,
        self_contradictory=False,
        answer_original=answer,
        answer_flipped=answer,
        refusal_original=False,
        refusal_flipped=False,
        original=answer,
        flipped=answer,
        parser_verdict="same",
        race=race,
        age=age,
    )


def test_slices_sizes_small_and_empty(shared_data) -> None:
    ps = load_probe_set("gender-income", data_dir=shared_data, limit=1)
    samples = [pair(i, "Female", "White", "25", "yes" if i % 2 else "no", "yes") for i in range(25)]
    samples += [pair(100 + i, "Male", "Black", "50", "yes", "no") for i in range(3)]
    result = summarize(ps, samples, RunOptions(suite="fairness"), GenderIncomeOptions())
    white_women = result.subsets["sex-race:Female/White"]
    assert white_women.n == 25 and white_women.note is None
    assert white_women.metrics["accuracy"].value == pytest.approx(12 / 25)
    black_men = result.subsets["sex-race:Male/Black"]
    assert black_men.n == 3 and "small slice: 3 records" in (black_men.note or "")
    empty = result.subsets["sex-race:Female/Black"]
    assert empty.n == 0 and empty.metrics == {} and empty.note == "empty: no record in this slice"
    assert result.subsets["sex-age:Male/45-59"].n == 3
    # Selection rates: Female/White 12/25, Male/Black 3/3 -> DP difference 1 - 0.48.
    assert result.metrics["dp_difference_sex_race"].value == pytest.approx(1 - 12 / 25)
    assert empty.model_dump(mode="json") == {"n": 0, "metrics": {}, "note": "empty: no record in this slice"}
