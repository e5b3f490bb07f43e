"""The Python API: checked arguments, fairprobe's own errors, results read back with tidy frames, models in memory."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fairprobe
from fairprobe.errors import ConfigError, DataError
from test_runner import ScriptedBackend


def test_an_unknown_or_misspelled_argument_is_one_clear_error_before_any_work(tmp_path: Path) -> None:
    with pytest.raises(fairprobe.ArgumentError) as info:
        fairprobe.run(probes=["template"], limits=8, out=tmp_path / "r")
    assert str(info.value) == "fairprobe.run() has no argument 'limits': did you mean 'limit'?"
    assert isinstance(info.value, (ConfigError, TypeError)) and not (tmp_path / "r").exists()
    with pytest.raises(
        fairprobe.ArgumentError, match=r"^fairprobe.check\(\) has no argument 'colour' \(it takes run, "
    ):
        fairprobe.check(tmp_path, {"gld": 0.1}, colour=True)
    with pytest.raises(fairprobe.ArgumentError, match=r"takes 1 positional argument \(model\); name the others"):
        fairprobe.run("smollm2-135m-instruct", "template")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"limit": 0}, "fairprobe.run(): limit: Input should be greater than or equal to 1, got 0"),
        ({"temperature": "warm"}, "fairprobe.run(): temperature: Input should be a valid number"),
        ({"probes": 3}, "probes must be a name, a comma-separated string or a list of names, got 3"),
        ({"suite": "papers"}, "unknown suite 'papers': choose from"),
        ({"out": 5}, "out must be a path (str or pathlib.Path), got 5"),
    ],
)
def test_a_bad_value_is_fairprobes_one_line_error(tmp_path: Path, arguments: dict, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        fairprobe.run(ScriptedBackend(), **{"out": tmp_path / "r", **arguments}, progress=False)
    assert str(info.value).startswith(message) and "\n" not in str(info.value)
    assert type(info.value).__module__.startswith("fairprobe")  # never pydantic's ValidationError


def test_a_run_reads_back_with_tidy_frames_of_metrics_and_samples(tmp_path: Path) -> None:
    run = fairprobe.run(ScriptedBackend(), probes="template", limit=8, out=tmp_path / "r", progress=False)
    assert isinstance(run, fairprobe.Run) and run.folder == tmp_path / "r"
    assert run.report_path == tmp_path / "r" / "report.html" and run.manifest["settings"]["limit"] == 8
    assert len(run.samples) == 8 and run.samples[0]["set"] == "template"
    metrics = run.to_pandas()
    assert list(metrics.columns) == [
        "model", "set", "subset", "metric", "value", "ci_low", "ci_high", "n", "mark", "too_little_data", "note",
        "bound_low", "bound_high",
    ]  # fmt: skip
    summary = json.loads((run.folder / "summary.json").read_text())["results"]["template"]
    gas = metrics[(metrics.subset == "all") & (metrics.metric == "gas")].iloc[0]
    assert (gas.value, [gas.ci_low, gas.ci_high], gas.n) == (
        summary["metrics"]["gas"]["value"], summary["metrics"]["gas"]["ci95"], 8,
    )  # fmt: skip
    per_subset = metrics[metrics.subset != "all"]
    assert set(per_subset.subset) == set(summary["subsets"])
    samples = run.to_pandas("samples")
    assert len(samples) == 8 and {"model", "set", "id", "prompt", "continuation"} <= set(samples.columns)
    again = fairprobe.load(tmp_path / "r")
    assert again.summary == run.summary and again.to_pandas().equals(metrics)


def test_load_names_what_it_cannot_read(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"no fairprobe folder at .*nowhere"):
        fairprobe.load(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "samples.jsonl").write_text("")
    with pytest.raises(DataError, match=r"holds no fairprobe result .* running the same command again"):
        fairprobe.load(tmp_path / "half")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "summary.json").write_text("{not json")
    with pytest.raises(DataError, match=r"malformed summary\.json"):
        fairprobe.load(tmp_path / "bad")


def test_check_gates_a_run_and_to_pandas_without_pandas_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = fairprobe.run(ScriptedBackend(), probes=["template"], limit=16, out=tmp_path / "r", progress=False)
    upper = run.summary.results["template"].metrics["gas"].ci95[1]
    assert fairprobe.check(run, {"gas": upper + 0.01}).ok
    failed = fairprobe.check(tmp_path / "r", {"gas": upper - 0.01}, sets="template")
    assert not failed.ok and len(failed.failures) == 1 and "gas" in failed.failures[0]
    lower = run.summary.results["template"].metrics["gas"].ci95[0]
    assert fairprobe.check(run, minimum={"gas": lower - 0.01}).ok
    assert "(min)" in fairprobe.check(run, minimum={"gas": lower + 0.01}).failures[0]
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ConfigError, match=r'needs pandas: pip install "fairprobe\[pandas\]"'):
        run.to_pandas()


def test_score_without_a_folder_keeps_its_samples_in_memory(tmp_path: Path) -> None:
    replies = tmp_path / "replies.jsonl"
    replies.write_text("".join(json.dumps({"id": str(i), "response": "She is a doctor."}) + "\n" for i in range(3)))
    scored = fairprobe.score("professional-bias", replies, model="my-system")
    assert scored.folder is None and scored.model == "my-system" and len(scored.samples) == 3
    assert scored.report_path is None  # no folder, no report (it raised TypeError)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda tmp: fairprobe.run(ScriptedBackend(), out=tmp / "r", options="flip=vijil", progress=False),
            "options must be a dict of key: value (e.g. {'flip': 'vijil'}), got 'flip=vijil'",
        ),
        (
            lambda tmp: fairprobe.run(ScriptedBackend(), out=tmp / "r", options=["flip=vijil"], progress=False),
            "options must be a dict of key: value (e.g. {'flip': 'vijil'}), got ['flip=vijil']",
        ),
        (
            lambda tmp: fairprobe.run("openai:m", out=tmp / "r", model_args="base_url=x", progress=False),
            "model_args must be a dict of key: value (e.g. {'flip': 'vijil'}), got 'base_url=x'",
        ),
        (
            lambda tmp: fairprobe.load(None),
            "fairprobe.load() needs a folder (a str or pathlib.Path) or a fairprobe result, got None",
        ),
        (
            lambda tmp: fairprobe.score(["professional-bias"], tmp / "replies.jsonl"),
            "fairprobe.score(): probes must be one probe set's name (a str), got ['professional-bias']",
        ),
        (
            lambda tmp: fairprobe.score("professional-bias", tmp / "replies.jsonl", options="x=1"),
            "options must be a dict of key: value (e.g. {'flip': 'vijil'}), got 'x=1'",
        ),
    ],
)
def test_an_argument_of_the_wrong_type_is_one_clear_error(tmp_path: Path, call: Any, message: str) -> None:
    # Issue 32: these raised AttributeError or TypeError from deep inside.
    with pytest.raises(fairprobe.ArgumentError) as info:
        call(tmp_path)
    assert str(info.value) == message and isinstance(info.value, TypeError) and not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def smollm2_in_memory(embedded_backend):
    """The embedded model loaded as a notebook would hold it: its own transformers model and tokenizer (the
    session's backend keeps its own), from the converted safetensors folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from fairprobe.models.embedded import EMBEDDED, converted_folder, find_gguf

    entry = EMBEDDED["smollm2-135m-instruct"]
    folder = converted_folder(entry, find_gguf(entry), embedded_backend.info["gguf_sha256"])
    return AutoModelForCausalLM.from_pretrained(folder, dtype="float32"), AutoTokenizer.from_pretrained(folder)


@pytest.mark.slow
# peft's get_peft_model asks transformers >= 5.24 the deprecated `is_gradient_checkpointing` (peft's to fix).
@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_a_transformers_and_a_peft_model_in_memory_are_measured_directly(
    tmp_path: Path, smollm2_in_memory, embedded_backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    from peft import LoraConfig, get_peft_model

    model, tokenizer = smollm2_in_memory
    monkeypatch.chdir(tmp_path)
    common = {"probes": "template", "limit": 2, "max_new_tokens": 12, "progress": False}
    by_spec = fairprobe.run(embedded_backend, out="spec", **common)
    model.train()  # as in the middle of fine-tuning
    kept, side = model.generation_config.to_dict(), tokenizer.padding_side
    direct = fairprobe.run(model, tokenizer=tokenizer, out="mem", **common)
    assert model.training and model.generation_config.to_dict() == kept and tokenizer.padding_side == side
    assert direct.model == "memory:" + str(model.config._name_or_path)
    assert [s["continuation"] for s in direct.samples] == [s["continuation"] for s in by_spec.samples]
    probs = np.array([s["p_female"] for s in by_spec.samples])
    np.testing.assert_allclose([s["p_female"] for s in direct.samples], probs, rtol=1e-4, atol=1e-7)
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"]))  # B = 0: the base model's outputs
    wrapped = fairprobe.run(lora, tokenizer=tokenizer, label="lora-step-0", **common)
    assert wrapped.model == "memory:lora-step-0" and wrapped.folder.parent == Path("runs/memory_lora-step-0")
    np.testing.assert_allclose([s["p_female"] for s in wrapped.samples], probs, rtol=1e-4, atol=1e-7)
    with pytest.raises(ConfigError, match="already holds a run: a model in memory is not recognised across runs"):
        fairprobe.run(model, tokenizer=tokenizer, out="mem", **common)
    with pytest.raises(ConfigError, match="a model object needs its tokenizer"):
        fairprobe.run(model, out="x", **common)


def test_a_list_of_models_runs_each_and_loads_back_as_a_comparison(tmp_path: Path, monkeypatch) -> None:
    import fairprobe.models
    from test_leaderboard import LeaningBackend

    monkeypatch.setattr(fairprobe.models.SCHEMES, "_entries", dict(fairprobe.models.SCHEMES._entries))
    fairprobe.models.register_scheme("api-a")(lambda rest, **kw: LeaningBackend("api-a", 2, 0.0))
    fairprobe.models.register_scheme("api-b")(lambda rest, **kw: LeaningBackend("api-b", 5, 1.0))
    common = {"probes": ["template"], "limit": 16, "use_cache": False, "progress": False}
    both = fairprobe.run(["api-a:x", "api-b:x"], out=tmp_path / "runs", sort_by="gld", **common)
    assert isinstance(both, fairprobe.Comparison) and both.folder == tmp_path / "runs" / "comparison"
    assert list(both.runs) == ["api-a", "api-b"] and both.report_path is not None
    frame = both.to_pandas()
    assert set(frame.model) == {"api-a", "api-b"}
    for name, run in both.runs.items():
        own = frame[frame.model == name].drop(columns="model").reset_index(drop=True)
        assert own.equals(run.to_pandas().drop(columns="model"))  # each model's rows, as its run gives them
    again = fairprobe.load(both.folder)
    assert again.leaderboard == both.leaderboard and len(again.to_pandas("samples")) == 32


def test_sweep_and_compare_return_their_folders_read_back(tmp_path: Path, monkeypatch) -> None:
    import fairprobe.models
    from test_leaderboard import LeaningBackend

    monkeypatch.setattr(fairprobe.models.SCHEMES, "_entries", dict(fairprobe.models.SCHEMES._entries))
    fairprobe.models.register_scheme("api-c")(lambda rest, **kw: LeaningBackend("api-c", 2, 0.0))
    common = {"probes": "template", "limit": 8, "progress": False}
    grid = fairprobe.sweep("api-c:x", only="temperature", temperature=[0.5, 0.7], seeds=1, out=tmp_path / "s", **common)
    assert isinstance(grid, fairprobe.Sweep) and grid.best()["setting"] in ("temperature=0.5", "temperature=0.7")
    assert grid.to_pandas().setting.tolist() == ["greedy", "temperature=0.5", "temperature=0.7"]
    with pytest.warns(UserWarning, match="No setting beats greedy decoding: the lowest of the grid, temperature=0.5"):
        methods = fairprobe.compare("api-c:x", sweep=grid, out=tmp_path / "c", **common)
    assert isinstance(methods, fairprobe.MitigationComparison)
    assert methods.result["method_order"] == ["Original", "Hyperparameter", "Instruction"]
    best = float(grid.best()["setting"].split("=")[1])
    assert methods.result["methods"]["Hyperparameter"]["decoding"]["temperature"] == best  # the sweep's best
    frame = methods.to_pandas()
    assert frame.drop_duplicates("method").method.tolist() == ["Original", "Hyperparameter", "Instruction"]
    assert set(methods.runs) == {"original", "hyperparameter", "instruction"}
    with pytest.raises(ConfigError, match="unknown sweep parameter 'tempreature'"):
        fairprobe.sweep("api-c:x", only="tempreature", out=tmp_path / "t", **common)
