"""Representative limits: `--limit N` draws a seeded sample stratified over each set's subsets, records how, and
every output says "N of M prompts, stratified by ..."; the first-N order stays available by name."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fairprobe.families import load_probe_set
from fairprobe.records import Drawn, MetricValue, SetResult, Summary
from fairprobe.report.leaderboard import set_leaderboard
from fairprobe.report.verdict import verdict
from fairprobe.runner import RunOptions, RunPlan
from fairprobe.statistics.strata import stratified_draw

TEMPLATE_STRATA = {
    (topic, f"{gender}-stereotyped")
    for topic in ("occupations", "personalities", "hobbies", "colors")
    for gender in ("female", "male")
}


def test_limit_8_on_template_draws_one_prompt_from_every_stratum() -> None:
    ps = load_probe_set("template", limit=8)
    # 4 topics x 2 stereotyped genders = 8 strata of 20 prompts: one prompt from each.
    assert {tuple(p.subsets) for p in ps.probes} == TEMPLATE_STRATA
    assert [int(p.id) for p in ps.probes] == sorted(int(p.id) for p in ps.probes)  # file order kept
    assert ps.drawn is not None and (ps.drawn.n, ps.drawn.of, ps.drawn.order) == (8, 160, "stratified")
    assert ps.drawn.describe() == "8 of 160 prompts, stratified by topic x stereotyped gender"
    assert [p.id for p in load_probe_set("template", limit=8).probes] == [p.id for p in ps.probes]  # fixed seed
    # 40 prompts: 5 from every stratum (the first-N order gave 40 female- then male-stereotyped occupations).
    counts = Counter(tuple(p.subsets) for p in load_probe_set("template", limit=40).probes)
    assert set(counts) == TEMPLATE_STRATA and set(counts.values()) == {5}
    first = load_probe_set("template", limit=40, limit_order="first")
    assert {p.subsets[0] for p in first.probes} == {"occupations"}
    assert first.drawn is not None and first.drawn.describe() == "40 of 160 prompts, the first 40 in file order"


def test_draw_is_as_even_as_the_strata_allow_and_nested() -> None:
    keys = ["a"] * 5 + ["b"] * 2 + ["c"]
    # Dealt round by round: a, b, c | a, b | a, a: six items are 3 of a, 2 of b (all), 1 of c (all).
    six = stratified_draw(keys, 6, seed=1)
    assert Counter(keys[i] for i in six) == {"a": 3, "b": 2, "c": 1}
    four = stratified_draw(keys, 4, seed=1)
    assert sorted(Counter(keys[i] for i in four).values()) == [1, 1, 2]  # every stratum, the extra one to a or b
    assert set(four) <= set(six)  # a larger limit draws the same items and more
    assert stratified_draw(keys, 8, seed=1) == list(range(8))  # a limit that covers the set takes it whole
    # A set without subsets is one stratum: a seeded random sample.
    assert load_probe_set("friend-statements", limit=5).drawn.strata == "activity domain"  # type: ignore[union-attr]


def test_limit_that_covers_the_set_records_nothing() -> None:
    ps = load_probe_set("template", limit=500)
    assert len(ps.probes) == 160 and ps.drawn is None


def test_limit_order_is_part_of_the_settings_only_when_it_changes_the_prompts() -> None:
    def plan(**given: Any) -> RunPlan:
        return RunPlan.build(RunOptions(**given))

    assert plan(limit=8).run_settings()["limit_order"] == "stratified"
    # Runs made before stratified limits took the first N: their folders resume with --limit-order first.
    assert "limit_order" not in plan(limit=8, limit_order="first").run_settings()
    assert "limit_order" not in plan().run_settings()
    assert plan(limit=8).fingerprint() != plan(limit=8, limit_order="first").fingerprint()


def test_verdict_and_leaderboard_say_how_prompts_were_drawn() -> None:
    drawn = Drawn(n=40, of=160, order="stratified", strata="topic x stereotyped gender", seed=1)
    gas = MetricValue(value=0.25, ci95=(0.14, 0.4))
    result = SetResult(n=40, source="x", metrics={"gas": gas}, drawn=drawn)
    summary = Summary(fairprobe_version="0", model="toy", results={"template": result})
    assert verdict(summary).endswith(
        " Limited run: template 40 of 160 prompts, stratified by topic x stereotyped gender."
    )
    assert json.loads(summary.model_dump_json())["results"]["template"]["drawn"]["of"] == 160
    row = {"model": "toy", "n": 40, "metrics": {"gas": gas.model_dump()}, "drawn": drawn.describe()}
    table = set_leaderboard({"set": "template", "sort_by": "gas", "rows": [row]})
    assert table.caption.endswith("Limited run: 40 of 160 prompts, stratified by topic x stereotyped gender.")


@pytest.mark.slow
def test_a_limited_run_records_the_draw_in_manifest_summary_and_report(tmp_path: Path, embedded_backend) -> None:
    from fairprobe.models import GenerationConfig
    from fairprobe.runner import run

    out = tmp_path / "run"
    options = RunOptions(
        probes=["template"], limit=8, out=out, batch_size=8, generation=GenerationConfig(max_new_tokens=8)
    )
    summary = run(options, backend=embedded_backend)
    manifest = json.loads((out / "manifest.json").read_text())
    recorded = manifest["probe_sets"]["template"]
    assert recorded["n"] == 8 and recorded["drawn"]["of"] == 160 and recorded["drawn"]["order"] == "stratified"
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {tuple(s["subsets"]) for s in samples} == TEMPLATE_STRATA
    assert summary.results["template"].drawn == load_probe_set("template", limit=8).drawn
    html = (out / "report.html").read_text()
    assert "8 of 160 prompts, stratified by topic x stereotyped gender" in html
