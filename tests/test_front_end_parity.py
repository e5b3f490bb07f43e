"""One front end: each run-producing command, given the same arguments on the command line and in Python, writes the
same manifests (times and the command line aside) and the same results, since the CLI is a shell over the API."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import fairprobe
import fairprobe.models
from fairprobe.cli import app
from test_cli_failures import fairprobe as fairprobe_cli
from test_cli_failures import one_error_line
from test_leaderboard import LeaningBackend

# What differs between two runs of the same settings: when they ran, and the command line that ran them.
VOLATILE = ("started", "finished", "command")


@pytest.fixture
def fake_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two fake model schemes (no weights, no server), registered for this test only."""
    monkeypatch.setattr(fairprobe.models.SCHEMES, "_entries", dict(fairprobe.models.SCHEMES._entries))
    fairprobe.models.register_scheme("parity-a")(lambda rest, **kw: LeaningBackend("parity-a", 2, 0.0))
    fairprobe.models.register_scheme("parity-b")(lambda rest, **kw: LeaningBackend("parity-b", 5, 1.0))


def written(root: Path) -> dict[str, Any]:
    """Every manifest (without its volatile keys) and every result file a command wrote under `root`, by path."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*.json")):
        obj = json.loads(path.read_text(encoding="utf-8"))
        if path.name == "manifest.json":
            obj = {k: v for k, v in obj.items() if k not in VOLATILE}
        found[str(path.relative_to(root))] = obj
    for path in sorted(root.rglob("samples.jsonl")):
        found[str(path.relative_to(root))] = path.read_text(encoding="utf-8")
    return found


def both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], call: Callable[[], Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the command `args` writes and what the Python call writes, each run in a folder of its own (relative
    paths, so both record the same ones)."""
    results = []
    for side, work in (("cli", lambda: CliRunner().invoke(app, args)), ("api", call)):
        folder = tmp_path / side
        folder.mkdir()
        monkeypatch.chdir(folder)
        (folder / "replies.jsonl").write_text('{"id": "0", "response": "The nurse."}\n', encoding="utf-8")
        done = work()
        if side == "cli":
            assert done.exit_code == 0, done.output
        results.append(written(folder / "out"))
    return results[0], results[1]


COMMON = ["--probes", "template", "--limit", "6", "--max-new-tokens", "8"]
KWARGS: dict[str, Any] = {"probes": "template", "limit": 6, "max_new_tokens": 8, "progress": False}


@pytest.mark.parametrize(
    ("args", "call"),
    [
        (
            ["run", "--model", "parity-a:x", *COMMON, "--seed", "2", "--temperature", "0.7", "--no-cache", "-o",
             "instruction=paper", "--out", "out"],
            lambda: fairprobe.run("parity-a:x", **KWARGS, seed=2, temperature=0.7, use_cache=False,
                                  options={"instruction": "paper"}, out="out"),
        ),
        (
            ["run", "--model", "parity-a:x", "--model", "parity-b:x", *COMMON, "--sort-by", "gld", "--out", "out"],
            lambda: fairprobe.run(["parity-a:x", "parity-b:x"], **KWARGS, sort_by="gld", out="out"),
        ),
        (
            ["compare", "--model", "parity-a:x", *COMMON, "--hyper", "temperature=0.5", "--out", "out"],
            lambda: fairprobe.compare("parity-a:x", **KWARGS, hyper="temperature=0.5", out="out"),
        ),
        (
            ["compare", "--model", "parity-a:x", "--suite", "paper,genderbench", "--probes", "template,bbq-gender",
             "--limit", "2", "--max-new-tokens", "8", "-o", "mode=exact", "--out", "out"],
            lambda: fairprobe.compare("parity-a:x", suite="paper,genderbench", probes="template,bbq-gender", limit=2,
                                      max_new_tokens=8, options={"mode": "exact"}, progress=False, out="out"),
        ),
        (
            ["sweep", "--model", "parity-a:x", *COMMON, "--only", "top_k", "--top-k", "10", "--seeds", "2",
             "--out", "out"],
            lambda: fairprobe.sweep("parity-a:x", **KWARGS, only=["top_k"], top_k=[10], seeds=2, out="out"),
        ),
        (
            ["sweep", "--model", "parity-a:x", "--suite", "genderbench", "--probes", "bbq-gender", "--limit", "2",
             "--max-new-tokens", "8", "--only", "top_k", "--top-k", "10", "--seeds", "1", "-o", "mode=exact", "--out",
             "out"],
            lambda: fairprobe.sweep("parity-a:x", suite="genderbench", probes="bbq-gender", limit=2, max_new_tokens=8,
                                    only=["top_k"], top_k=[10], seeds=1, options={"mode": "exact"}, progress=False,
                                    out="out"),
        ),
        (
            ["score", "--probes", "professional-bias", "--responses", "replies.jsonl", "--model", "mine", "--out",
             "out"],
            lambda: fairprobe.score("professional-bias", "replies.jsonl", model="mine", out="out"),
        ),
    ],
    ids=["run", "many-models", "compare", "compare-options", "sweep", "sweep-options", "score"],
)  # fmt: skip
@pytest.mark.usefixtures("fake_models")
def test_a_command_and_its_python_call_write_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], call: Callable[[], Any]
) -> None:
    cli, api = both_ways(tmp_path, monkeypatch, args, call)
    assert any(name.endswith("manifest.json") for name in cli)
    assert list(cli) == list(api)
    for name in cli:
        assert cli[name] == api[name], name


@pytest.mark.usefixtures("fake_models")
def test_compare_instruction_means_the_same_in_both(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = ["compare", "--model", "parity-a:x", *COMMON, "--hyper", "", "--instruction", "", "--out", "out"]
    cli, api = both_ways(tmp_path, monkeypatch, args, lambda: fairprobe.compare("parity-a:x", **KWARGS, hyper=None,
                                                                                 instruction=None, out="out"))  # fmt: skip
    assert cli["compare.json"]["method_order"] == api["compare.json"]["method_order"] == ["Original"]


@pytest.mark.usefixtures("fake_models")
def test_compare_with_an_option_reads_every_variants_sets_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`compare -o mode=exact` on a paper and a GenderBench set: every variant's GenderBench run records exact mode
    (asked, and read exactly), the paper's runs (whose families take no mode) record no mode; a key no family of
    the comparison takes is a one-line error before anything runs."""
    monkeypatch.chdir(tmp_path)
    args = ["compare", "--model", "parity-a:x", "--suite", "paper,genderbench", "--probes", "template,bbq-gender"]
    done = CliRunner().invoke(app, [*args, "--limit", "2", "--max-new-tokens", "8", "-o", "mode=exact"])
    assert done.exit_code == 0, done.output
    runs = tmp_path / "runs" / "compare" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["hyperparameter", "instruction", "original"]
    for variant in runs.iterdir():
        bbq = json.loads((variant / "genderbench" / "manifest.json").read_text(encoding="utf-8"))
        assert bbq["settings"]["probe_options"] == {"mode": "exact"} | (
            {"instruction": "paper"} if variant.name == "instruction" else {}
        )
        assert bbq["family_options"]["genderbench_bbq"]["mode"] == "exact"
        assert bbq["implicit"]["sets"]["bbq-gender"]["mode"] == "exact"
        paper = json.loads((variant / "paper" / "manifest.json").read_text(encoding="utf-8"))
        assert "mode" not in paper["settings"]["probe_options"] and "mode" not in paper["family_options"]["paper"]
    code, _, err = fairprobe_cli(capsys, *args, "--limit", "2", "-o", "nonsense=1", "--out", "bad")
    assert one_error_line(code, err) == "error: unknown template option 'nonsense': use instruction, words, implicit"
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow
def test_tune_writes_the_same_adapter_both_ways(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = {"steps": 2, "rank": 4, "batch_size": 2, "eval_every": 1, "checkpoint_every": 1, "dev_drift": 0}
    args = [f"--{k.replace('_', '-')}={v}" for k, v in given.items()]
    folders = []
    for side in ("cli", "api"):
        folder = tmp_path / side
        folder.mkdir()
        monkeypatch.chdir(folder)
        (folder / "train.csv").write_text("is riding a bike\nis cooking dinner\nplays the piano\nis reading a book\n")
        (folder / "dev.csv").write_text("My friend is painting a fence\nis walking a dog\n")
        common = {"train": "train.csv", "dev": "dev.csv", "out": "out", "device": "cpu", "dtype": "float32"}
        if side == "cli":
            done = CliRunner().invoke(
                app, ["tune", *args, *(f"--{k.replace('_', '-')}={v}" for k, v in common.items())]
            )
            assert done.exit_code == 0, done.output
        else:
            fairprobe.tune(**given, **common, progress=False)
        folders.append(folder / "out")
    cli, api = (json.loads((f / "manifest.json").read_text()) for f in folders)
    timed = ("train_seconds", "seconds_per_step", "started", "finished")
    assert {k: v for k, v in cli.items() if k not in timed} == {k: v for k, v in api.items() if k not in timed}
    assert (folders[0] / "adapter_model.safetensors").read_bytes() == (
        folders[1] / "adapter_model.safetensors"
    ).read_bytes()
