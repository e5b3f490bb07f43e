"""Many models in one command: run folders, leaderboard, pairwise tests (checked against scipy), Holm, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy import stats

from conftest import exact_scores, fake_loglikelihood
from fairprobe.errors import ConfigError
from fairprobe.families.paper.words import AttributeWords
from fairprobe.models import SCHEMES, Completion, GenerationConfig, register_scheme
from fairprobe.multimodel import run_models
from fairprobe.report.export import export
from fairprobe.runner import RunOptions
from fairprobe.statistics.pairwise import bootstrap_test, holm, mcnemar_test

N_PAIRS = len(AttributeWords.default().pairs)


class LeaningBackend:
    """A fake model whose continuation names a gender on a share of prompts and whose next-word mass leans."""

    has_chat_template = False

    def __init__(self, name: str, gendered_every: int, lean: float) -> None:
        self.name, self.every, self.lean = name, gendered_every, lean

    def identity(self) -> dict[str, Any]:
        return {"id": self.name}

    def generate(self, prompts: list[Any], config: GenerationConfig, score: Any = None) -> list[Completion]:
        out = []
        for i, p in enumerate(prompts):
            h = zlib.crc32(str(p).encode())
            text = " she left." if h % self.every == 0 else " the bus left."
            scores = None
            if score is not None:
                probs = np.full(len(score[i]), 1e-3)
                probs[:2] = [0.1 + self.lean * (h % 7) / 70, 0.1]
                scores = exact_scores(probs.tolist())
            out.append(Completion(text=text, scores=scores))
        return out

    def loglikelihood(self, requests: list[Any]) -> list[Any]:
        return fake_loglikelihood(requests)


@pytest.fixture()
def two_models(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    register_scheme("lean-a")(lambda rest, **kw: LeaningBackend("lean-a", 2, 0.0))
    register_scheme("lean-b")(lambda rest, **kw: LeaningBackend("lean-b", 5, 1.0))
    yield ["lean-a:x", "lean-b:x"], tmp_path / "runs"
    for scheme in ("lean-a", "lean-b"):
        SCHEMES.unregister(scheme)


def test_models_run_into_their_folders_and_compare(two_models: tuple[list[str], Path]) -> None:
    specs, root = two_models
    options = RunOptions(probes=["template"], limit=40, out=root, use_cache=False)
    summaries, out = run_models(specs, options, sort_by="gld")
    assert out == root / "comparison"
    assert {p.name for p in root.iterdir()} == {"lean-a_x", "lean-b_x", "comparison"}
    board = json.loads((out / "leaderboard.json").read_text())
    assert [entry["set"] for entry in board["sets"]] == ["template"]
    rows = board["sets"][0]["rows"]
    assert [r["model"] for r in rows] == ["lean-a", "lean-b"]  # sorted by GLD, lowest first
    assert rows[0]["metrics"]["gld"]["value"] < rows[1]["metrics"]["gld"]["value"]
    assert rows[1]["metrics"]["gas"] == summaries["lean-b:x"].results["template"].metrics["gas"].model_dump(mode="json")

    tests = {(t["metric"], t["test"]): t for t in board["pairwise"]}
    gas = tests[("gas", "exact McNemar")]
    samples = {
        name: {
            json.loads(line)["id"]: json.loads(line)
            for line in (root / name / "samples.jsonl").read_text().splitlines()
        }
        for name in ("lean-a_x", "lean-b_x")
    }
    a = np.array([samples["lean-a_x"][i]["first_gender"] is not None for i in samples["lean-a_x"]])
    b = np.array([samples["lean-b_x"][i]["first_gender"] is not None for i in samples["lean-a_x"]])
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    assert gas["n"] == 40
    assert gas["p"] == pytest.approx(stats.binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue)
    assert gas["difference"]["value"] == pytest.approx(b.mean() - a.mean())
    assert {t["metric"] for t in board["pairwise"]} == {"gas", "gld", "add", "neutral_share"}
    ps = [t["p"] for t in board["pairwise"]]
    assert [t["p_holm"] for t in board["pairwise"]] == pytest.approx(holm(ps))

    md = (out / "leaderboard.md").read_text()
    assert "Leaderboard: template" in md and "Pairwise tests between models" in md
    html = (out / "report.html").read_text()
    assert "lean-a" in html and "lean-b" in html and "Pairwise tests between models" in html
    text, _ = export([out], "md", None)
    assert "Leaderboard: template" in text and "| lean-b |" in text

    # The same command again reuses both run folders (resumed, nothing asked) and rewrites the comparison.
    again, _ = run_models(specs, options, sort_by="gld")
    assert again["lean-a:x"] == summaries["lean-a:x"]


def test_the_comparison_reads_as_one(two_models: tuple[list[str], Path]) -> None:
    from rich.console import Console

    from fairprobe.report.console import leaderboard_table

    specs, root = two_models
    _, out = run_models(specs, RunOptions(probes=["template"], limit=40, out=root, use_cache=False))
    board = json.loads((out / "leaderboard.json").read_text())
    # No --sort-by: the set's headline metric (GAS for the paper family), not the alphabetically first (add).
    entry = board["sets"][0]
    assert entry["sort_by"] == "gas" and [r["model"] for r in entry["rows"]] == ["lean-b", "lean-a"]
    assert entry["rows"][0]["drawn"] == "40 of 160 prompts, stratified by topic x stereotyped gender"
    md = (out / "leaderboard.md").read_text()
    # Two models and 14 metrics: models as columns, in rank order, is the narrower table.
    assert "| metric | 1. lean-b | 2. lean-a |" in md
    assert "Limited run: 40 of 160 prompts, stratified by topic x stereotyped gender." in md
    html = (out / "report.html").read_text()
    assert "<h2>Model comparison</h2>" in html and "Mitigation comparison" not in html
    assert html.count("<b>lean-a:</b>") == 1 and "lean-a: lean-a" not in html  # one verdict per model
    console = Console(record=True, width=100, color_system=None)
    console.print(leaderboard_table(board, 100))
    text = console.export_text()
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 100
    assert "gas" in text.splitlines()[2] or "gas" in text.splitlines()[3]


def test_mcnemar_and_bootstrap_against_scipy() -> None:
    rng = np.random.default_rng(7)
    a, b = rng.random(80) < 0.3, rng.random(80) < 0.5
    t = mcnemar_test(a, b)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    assert t.p == pytest.approx(stats.binomtest(min(only_a, only_b), only_a + only_b, 0.5).pvalue)
    x, y = rng.normal(0.2, 0.1, 60), rng.normal(0.25, 0.1, 60)
    test = bootstrap_test(x, y)
    diff, p = test.difference, test.p
    ref = stats.bootstrap((y - x,), np.mean, n_resamples=2000, method="percentile", random_state=1)
    assert diff.value == pytest.approx(float((y - x).mean()))
    assert diff.ci95 == pytest.approx((ref.confidence_interval.low, ref.confidence_interval.high), abs=0.01)
    assert (p < 0.05) == (ref.confidence_interval.low > 0 or ref.confidence_interval.high < 0)


def test_holm_against_hand_computed_values() -> None:
    # Sorted 0.01, 0.03, 0.04, 0.5 -> 4 x 0.01, 3 x 0.03, max(2 x 0.04, 0.09), 0.5.
    assert holm([0.01, 0.04, 0.03, 0.5, None]) == pytest.approx([0.04, 0.09, 0.09, 0.5, None])
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_a_repeated_model_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--model lean-a:x is given twice"):
        run_models(["lean-a:x", "lean-a:x"], RunOptions(out=tmp_path))
    proc = subprocess.run(
        [sys.executable, "-m", "fairprobe", "run", "--model", "gemma-3-270m", "-m", "gemma-3-270m", "--limit", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert (
        proc.returncode == 2
        and proc.stderr.strip() == "error: --model gemma-3-270m is given twice: name each model once"
    )
    models = tmp_path / "models.txt"
    models.write_text("# aligned vs base\nsmollm2-135m-instruct\n\n")
    proc = subprocess.run(
        [sys.executable, "-m", "fairprobe", "run", "--models", str(models), "--model", "smollm2-135m-instruct"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert proc.returncode == 2 and "smollm2-135m-instruct is given twice" in proc.stderr
    assert not (tmp_path / "runs").exists()
