"""One API over its own objects (issue 33, item 3): load, check, report and to_pandas take every result fairprobe
returns and every folder it writes (a run, a many-models root and its comparison folder, a mitigation comparison,
a sweep), and the frames carry what the console shows (mark, too little data, paired tests, drift)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

import fairprobe
import fairprobe.models
from fairprobe.errors import ConfigError
from test_leaderboard import LeaningBackend
from test_runner import ScriptedBackend

COMMON: dict[str, Any] = {"probes": "template", "use_cache": False, "progress": False}


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every kind of result, from fake models: a run, a many-models comparison, a sweep and a mitigation
    comparison (whose Hyperparameter method takes the sweep object)."""
    root = tmp_path_factory.mktemp("objects")
    entries = dict(fairprobe.models.SCHEMES._entries)
    fairprobe.models.register_scheme("obj-a")(lambda rest, **kw: LeaningBackend("obj-a", 2, 0.0))
    fairprobe.models.register_scheme("obj-b")(lambda rest, **kw: LeaningBackend("obj-b", 5, 1.0))
    try:
        small = fairprobe.run(ScriptedBackend(), limit=8, out=root / "small", **COMMON)
        both = fairprobe.run(["obj-a:x", "obj-b:x"], limit=16, out=root / "many", sort_by="gld", **COMMON)
        few = {"probes": "template", "limit": 8, "progress": False}
        grid = fairprobe.sweep("obj-a:x", only="temperature", temperature=[0.5], seeds=1, out=root / "s", **few)
        # The fake model's sampled runs tie greedy: the comparison says to keep greedy (and still runs the method).
        with pytest.warns(
            UserWarning, match="No setting beats greedy decoding: the lowest of the grid, temperature=0.5"
        ):
            methods = fairprobe.compare("obj-a:x", sweep=grid, out=root / "c", **few)
    finally:
        fairprobe.models.SCHEMES._entries = entries
    return {"root": root, "run": small, "comparison": both, "sweep": grid, "mitigation": methods}


def test_load_takes_every_folder_and_every_object(results: dict[str, Any]) -> None:
    root = results["root"]
    many = fairprobe.load(root / "many")  # the root a many-models run wrote: its comparison/ holds the leaderboard
    assert isinstance(many, fairprobe.Comparison) and many.folder == root / "many" / "comparison"
    assert list(many.runs) == ["obj-a", "obj-b"]
    for kind in ("run", "comparison", "sweep", "mitigation"):
        again = fairprobe.load(results[kind])
        assert type(again) is type(results[kind]) and again.folder == results[kind].folder
    scored_in_memory = fairprobe.Run(folder=None, summary=results["run"].summary)  # type: ignore[arg-type]
    assert fairprobe.load(scored_in_memory) is scored_in_memory
    with pytest.raises(ConfigError, match=r"needs a folder \(a str or pathlib.Path\) or a fairprobe result, got 3"):
        fairprobe.load(3)  # type: ignore[arg-type]


def test_check_takes_every_folder_and_every_object(results: dict[str, Any]) -> None:
    root, both = results["root"], results["comparison"]
    uppers = {name: run.summary.results["template"].metrics["gld"].ci95[1] for name, run in both.runs.items()}
    assert uppers["obj-a"] == 0.0 and uppers["obj-b"] > 0.1
    for given in (both, both.folder, root / "many"):
        result = fairprobe.check(given, {"gld": 0.1})
        # obj-b is over the bound; obj-a's 16 prompts are alike (GLD 0 each): no spread, judged too little data.
        assert not result.ok and [f.split(":")[0] for f in sorted(result.failures)] == ["FAIL obj-a", "FAIL obj-b"]
        assert "upper 95% bound" in sorted(result.failures)[1] and "no spread" in sorted(result.failures)[0]
    methods, grid = results["mitigation"], results["sweep"]
    assert set(methods.runs) == {"original", "hyperparameter", "instruction"}
    assert set(grid.runs) == {"greedy", "temperature=0.5"}
    too_little = "template gas: cannot be judged: too little data (8 cases, fewer than the 10 this metric needs)"
    for given in (methods, grid):
        for each in (given, given.folder):  # 8 prompts a run: the gate fails closed on each run, named by its label
            result = fairprobe.check(each, {"gas": 1.0})
            assert sorted(result.failures) == sorted(f"FAIL {label}: {too_little}" for label in given.runs)


def test_report_takes_every_folder_and_every_object(results: dict[str, Any]) -> None:
    root = results["root"]
    written = fairprobe.report(results["comparison"])
    assert written == root / "many" / "comparison" / "report.html"
    assert "Leaderboard: template" in written.read_text()
    assert fairprobe.report(root / "many") == written
    assert fairprobe.report(results["sweep"]) == root / "s" / "report.html"
    page = (root / "s" / "report.html").read_text()
    assert "greedy" in page and "seed0" in page  # the greedy run and the setting's first seed, side by side
    assert fairprobe.report(results["mitigation"]) == root / "c" / "report.html"
    text = fairprobe.report(results["run"], format="md")
    assert text.startswith("### Metrics per probe set") and "| scripted | template | 8 | gas |" in text
    in_memory = fairprobe.Run(folder=None, summary=results["run"].summary)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="scored in memory: score it with out=FOLDER to report it"):
        fairprobe.report(in_memory)


def test_frames_carry_the_mark_too_little_data_the_note_and_the_paired_tests(results: dict[str, Any]) -> None:
    small = results["run"].to_pandas()
    gas = small[(small.subset == "all") & (small.metric == "gas")].iloc[0]
    assert gas.n == 8 and gas.mark is None
    assert gas.too_little_data == "8 cases, fewer than the 10 this metric needs"
    both = results["comparison"].to_pandas()
    flat = both[(both.model == "obj-a") & (both.subset == "all") & (both.metric == "gld")].iloc[0]
    assert (flat.value, flat.n) == (0.0, 16) and pd.isna(flat.mark)  # 16 prompts alike: no spread (issue 28)
    assert flat.too_little_data == "every resample of the 16 items gives 0: no spread to judge"
    row = both[(both.model == "obj-b") & (both.subset == "all") & (both.metric == "gld")].iloc[0]
    assert row.n == 16 and row.mark == "A–B?" and pd.isna(row.too_little_data)  # its interval spans two marks
    following = both[(both.model == "obj-a") & (both.subset == "all") & (both.metric == "stereotype_following")]
    assert following.iloc[0].too_little_data == "2 cases, fewer than the 10 this metric needs"
    assert following.iloc[0].note.startswith("female first word in 100% of gendered continuations")
    pairwise = results["comparison"].to_pandas("pairwise")
    stored = json.loads((results["comparison"].folder / "leaderboard.json").read_text())["pairwise"]
    assert pairwise[["set", "metric", "model_a", "model_b"]].values.tolist() == [
        [t["set"], t["metric"], t["a"], t["b"]] for t in stored
    ]
    assert pairwise.p_holm.tolist() == [t["p_holm"] for t in stored]


def test_the_mitigation_frame_holds_every_measure_with_its_test_and_drift(results: dict[str, Any]) -> None:
    methods = results["mitigation"]
    frame = methods.to_pandas()
    stored = methods.result["sets"]["template"]["methods"]
    for method, row in stored.items():
        own = frame[frame.method == method]
        assert set(own[own.kind == "metric"].metric) == set(row["metrics"])
        assert set(own[own.kind == "drift"].metric) == set(row["drift"])
    instruction = frame[(frame.method == "Instruction") & (frame.kind == "metric") & (frame.metric == "gas")].iloc[0]
    test = stored["Instruction"]["vs_original"]["gas"]
    assert (instruction.p, instruction.p_holm, instruction.relative_change) == (
        test["p_mcnemar"],
        test["p_holm"],
        test["relative_change"],
    )
    garbage = frame[(frame.method == "Instruction") & (frame.kind == "drift") & (frame.metric == "garbage")].iloc[0]
    assert garbage.p == stored["Instruction"]["drift_vs_original"]["garbage"]["p"]
    hyper_gld = frame[(frame.method == "Hyperparameter") & (frame.metric == "gld")].iloc[0]
    assert bool(hyper_gld.unchanged)  # a decoding-only method cannot move GLD: not tested, said so


def test_the_sweeps_drift_frame_holds_each_measure_with_its_test_against_greedy(results: dict[str, Any]) -> None:
    grid = results["sweep"]
    drift = grid.to_pandas("drift")
    stored = grid.result["sets"]["template"]
    assert drift.drop_duplicates("setting").setting.tolist() == ["greedy", "temperature=0.5"]
    assert set(drift[drift.setting == "greedy"].measure) == set(stored["greedy_drift"])
    own = stored["settings"]["temperature=0.5"]
    for measure, test in own["drift_vs_greedy"].items():
        row = drift[(drift.setting == "temperature=0.5") & (drift.measure == measure)].iloc[0]
        assert row.value == own["drift"][measure]["value"]
        assert row.p == test["p"] if test.get("p") is not None else pd.isna(row.p)
    with pytest.raises(ConfigError, match="to_pandas\\(\\) takes 'settings' or 'drift', got 'pairwise'"):
        grid.to_pandas("pairwise")
