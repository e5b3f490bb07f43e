"""Files fairprobe reads back, hand-edited or cut short: one-line errors naming the file and the field."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fairprobe.documents import Sweep, read_document
from fairprobe.errors import DataError, ModelError
from fairprobe.mitigation.compare import compare
from fairprobe.mitigation.sweep import sweep
from fairprobe.mitigation.tuning import read_ablations
from fairprobe.models.adapters import attach_adapter
from fairprobe.report.runs import load_run, read_comparison
from fairprobe.runner import RunOptions
from openai_servers import scripted

Edit = Callable[[dict[str, Any]], None]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fairprobe", *args], capture_output=True, text=True, timeout=120)


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    """The single line a refused command prints (exit 2, no traceback)."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


def edited(path: Path, change: Edit | str) -> None:
    """Rewrite a JSON file with one change applied (or replace its text)."""
    if isinstance(change, str):
        path.write_text(change, encoding="utf-8")
        return
    obj = json.loads(path.read_text(encoding="utf-8"))
    change(obj)
    path.write_text(json.dumps(obj), encoding="utf-8")


def truncated(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    return text[: len(text) // 2]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep and a mitigation comparison written by fairprobe (an API model on the scripted server)."""
    root = tmp_path_factory.mktemp("documents")
    with scripted() as (url, _):
        options = RunOptions(
            model="openai:toy", model_args={"base_url": url}, probes=["template"], limit=4, use_cache=False
        )
        compare(options, root / "cmp", hyper="temperature=0.5", instruction="")
        sweep(options, root / "sweep", grid={"temperature": [0.5, 1.0]}, seeds=1)
    return root


def test_what_fairprobe_writes_reads_back(written: Path) -> None:
    swept = read_document(written / "sweep" / "sweep.json", Sweep, "sweep file")
    assert swept.sets["template"].best.setting in ("temperature=0.5", "temperature=1")
    assert read_comparison(written / "cmp" / "compare.json")["method_order"] == ["Original", "Hyperparameter"]
    assert load_run(written / "cmp" / "runs" / "original").manifest["options"]["probes"] == ["template"]


SWEEP_EDITS: list[tuple[str, Edit | None, str]] = [
    ("cut short", None, "not JSON"),
    (
        "best not in grid",
        lambda o: o["sets"]["template"]["best"].update(setting="top_k=7"),
        "sets.template: best setting 'top_k=7' is not one of the sweep's settings",
    ),
    (
        "text for a number",
        lambda o: o["sets"]["template"]["settings"]["temperature=0.5"]["gas_per_seed"].__setitem__(0, "x"),
        r"sets.template.settings\[\"temperature=0.5\"\].gas_per_seed\[0\]: Input should be a valid number",
    ),
    ("zero seeds", lambda o: o.update(seeds=0), "seeds: Input should be greater than or equal to 1"),
    ("no sets", lambda o: o.update(sets={}), "sets: Dictionary should have at least 1 item"),
    ("a list", lambda o: o.update(sets=[]), "sets: Input should be an object"),
    ("unknown knob", lambda o: o["grid"].update(top_q=[1]), "grid.top_q: Input should be 'temperature', 'top_p'"),
]


@pytest.mark.parametrize(("name", "change", "message"), SWEEP_EDITS, ids=[e[0] for e in SWEEP_EDITS])
def test_a_hand_edited_sweep_file_is_refused(written: Path, tmp_path: Path, name: str, change, message: str) -> None:
    from fairprobe.mitigation.sweep import best_sweep_setting

    path = tmp_path / "sweep.json"
    shutil.copy(written / "sweep" / "sweep.json", path)
    edited(path, change or truncated(path))
    with pytest.raises(DataError, match=f"^malformed sweep file {path}: ({message})"):
        best_sweep_setting(path)


def test_non_finite_numbers_in_a_file_are_refused(written: Path, tmp_path: Path) -> None:
    path = tmp_path / "sweep.json"
    text = (written / "sweep" / "sweep.json").read_text(encoding="utf-8")
    path.write_text(text.replace('"base_temperature": 1.0', '"base_temperature": NaN'), encoding="utf-8")
    with pytest.raises(DataError, match=f"^malformed sweep file {path}: NaN is not a JSON number$"):
        read_document(path, Sweep, "sweep file")
    path.write_text(text.replace('"base_temperature": 1.0', '"base_temperature": 1e999'), encoding="utf-8")
    with pytest.raises(DataError, match="base_temperature: Input should be a finite number"):
        read_document(path, Sweep, "sweep file")
    # Through the command line: one line, exit 2, and nothing run.
    line = one_line_error(_cli("compare", "--sweep", str(path), "--out", str(tmp_path / "never")))
    assert (
        line == f"error: malformed sweep file {path}: base_temperature: Input should be a finite number (got Infinity)"
    )
    assert not (tmp_path / "never").exists()


COMPARE_EDITS: list[tuple[str, Edit | None, str]] = [
    ("cut short", None, "not JSON"),
    (
        "order names a missing method",
        lambda o: o["method_order"].append("Debias Tuning"),
        "method_order names 'Debias Tuning', which is not one of the methods",
    ),
    (
        "a set lacks a method",
        lambda o: o["sets"]["template"]["methods"].pop("Hyperparameter"),
        "set 'template' has no row for method 'Hyperparameter'",
    ),
    (
        "text for a metric",
        lambda o: o["sets"]["template"]["methods"]["Original"]["metrics"]["gas"].update(value="x"),
        "sets.template.methods.Original.metrics.gas.value: Input should be a valid number",
    ),
    (
        "tests as a list",
        lambda o: o["sets"]["template"]["methods"]["Hyperparameter"].update(vs_original=[]),
        "sets.template.methods.Hyperparameter.vs_original: Input should be an object",
    ),
    (
        "p above 1",
        lambda o: o["sets"]["template"]["methods"]["Hyperparameter"]["vs_original"]["gas"].update(p_mcnemar=3),
        "vs_original.gas.p_mcnemar: Input should be less than or equal to 1",
    ),
]


@pytest.mark.parametrize(("name", "change", "message"), COMPARE_EDITS, ids=[e[0] for e in COMPARE_EDITS])
def test_a_hand_edited_compare_file_is_refused(written: Path, tmp_path: Path, name: str, change, message: str) -> None:
    folder = tmp_path / "cmp"
    shutil.copytree(written / "cmp", folder)
    path = folder / "compare.json"
    edited(path, change or truncated(path))
    with pytest.raises(DataError, match=f"^malformed compare.json {path}: .*{message}"):
        load_run(folder)


def test_a_comparison_of_another_shape_is_read_with_its_metrics_checked(written: Path, tmp_path: Path) -> None:
    folder = tmp_path / "other"
    folder.mkdir()
    path = folder / "compare.json"
    path.write_text(json.dumps({"models": [{"name": "a", "gld": {"value": 0.2, "ci95": [0.1, 0.3]}}]}))
    assert load_run(folder).compare == {"models": [{"name": "a", "gld": {"value": 0.2, "ci95": [0.1, 0.3]}}]}
    path.write_text(json.dumps({"models": [{"name": "a", "gld": {"value": 0.2, "ci95": [0.1, "high"]}}]}))
    with pytest.raises(DataError, match=r"models\[0\].gld.ci95\[1\]: Input should be a valid number"):
        load_run(folder)
    # The report command says the same in one line.
    line = one_line_error(_cli("report", str(folder), "--format", "md"))
    assert line.startswith(
        f"error: malformed compare.json {path}: models[0].gld.ci95[1]: Input should be a valid number"
    )


def test_a_hand_edited_run_manifest_is_refused_by_the_report(written: Path, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    shutil.copytree(written / "cmp" / "runs" / "original", folder)
    edited(folder / "manifest.json", lambda o: o.update(options=["template"]))
    with pytest.raises(DataError, match=f"^malformed manifest.json {folder / 'manifest.json'}: options: Input should"):
        load_run(folder)
    edited(folder / "manifest.json", lambda o: o.update(options={}, decoding={"temperature": "hot"}))
    line = one_line_error(_cli("report", str(folder), "--format", "md"))
    assert 'decoding.temperature: Input should be a valid number (got "hot")' in line


def _ablations(folder: Path) -> Path:
    folder.mkdir()
    index = {
        "kind": "debias-tuning-ablations",
        "variants": {
            "full": {"name": "Debias Tuning", "losses": "d,g,l"},
            "no-d": {"name": "w/o L_d", "losses": "g,l"},
        },
        "order": ["full", "no-d"],
    }
    for slug in index["variants"]:
        (folder / slug).mkdir()
        (folder / slug / "manifest.json").write_text("{}")
    (folder / "ablations.json").write_text(json.dumps(index))
    return folder / "ablations.json"


ABLATION_EDITS: list[tuple[str, Edit | None, str]] = [
    ("cut short", None, "not JSON"),
    (
        "a path for a name",
        lambda o: o["variants"].update({"../../elsewhere": {"name": "x", "losses": "d"}}),
        r"variants\[\"../../elsewhere\"\]: String should match pattern",
    ),
    (
        "order names a missing variant",
        lambda o: o["order"].append("no-g"),
        "order names 'no-g', which is not one of the variants",
    ),
    (
        "two variants, one name",
        lambda o: o["variants"]["no-d"].update(name="Debias Tuning"),
        "two variants have the same name",
    ),
    ("no losses", lambda o: o["variants"]["full"].pop("losses"), "variants.full.losses: Field required"),
    ("another kind", lambda o: o.update(kind="leaderboard"), "kind: Input should be 'debias-tuning-ablations'"),
]


@pytest.mark.parametrize(("name", "change", "message"), ABLATION_EDITS, ids=[e[0] for e in ABLATION_EDITS])
def test_a_hand_edited_ablations_index_is_refused(tmp_path: Path, name: str, change, message: str) -> None:
    path = _ablations(tmp_path / "abl")
    assert read_ablations(path.parent) == {
        "Debias Tuning": str(path.parent / "full"),
        "w/o L_d": str(path.parent / "no-d"),
    }
    edited(path, change or truncated(path))
    with pytest.raises(DataError, match=f"^malformed ablations index {path}: {message}"):
        read_ablations(path.parent)


def test_a_hand_edited_ablations_index_stops_compare_before_anything_runs(tmp_path: Path) -> None:
    path = _ablations(tmp_path / "abl")
    edited(path, lambda o: o["variants"].update({"/etc": {"name": "x", "losses": "d"}}))
    line = one_line_error(_cli("compare", "--ablations", str(path.parent), "--out", str(tmp_path / "never")))
    assert line.startswith(f'error: malformed ablations index {path}: variants["/etc"]: String should match pattern')
    assert not (tmp_path / "never").exists()


def _adapter(folder: Path) -> Path:
    """An adapter folder as `fairprobe tune` leaves it: config, weights and a manifest recording their sha256."""
    folder.mkdir()
    weights = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      " + bytes(range(256)) * 4
    (folder / "adapter_model.safetensors").write_bytes(weights)
    (folder / "adapter_config.json").write_text("{}")
    manifest = {
        "fairprobe_version": "0.1.0",
        "kind": "debias-tuning",
        "fingerprint": "abc123",
        "base_model": {"id": "tiny", "config": {"hidden_size": 8}},
        "losses": {"d": 1.0, "g": 1.0, "l": 1.0},
        "hyperparameters": {"rank": 8},
        "data": {"train": {"n": 4}},
        "dev_evaluated": 2,
        "dev_curve": [{"step": 0, "loss": 0.5, "gld": 0.3}, {"step": 2, "loss": 0.4, "gld": 0.2}],
        "train_curve": [{"step": 1, "loss": 0.6}],
        "perplexity": {"before": 20.0, "after": 21.0, "relative_change": 0.05},
        "train_seconds": 3.5,
        "finished": "2025-01-01T00:00:00+00:00",
        "adapter_sha256": hashlib.sha256(weights).hexdigest(),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


ADAPTER_EDITS: list[tuple[str, Edit | None, str]] = [
    ("cut short", None, "not JSON"),
    ("no base model", lambda o: o.pop("base_model"), "base_model: Field required"),
    ("GLD above 1", lambda o: o["dev_curve"][1].update(gld=7), r"dev_curve\[1\].gld: Input should be less than"),
    ("empty dev curve", lambda o: o.update(dev_curve=[]), "dev_curve: List should have at least 1 item"),
    ("not a sha256", lambda o: o.update(adapter_sha256="x"), "adapter_sha256: String should match pattern"),
    ("perplexity 0", lambda o: o["perplexity"].update(before=0), "perplexity.before: Input should be greater than 0"),
]
TINY = SimpleNamespace(config=SimpleNamespace(hidden_size=8))


@pytest.mark.parametrize(("name", "change", "message"), ADAPTER_EDITS, ids=[e[0] for e in ADAPTER_EDITS])
def test_a_hand_edited_adapter_manifest_is_refused(tmp_path: Path, name: str, change, message: str) -> None:
    folder = _adapter(tmp_path / "adapter")
    edited(folder / "manifest.json", change or truncated(folder / "manifest.json"))
    with pytest.raises(DataError, match=f"^malformed adapter manifest {folder / 'manifest.json'}: {message}"):
        attach_adapter(TINY, folder, {"id": "tiny"})


def test_adapter_weights_cut_short_or_edited_are_refused_before_loading(tmp_path: Path) -> None:
    folder = _adapter(tmp_path / "adapter")
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(ModelError, match=f"^adapter weights {weights} do not match the sha256 its manifest.json"):
        attach_adapter(TINY, folder, {"id": "tiny"})
    weights.unlink()
    with pytest.raises(ModelError, match=r"has a manifest but no adapter_model\.safetensors"):
        attach_adapter(TINY, folder, {"id": "tiny"})


def test_a_hand_edited_adapter_manifest_stops_tune_in_one_line(tmp_path: Path) -> None:
    folder = _adapter(tmp_path / "adapter")
    edited(folder / "manifest.json", lambda o: o.update(fingerprint=7))
    train = tmp_path / "train.txt"
    train.write_text("My friend is kind\nMy friend is tall\nMy friend runs\n", encoding="utf-8")
    line = one_line_error(_cli("tune", "--train", str(train), "--out", str(folder)))
    assert line == (
        f"error: malformed adapter manifest {folder / 'manifest.json'}: fingerprint: Input should be a valid string "
        "(got 7)"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["sweep", "--top-k", "inf"], "error: top_k values must be finite numbers separated by commas, got 'inf'"),
        (["sweep", "--temperature", "0.3,nan"], "error: temperature values must be finite numbers separated by commas"),
        (["compare", "--hyper", "top_k=nan"], "error: top-k nan is not a finite number"),
        (["tune", "--lr", "inf"], "error: lr: Input should be a finite number"),
        (["tune", "--alpha", "nan"], "error: alpha: Input should be a finite number"),
        (["run", "--temperature", "1", "--top-p", "nan"], "error: top_p: Input should be a finite number"),
    ],
)
def test_non_finite_numbers_on_the_command_line_are_refused(tmp_path: Path, args: list[str], message: str) -> None:
    line = one_line_error(_cli(*args, "--out", str(tmp_path / "never")))
    assert line.startswith(message)
    assert not (tmp_path / "never").exists()
