"""The runner: run directory layout, identical reruns, resuming a killed run, Ctrl-C."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import exact_scores, fake_loglikelihood, shared_data_dir
from fairprobe.errors import ConfigError
from fairprobe.families import load_probe_set
from fairprobe.families.paper.words import AttributeWords
from fairprobe.models import Completion, GenerationConfig, ModelBackend, Prompt, ScoreRequest, Scores
from fairprobe.runner import RunInterrupted, RunOptions, RunPlan, run

N_PAIRS = len(AttributeWords.default().pairs)
REPLIES = ["she is a doctor.", "He'll be late.", "they left early.", "Her brother and his wife came."]


class ScriptedBackend(ModelBackend):
    """A fake model: the reply and probabilities are a fixed function of the prompt; counts calls.

    `interrupt_on` raises KeyboardInterrupt on that call (1-based), as Ctrl-C would mid-run.
    """

    name = "scripted"
    has_chat_template = False

    def __init__(self, interrupt_on: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.interrupt_on = interrupt_on

    def identity(self) -> dict[str, Any]:
        return {"id": "scripted", "backend": "test"}

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        score: list[tuple[str, ...]] | None = None,
        seeds: list[int] | None = None,
    ) -> list[Completion]:
        self.calls.append([str(p) for p in prompts])
        if self.interrupt_on is not None and len(self.calls) == self.interrupt_on:
            raise KeyboardInterrupt
        out = []
        for i, p in enumerate(prompts):
            h = zlib.crc32(str(p).encode())
            probs = np.full(len(score[i]) if score else 2 * N_PAIRS, 1e-4)
            probs[:2] = [(h % 97) / 400, (h % 89) / 400]
            scores = exact_scores(probs.tolist()) if score else None
            out.append(Completion(text=REPLIES[h % len(REPLIES)], scores=scores))
        return out

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        return fake_loglikelihood(requests)


def options(out: Path, **kw: Any) -> RunOptions:
    """Two small paper sets, three batches each."""
    base: dict[str, Any] = {
        "probes": ["template", "llm-gen-1"],
        "data_dir": shared_data_dir(),  # the shared data root: one convention for every suite
        "limit": 10,
        "batch_size": 4,
        "out": out,
    }
    return RunOptions(**{**base, **kw})


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_backend_is_a_model_backend() -> None:
    assert isinstance(ScriptedBackend(), ModelBackend)


def test_run_directory_layout(tmp_path: Path) -> None:
    out = tmp_path / "run"
    backend = ScriptedBackend()
    summary = run(options(out), backend=backend)
    # One call per batch: the continuations, with every word pair's and group's next-word scores read from it.
    assert len(backend.calls) == 6 and all(len(c) <= 4 for c in backend.calls)
    assert {"manifest.json", "samples.jsonl", "summary.json"} <= {p.name for p in out.iterdir()}

    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["model"] == {"id": "scripted", "backend": "test"}
    assert manifest["decoding"]["max_new_tokens"] == 50 and manifest["decoding"]["temperature"] == 0.0
    assert manifest["seed"] == 0
    assert set(manifest["probe_sets"]) == {"template", "llm-gen-1"}
    for entry in manifest["probe_sets"].values():
        assert len(entry["sha256"]) == 64 and entry["source"] and entry["n"] == 10 and entry["drawn"]["n"] == 10
    assert manifest["started"] <= manifest["finished"]

    samples = lines(out / "samples.jsonl")
    drawn = {name: load_probe_set(name, data_dir=shared_data_dir(), limit=10).probes for name in options(out).probes}
    assert [(s["set"], s["id"]) for s in samples] == [(name, p.id) for name, ps in drawn.items() for p in ps]
    first = samples[0]
    assert {"prompt", "continuation", "words_found", "first_gender", "p_female", "p_male", "batch"} <= set(first)
    assert len(first["p_female"]) == len(first["p_male"]) == N_PAIRS
    assert first["prompt"] == "My friend is a nurse, and" or first["prompt"].startswith("My friend")

    obj = json.loads((out / "summary.json").read_text())
    assert obj == summary.to_json_obj()
    assert set(obj) == {"fairprobe_version", "model", "results"}
    assert obj["model"] == "scripted"
    for name in ("template", "llm-gen-1"):
        result = obj["results"][name]
        assert result["n"] == 10 and result["source"]
        for metric in ("gas", "gas_f", "gas_m", "delta", "gld", "add", "log_add"):
            assert set(result["metrics"][metric]) >= {"value", "ci95"}
        # GAS from the saved samples: every scripted reply but "they left early." has an attribute word.
        mine = [s for s in samples if s["set"] == name]
        gendered = [s["first_gender"] for s in mine if s["first_gender"]]
        assert result["metrics"]["gas"]["value"] == pytest.approx(len(gendered) / 10)
        assert result["metrics"]["gas_f"]["value"] == pytest.approx(gendered.count("female") / len(gendered))
        gld = np.mean(
            [abs(sum(s["p_female"]) - sum(s["p_male"])) / (sum(s["p_female"]) + sum(s["p_male"])) for s in mine]
        )
        assert result["metrics"]["gld"]["value"] == pytest.approx(gld)
    # The template set reports its subsets (topic and stereotyped gender) with the same metrics.
    subsets = obj["results"]["template"]["subsets"]
    assert subsets and all(set(v) == {"n", "metrics"} and "gas" in v["metrics"] for v in subsets.values())


def test_same_options_give_identical_summary(tmp_path: Path) -> None:
    run(options(tmp_path / "a"), backend=ScriptedBackend())
    run(options(tmp_path / "b"), backend=ScriptedBackend())
    first = (tmp_path / "a" / "summary.json").read_bytes()
    assert first == (tmp_path / "b" / "summary.json").read_bytes()
    # Rerunning a finished run asks the model nothing and rewrites the same summary.
    again = ScriptedBackend()
    run(options(tmp_path / "a"), backend=again)
    assert again.calls == []
    assert (tmp_path / "a" / "summary.json").read_bytes() == first


def test_resume_after_a_killed_run(tmp_path: Path) -> None:
    run(options(tmp_path / "whole"), backend=ScriptedBackend())
    out = tmp_path / "killed"
    run(options(out), backend=ScriptedBackend())
    # Simulate a kill after the first batch: its samples, then half a line; no summary.
    saved = [s for s in (out / "samples.jsonl").read_text().splitlines() if json.loads(s)["set"] == "template"]
    first_batch = [s for s in saved if json.loads(s)["batch"] == 0]
    assert len(first_batch) == 4
    (out / "samples.jsonl").write_text("\n".join(first_batch) + "\n" + saved[-1][: len(saved[-1]) // 2])
    (out / "summary.json").unlink()

    backend = ScriptedBackend()
    run(options(out), backend=backend)
    assert len(backend.calls) == 5  # the first batch is not asked again (one call per batch)
    keys = [(s["set"], s["id"]) for s in lines(out / "samples.jsonl")]
    assert len(keys) == len(set(keys)) == 20
    assert (out / "summary.json").read_bytes() == (tmp_path / "whole" / "summary.json").read_bytes()
    assert (out / "samples.jsonl").read_bytes() == (tmp_path / "whole" / "samples.jsonl").read_bytes()


def test_ctrl_c_keeps_samples_and_resumes(tmp_path: Path) -> None:
    run(options(tmp_path / "whole"), backend=ScriptedBackend())
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted) as info:
        run(options(out), backend=ScriptedBackend(interrupt_on=2))  # the second batch's call
    assert not (out / "summary.json").exists()
    assert info.value.done == 4 and info.value.out == out
    assert "run the same command again" in str(info.value)
    assert [s["batch"] for s in lines(out / "samples.jsonl")] == [0, 0, 0, 0]
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]

    backend = ScriptedBackend()
    run(options(out), backend=backend)
    assert len(backend.calls) == 5  # the five batches not saved, one call each
    assert (out / "summary.json").read_bytes() == (tmp_path / "whole" / "summary.json").read_bytes()


def test_other_settings_are_not_resumed(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(options(out), backend=ScriptedBackend())
    with pytest.raises(ConfigError, match="holds a run with other settings"):
        run(options(out, seed=1), backend=ScriptedBackend())
    # Options that change no sample (where to write, device) still resume.
    elsewhere = options(tmp_path / "elsewhere", model_args={"device": "cpu"})
    assert RunPlan.build(options(out)).fingerprint() == RunPlan.build(elsewhere).fingerprint()


def test_out_that_is_a_file(tmp_path: Path) -> None:
    out = tmp_path / "file.txt"
    out.write_text("x")
    with pytest.raises(ConfigError, match=f"output folder is a file: {out}"):
        run(options(out), backend=ScriptedBackend())


@pytest.mark.slow
def test_real_model_run_with_limit(tmp_path: Path, embedded_backend: Any) -> None:
    out = tmp_path / "run"
    opts = options(out, probes=["template"], limit=4, generation=GenerationConfig(max_new_tokens=12), use_cache=False)
    summary = run(opts, backend=embedded_backend)
    samples = lines(out / "samples.jsonl")
    assert len(samples) == 4 and all(s["continuation"].strip() for s in samples)
    nurse = [s for s in samples if s["prompt"] == "My friend is a nurse, and"]
    assert nurse and nurse[0]["p_female"][0] == pytest.approx(0.199, abs=0.005)
    assert nurse[0]["p_male"][0] == pytest.approx(0.065, abs=0.005)
    assert summary.results["template"].n == 4
    assert json.loads((out / "manifest.json").read_text())["model"]["id"] == "smollm2-135m-instruct"


def test_python_api_shows_plain_progress_when_not_a_terminal(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import fairprobe

    fairprobe.run(ScriptedBackend(), probes=["template"], limit=8, batch_size=4, out=tmp_path / "r")
    said = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()]
    lines = [line for line in said if not line.startswith("--limit 8 is below")]  # the short limit's note
    assert lines[0] == "template: 0/8 (0%), 0s"
    assert lines[1].startswith("template: 8/8 (100%), ")
    assert len(lines) == 2
    fairprobe.run(ScriptedBackend(), progress=False, probes=["template"], limit=8, out=tmp_path / "q")
    assert capsys.readouterr().err == ""
