"""Many models in one command: run folders, leaderboard, pairwise tests (checked against scipy), Holm, errors."""

from __future__ import annotations

import json
import os
import shutil
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
from fairprobe.errors import ConfigError, DataError, ModelError
from fairprobe.families.paper.words import AttributeWords
from fairprobe.models import SCHEMES, Completion, GenerationConfig, ModelBackend, register_scheme
from fairprobe.multimodel import run_models
from fairprobe.report.export import export
from fairprobe.runner import RunOptions
from fairprobe.statistics.pairwise import bootstrap_test, holm, mcnemar_test
from openai_servers import CANNED_TOP, canned_text, completion_json, prompt_text, serve

N_PAIRS = len(AttributeWords.default().pairs)


class LeaningBackend(ModelBackend):
    """A fake model whose continuation names a gender on a share of prompts and whose next-word mass leans."""

    has_chat_template = False

    def __init__(self, name: str, gendered_every: int, lean: float) -> None:
        self.name, self.every, self.lean = name, gendered_every, lean

    def identity(self) -> dict[str, Any]:
        return {"id": self.name}

    def generate(
        self, prompts: list[Any], config: GenerationConfig, score: Any = None, seeds: Any = None
    ) -> list[Completion]:
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


def register_once(scheme: str, loader: Any) -> None:
    """Register a test model scheme for the whole session (a scheme is registered once)."""
    if scheme not in SCHEMES.names():
        register_scheme(scheme)(loader)


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
    runs = run_models(specs, options, sort_by="gld")
    summaries, out = runs.summaries, runs.comparison
    assert out == root / "comparison" and not runs.failures
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
    again = run_models(specs, options, sort_by="gld").summaries
    assert again["lean-a:x"] == summaries["lean-a:x"]


def test_the_comparison_reads_as_one(two_models: tuple[list[str], Path]) -> None:
    from rich.console import Console

    from fairprobe.report.console import leaderboard_table

    specs, root = two_models
    out = run_models(specs, RunOptions(probes=["template"], limit=40, out=root, use_cache=False)).comparison
    assert out is not None
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


def test_a_repeated_model_is_a_one_line_error(two_models: tuple[list[str], Path], tmp_path: Path) -> None:
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


class FailingBackend(LeaningBackend):
    """A model whose server dies after its first batch."""

    def generate(
        self, prompts: list[Any], config: GenerationConfig, word_pairs: Any = None, seeds: Any = None
    ) -> list[Completion]:
        raise ModelError("http://127.0.0.1:9/v1 answered HTTP 503; gave up after 6 attempts")


def test_every_spec_and_option_is_resolved_before_the_first_model_runs(
    two_models: tuple[list[str], Path], tmp_path: Path
) -> None:
    specs, root = two_models
    options = RunOptions(probes=["template"], limit=8, out=root, use_cache=False)
    for bad, message in [
        ("nosuch:model", "unknown model spec 'nosuch:model'"),
        ("lean-b:", "model spec 'lean-b:' names no model"),
    ]:
        with pytest.raises(ModelError, match=message):
            run_models([*specs, bad], options)
    with pytest.raises(ConfigError, match="--sort-by 'glld' is not a metric of these probe sets: choose one of add,"):
        run_models(specs, options, sort_by="glld")
    with pytest.raises(ConfigError, match="takes no -M key 'base_url'"):
        plan = options.model_copy(update={"model": "openai:m", "model_args": {"base_url": "http://h/v1"}})
        run_models(["openai:m", "smollm2-135m-instruct"], plan)
    with pytest.raises(DataError, match=r"unknown probe set .not-a-set."):
        run_models(specs, options.model_copy(update={"probes": ["template", "not-a-set"]}))
    # Two specs, one folder: openai:org/m and openai:org_m are both openai_org_m; case alone does not tell apart.
    for pair in (["openai:org/m", "openai:org_m"], ["lean-a:Model", "lean-a:model"]):
        with pytest.raises(ConfigError, match=f"model {pair[1]} and model {pair[0]} would share the folder"):
            run_models(pair, options.model_copy(update={"model": pair[0]}))
    assert not root.exists()  # nothing ran, nothing was written


def test_a_failing_model_is_reported_and_the_others_are_compared(
    two_models: tuple[list[str], Path], tmp_path: Path
) -> None:
    specs, root = two_models
    register_once("dies", lambda rest, **kw: FailingBackend("dies", 2, 0.0))
    options = RunOptions(probes=["template"], limit=8, out=root, use_cache=False)
    runs = run_models([specs[0], "dies:x", specs[1]], options, sort_by="gld")
    assert set(runs.summaries) == set(specs)
    assert list(runs.failures) == ["dies:x"]
    assert runs.failures["dies:x"] == (
        "http://127.0.0.1:9/v1 answered HTTP 503; gave up after 6 attempts; 0 samples saved in "
        f"{root / 'dies_x'}: run the same command again to resume"
    )
    board = json.loads((root / "comparison" / "leaderboard.json").read_text())
    assert [r["model"] for r in board["runs"]] == ["lean-a", "lean-b"]
    # Run folders are recorded relative to the comparison folder: a copied root reports its own runs.
    assert [r["path"] for r in board["runs"]] == ["../lean-a_x", "../lean-b_x"]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    shutil.rmtree(root)
    text, _ = export([copy / "comparison"], "md", None)
    assert "Leaderboard: template" in text and "| lean-b |" in text


def failing_model_server(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
    """The scripted server's answers, except for the model named `gone`, refused as with a revoked key."""
    if body.get("model") == "gone":
        return 401, b'{"error": {"message": "invalid key"}}', {}
    return 200, json.dumps(completion_json(body, canned_text(prompt_text(body)), CANNED_TOP)).encode(), {}


def test_cli_many_models_print_one_json_document_and_exit_2_after_a_failure(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPROBE_CACHE_DB": str(tmp_path / "calls.sqlite")}
    with serve(failing_model_server) as (url, _):
        args = ["run", "-m", "openai:a", "-m", "openai:gone", "-m", "openai:b", "--base-url", url, "--limit", "6"]
        proc = subprocess.run(
            [sys.executable, "-m", "fairprobe", *args, "--probes", "template", "--json", "--out", str(tmp_path / "r")],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
    assert proc.returncode == 2, proc.stderr
    document = json.loads(proc.stdout)  # one document for all the models
    assert set(document["models"]) == {"openai:a", "openai:b"}
    assert document["models"]["openai:a"]["results"]["template"]["n"] == 6
    assert list(document["failed"]) == ["openai:gone"] and "HTTP 401" in document["failed"]["openai:gone"]
    assert [r["model"] for r in document["comparison"]["leaderboard"]["runs"]] == ["openai:a", "openai:b"]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors[0].startswith("error: model openai:gone failed: ") and "HTTP 401" in errors[0]
    assert errors[1:] == ["error: 1 of 3 models failed; the comparison holds the other 2"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda o: o.update(runs=[]), "runs: List should have at least 1 item"),
        (lambda o: o["sets"][0]["rows"][0].update(n="40"), r"sets\[0\].rows\[0\].n: Input should be a valid integer"),
        (lambda o: o["pairwise"][0].update(p=2.5), r"pairwise\[0\].p: Input should be less than or equal to 1"),
        (
            lambda o: o["sets"][0]["rows"][1]["metrics"]["gld"].update(ci95=[0.1]),
            r"sets\[0\].rows\[1\].metrics.gld.ci95\[1\]: Field required",
        ),
        (lambda o: o.update(kind="sweep"), "kind: Input should be 'leaderboard'"),
        (None, "not JSON"),
    ],
)
def test_a_hand_edited_leaderboard_is_a_one_line_error(two_models: tuple[list[str], Path], change, message) -> None:
    specs, root = two_models
    run_models(specs, RunOptions(probes=["template"], limit=8, out=root, use_cache=False))
    path = root / "comparison" / "leaderboard.json"
    if change is None:
        path.write_text(path.read_text()[:300])
    else:
        obj = json.loads(path.read_text())
        change(obj)
        path.write_text(json.dumps(obj))
    with pytest.raises(DataError, match=f"^malformed leaderboard {path}: {message}"):
        export([root / "comparison"], "md", None)
