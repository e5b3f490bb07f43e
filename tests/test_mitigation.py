"""Mitigation: Debias Tuning losses, training and resume, adapters, decoding sweep and comparison."""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from fairprobe.errors import ConfigError, DataError, ModelError
from fairprobe.families.paper import INSTRUCTION
from fairprobe.families.paper.metrics import add_per_prompt, gld_per_prompt
from fairprobe.mitigation.loss_weights import LossWeights
from fairprobe.mitigation.losses import debias_loss, loss_d, loss_g, loss_l
from fairprobe.mitigation.sweep import check_grid
from fairprobe.mitigation.tune_data import TuneOptions, batch_indices
from fairprobe.mitigation.tuning import tune
from fairprobe.models import GenerationConfig, load_model
from fairprobe.progress import SilentProgress
from fairprobe.runner import RunOptions, read_samples
from fairprobe.statistics.stats import exact_mcnemar

# One prompt, two pairs: (she 0.2, he 0.1), (her 0.05, his 0.0); and a second prompt.
PROBS = torch.tensor([[[0.2, 0.1], [0.05, 0.0]], [[0.3, 0.3], [0.0, 0.1]]], dtype=torch.float64)
EPS = 1e-10


def _kl_terms(f: float, m: float) -> float:
    f, m = f + EPS, m + EPS
    return f * math.log(2 * f / (f + m)) + m * math.log(2 * m / (f + m))


def test_losses_match_hand_computed_values() -> None:
    # L_g: every gendered probability summed over pairs and prompts.
    assert float(loss_g(PROBS)) == pytest.approx(0.35 + 0.7)
    # L_l: |F - M| / (F + M) per prompt: 0.15 / 0.35 and 0.1 / 0.7.
    assert float(loss_l(PROBS)) == pytest.approx(0.15 / 0.35 + 0.1 / 0.7)
    # L_d: the ADD sum without 1/(2|X|): pair terms of both prompts.
    by_hand = _kl_terms(0.2, 0.1) + _kl_terms(0.05, 0.0) + _kl_terms(0.3, 0.3) + _kl_terms(0.0, 0.1)
    assert float(loss_d(PROBS)) == pytest.approx(by_hand, rel=1e-9)
    assert by_hand == pytest.approx(0.0169899 + 0.0346574 + 0.0 + 0.0693147, abs=1e-6)
    # Same numbers as the metrics: L_d = 2 |X| ADD, L_l = |X| GLD.
    p = PROBS.numpy()
    assert float(loss_d(PROBS)) == pytest.approx(2 * add_per_prompt(p[..., 0], p[..., 1]).sum(), rel=1e-9)
    assert float(loss_l(PROBS)) == pytest.approx(gld_per_prompt(p[..., 0], p[..., 1]).sum(), rel=1e-12)
    # A prompt with no gendered mass adds 0 to L_l (no division by zero).
    assert float(loss_l(torch.zeros(1, 2, 2))) == 0.0


def test_loss_weights_switch_terms_and_weigh_them() -> None:
    total, parts = debias_loss(PROBS, LossWeights.parse("g,l"))
    assert float(total) == pytest.approx(parts["g"] + parts["l"])
    total, parts = debias_loss(PROBS, LossWeights.parse("d=2,g=0.5"))
    assert float(total) == pytest.approx(2 * parts["d"] + 0.5 * parts["g"])
    assert LossWeights.parse("L_d,L_g,L_l").as_dict() == {"d": 1.0, "g": 1.0, "l": 1.0}
    for bad, message in (("x", "unknown loss"), ("d=a", "not a number"), ("d=0", "switch every debiasing term off")):
        with pytest.raises(ConfigError, match=message):
            LossWeights.parse(bad)


def _softmax_words(logits: torch.Tensor) -> torch.Tensor:
    """Vocabulary of 5: she, he, her, his, 'the'; next-word probabilities (1, 2, 2) of the two pairs."""
    return logits.softmax(-1)[:4].reshape(1, 2, 2)


@pytest.mark.parametrize("name", ["g", "l", "d"])
def test_a_gradient_step_lowers_each_loss(name: str) -> None:
    logits = torch.tensor([2.0, 0.5, 1.0, 0.0, 1.5], requires_grad=True)
    weights = LossWeights.parse(name)
    before, _ = debias_loss(_softmax_words(logits), weights)
    before.backward()
    with torch.no_grad():
        stepped = logits - 0.5 * logits.grad
    after, _ = debias_loss(_softmax_words(stepped), weights)
    assert float(after) < float(before.detach())
    if name == "g":
        # L_g lowers gendered probabilities: the neutral word's logit goes up relative to all others.
        assert float(_softmax_words(stepped).sum()) < float(_softmax_words(logits.detach()).sum())
        assert logits.grad[4] < 0


def test_batches_are_a_function_of_seed_and_step() -> None:
    first_epoch = np.concatenate([batch_indices(10, 4, s, seed=3) for s in range(2)])
    assert len(set(first_epoch.tolist())) == 8  # no repeats inside an epoch
    assert (batch_indices(10, 4, 5, seed=3) == batch_indices(10, 4, 5, seed=3)).all()
    assert not (batch_indices(10, 4, 0, seed=3) == batch_indices(10, 4, 0, seed=4)).all()
    # Step 2 straddles epochs 0 and 1: rows 8, 9 of epoch 0 and rows 0, 1 of epoch 1.
    order0 = np.random.default_rng([3, 0]).permutation(10)
    order1 = np.random.default_rng([3, 1]).permutation(10)
    assert batch_indices(10, 4, 2, seed=3).tolist() == [*order0[8:], *order1[:2]]


def test_bad_inputs_fail_clearly(tmp_path: Path) -> None:
    empty = tmp_path / "train.csv"
    empty.write_text("\n\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"train file is empty: .*train\.csv"):
        tune(TuneOptions(train_file=empty, out=tmp_path / "a"))
    with pytest.raises(ConfigError, match=r"top-p 1\.5 is out of range"):
        check_grid({"top_p": [0.3, 1.5]})
    with pytest.raises(ConfigError, match="temperature 0 is out of range"):
        check_grid({"temperature": [0.0]})
    with pytest.raises(ConfigError, match=r"top-k 2\.5 is out of range"):
        check_grid({"top_k": [2.5]})


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    code = "import sys\nfrom fairprobe.cli import main\nsys.argv = ['fairprobe', *sys.argv[1:]]\nmain()\n"
    done = subprocess.run(
        [sys.executable, "-c", code, "sweep", "--top-k", "10,0", "--out", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "error: top-k 0 is out of range: values must be whole numbers >= 1"


PREDICATES = ["is riding a bike", "is cooking dinner", "plays the piano", "is reading a book"]


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Four train predicates (one batch per step) and two dev predicates."""
    folder = tmp_path_factory.mktemp("tune-data")
    (folder / "train.csv").write_text("\n".join(PREDICATES) + "\n", encoding="utf-8")
    (folder / "dev.csv").write_text("My friend is painting a fence\nis walking a dog\n", encoding="utf-8")
    return folder / "train.csv", folder / "dev.csv"


def _options(data: tuple[Path, Path], out: Path, **kw) -> TuneOptions:
    base = dict(
        train_file=data[0],
        dev_file=data[1],
        out=out,
        rank=8,
        alpha=16,
        lr=5e-3,
        batch_size=4,
        steps=4,
        eval_every=2,
        checkpoint_every=2,
        device="cpu",
        dtype="float32",
    )
    return TuneOptions(**{**base, **kw})


class NoteProgress(SilentProgress):
    """Records the status lines a long step prints."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(text)


class LabelProgress(SilentProgress):
    """Records the label of every progress step."""

    def __init__(self) -> None:
        self.labels: list[str] = []

    def start(self, label: str, total: int) -> None:
        self.labels.append(label)


def test_default_dev_limit_scales_with_the_run(tmp_path: Path) -> None:
    from fairprobe.mitigation.tuning import dev_limit_for

    # The trial run evaluates 64 dev predicates, not all 681; the paper's 500 x 16 evaluates all.
    assert dev_limit_for(TuneOptions(out=tmp_path, steps=4, batch_size=4), 681) == 64
    assert dev_limit_for(TuneOptions(out=tmp_path, steps=40, batch_size=8), 681) == 320
    assert dev_limit_for(TuneOptions(out=tmp_path), 681) == 681
    assert dev_limit_for(TuneOptions(out=tmp_path, steps=4, batch_size=4, dev_limit=10), 681) == 10
    assert dev_limit_for(TuneOptions(out=tmp_path, dev_limit=1000), 681) == 681


@pytest.fixture(scope="module")
def trained(tiny_data: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An adapter trained 4 uninterrupted steps on the embedded model."""
    out = tmp_path_factory.mktemp("adapter") / "a"
    tune(_options(tiny_data, out))
    return out


@pytest.mark.slow
def test_tuning_lowers_the_loss_and_writes_a_manifest(trained: Path) -> None:
    manifest = json.loads((trained / "manifest.json").read_text(encoding="utf-8"))
    curve = [row["loss"] for row in manifest["train_curve"]]
    assert [row["step"] for row in manifest["train_curve"]] == [1, 2, 3, 4]
    assert curve[-1] < curve[0]
    dev = manifest["dev_curve"]
    assert [row["step"] for row in dev] == [0, 2, 4]
    assert dev[-1]["l_g"] < dev[0]["l_g"]  # the gendered next-word mass went down on held-out prompts
    assert manifest["base_model"]["id"] == "smollm2-135m-instruct"
    assert manifest["base_model"]["gguf_sha256"]
    assert manifest["hyperparameters"]["rank"] == 8
    assert manifest["losses"] == {"d": 1.0, "g": 1.0, "l": 1.0}
    assert manifest["data"]["train"]["n"] == 4 and manifest["data"]["dev"]["n"] == 2
    assert manifest["perplexity"]["before"] > 1 and manifest["perplexity"]["after"] > 1
    assert not (trained / "checkpoint").exists()


@pytest.mark.slow
def test_resume_continues_the_same_steps_and_weights(
    trained: Path, tiny_data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fairprobe.mitigation import trainer

    out = tmp_path / "b"
    real_step = trainer.DebiasTrainer.step
    calls = {"n": 0}

    def interrupt_third(self, predicates):  # the third step is hit by Ctrl-C
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_step(self, predicates)

    monkeypatch.setattr(trainer.DebiasTrainer, "step", interrupt_third)
    with pytest.raises(KeyboardInterrupt):
        tune(_options(tiny_data, out))
    state = torch.load(out / "checkpoint" / "trainer_state.pt", weights_only=False)
    assert state["step"] == 2
    monkeypatch.setattr(trainer.DebiasTrainer, "step", real_step)
    notes = NoteProgress()
    manifest = tune(_options(tiny_data, out), progress=notes)
    assert "resuming from step 2" in " ".join(notes.lines)
    assert "dev evaluation on 2 of 2 dev predicates (--dev-limit to change)" in notes.lines
    assert [row["step"] for row in manifest["train_curve"]] == [1, 2, 3, 4]
    assert adapter_bytes(out) == adapter_bytes(trained)  # the same adapter, byte for byte
    reference = json.loads((trained / "manifest.json").read_text(encoding="utf-8"))
    np.testing.assert_allclose(
        [r["loss"] for r in manifest["train_curve"]], [r["loss"] for r in reference["train_curve"]], rtol=1e-5
    )
    # Same command once more: nothing to do, the finished adapter is reported.
    assert tune(_options(tiny_data, out))["adapter_sha256"] == manifest["adapter_sha256"]
    with pytest.raises(ConfigError, match="trained with other settings"):
        tune(_options(tiny_data, out, lr=1e-3))


def adapter_bytes(folder: Path) -> bytes:
    return (folder / "adapter_model.safetensors").read_bytes()


@pytest.fixture()
def terminal_ctrl_c() -> Iterator[None]:
    """Python's own Ctrl-C handler, as in a terminal: a test run started in the background by a script (`cmd &`)
    inherits SIGINT ignored, and a Ctrl-C would then never arrive."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
@pytest.mark.parametrize("where", ["in a step", "in an evaluation"])
@pytest.mark.usefixtures("terminal_ctrl_c")
def test_ctrl_c_anywhere_then_resume_gives_the_same_adapter_bytes(
    trained: Path, tiny_data: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Ctrl-C (a real SIGINT) in the middle of step 2, after its forward pass drew dropout masks, or while step 2's
    dev evaluation runs: the resumed run finishes the step or redoes the evaluation, and its adapter and dev curve
    are those of the uninterrupted run."""
    from fairprobe.mitigation import trainer

    out = tmp_path / "b"
    calls = {"step": 0, "evaluate": 0}
    real_step, real_evaluate, real_loss = (
        trainer.DebiasTrainer.step,
        trainer.DebiasTrainer.evaluate,
        trainer.debias_loss,
    )

    def counted_step(self, predicates):
        calls["step"] += 1
        return real_step(self, predicates)

    def loss_then_ctrl_c(probs, weights, kl=None):  # inside step 2, after its forward pass
        if where == "in a step" and calls["step"] == 2 and torch.is_grad_enabled():
            signal.raise_signal(signal.SIGINT)
        return real_loss(probs, weights, kl)

    def evaluate_then_ctrl_c(self, predicates, *args, **kwargs):
        calls["evaluate"] += 1
        if where == "in an evaluation" and calls["evaluate"] == 2:  # the first is before tuning, the second at step 2
            signal.raise_signal(signal.SIGINT)
        return real_evaluate(self, predicates, *args, **kwargs)

    monkeypatch.setattr(trainer.DebiasTrainer, "step", counted_step)
    monkeypatch.setattr(trainer.DebiasTrainer, "evaluate", evaluate_then_ctrl_c)
    monkeypatch.setattr(trainer, "debias_loss", loss_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        tune(_options(tiny_data, out))
    state = torch.load(out / "checkpoint" / "trainer_state.pt", weights_only=True)
    assert (state["step"], state["evaluation_due"], [p["step"] for p in state["dev_curve"]]) == (2, True, [0])
    monkeypatch.setattr(trainer.DebiasTrainer, "evaluate", real_evaluate)
    monkeypatch.setattr(trainer, "debias_loss", real_loss)
    manifest = tune(_options(tiny_data, out))
    reference = json.loads((trained / "manifest.json").read_text(encoding="utf-8"))
    assert adapter_bytes(out) == adapter_bytes(trained)
    assert [p["step"] for p in manifest["dev_curve"]] == [0, 2, 4]  # step 2's evaluation was done on resume
    for mine, theirs in zip(manifest["dev_curve"], reference["dev_curve"], strict=True):
        assert (mine["loss"], mine["gld"]) == (theirs["loss"], theirs["gld"])
    assert [r["loss"] for r in manifest["train_curve"]] == [r["loss"] for r in reference["train_curve"]]


def test_a_damaged_checkpoint_is_a_one_line_error(tiny_data: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "c"
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "trainer_state.pt").write_bytes(b"not a checkpoint")
    done = _cli(
        "tune",
        "--train",
        str(tiny_data[0]),
        "--dev",
        str(tiny_data[1]),
        "--steps",
        "4",
        "--rank",
        "8",
        "--batch-size",
        "4",
        "--device",
        "cpu",
        "--out",
        str(out),
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(f"error: checkpoint {out / 'checkpoint'} is damaged")
    assert done.stderr.strip().splitlines()[-1].endswith(f": delete {out / 'checkpoint'} to start the tuning over")


@pytest.mark.slow
def test_adapter_for_another_model_is_refused(trained: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    shutil.copytree(trained, other)
    manifest = json.loads((other / "manifest.json").read_text(encoding="utf-8"))
    manifest["base_model"] = {"id": "gemma-3-270m", "gguf_sha256": "ab" * 32}
    (other / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    with pytest.raises(
        ModelError,
        match=r"adapter .*other was trained for gemma-3-270m \(gguf sha256 abababababab\), not smollm2-135m-instruct",
    ):
        load_model("smollm2-135m-instruct", device="cpu", dtype="float32", adapter=str(other))
    with pytest.raises(ModelError, match="not a LoRA adapter folder"):
        load_model("smollm2-135m-instruct", device="cpu", dtype="float32", adapter=str(tmp_path))


@pytest.mark.slow
def test_sweep_table_on_a_small_set(embedded_backend, shared_data: Path, tmp_path: Path) -> None:
    from fairprobe.mitigation.sweep import DISTRIBUTION_NOTE, sweep

    options = RunOptions(probes=["stsb"], data_dir=shared_data, limit=3, generation=GenerationConfig(max_new_tokens=8))
    result = sweep(options, tmp_path, grid={"temperature": [0.5], "top_k": [10]}, seeds=2, backend=embedded_backend)
    res = result["sets"]["stsb"]
    assert list(res["settings"]) == ["temperature=0.5", "top_k=10"]
    for label, row in res["settings"].items():
        per_seed = []
        for seed in range(2):
            samples = read_samples(tmp_path / "settings" / label / f"seed{seed}" / "samples.jsonl")
            assert len(samples) == 3 and all(getattr(s, "p_female", None) is None for s in samples)
            per_seed.append(sum(s.first_gender is not None for s in samples) / 3)
        assert row["gas_per_seed"] == per_seed
        assert row["gas"]["value"] == pytest.approx(np.mean(per_seed))
    best = min(res["settings"], key=lambda k: (res["settings"][k]["gas"]["value"], k))
    assert res["best"]["setting"] == best
    assert res["greedy"]["gld"]["value"] is not None
    md = (tmp_path / "sweep.md").read_text(encoding="utf-8")
    assert DISTRIBUTION_NOTE.format(names="GLD and ADD") in md
    assert "| setting | GAS [95% CI] | GAS per seed | drift (seed 0; vs greedy) |" in md
    # Drift of each setting (its seed-0 run) against greedy on the same prompts.
    for row in res["settings"].values():
        assert set(row["drift"]) == {"fluency_nll", "on_subject", "distinct_2", "garbage"}
        assert row["drift_vs_greedy"]["on_subject"]["test"] == "exact McNemar"
    assert res["greedy_drift"]["fluency_nll"]["value"] > 0
    assert f"| {best} **(lowest)** |" in md
    assert isinstance(res["best"]["beats_greedy"], bool) and res["best"]["verdict"] in md
    assert "| greedy (reference) |" in md


@pytest.mark.slow
def test_compare_table_and_paired_tests(embedded_backend, trained: Path, shared_data: Path, tmp_path: Path) -> None:
    from fairprobe.mitigation.compare import COLUMNS, UNCHANGED_BY_DESIGN, compare

    options = RunOptions(
        probes=["stsb"], data_dir=shared_data / "debias_llms", limit=4, generation=GenerationConfig(max_new_tokens=8)
    )
    labels = LabelProgress()
    result = compare(
        options,
        tmp_path,
        adapter=str(trained),
        hyper="temperature=0.5",
        backend=embedded_backend,
        progress=labels,
    )
    assert labels.labels == [f"{m} · stsb" for m in ("Original", "Hyperparameter", "Instruction", "Debias Tuning")]
    rows = result["sets"]["stsb"]["methods"]
    assert list(rows) == ["Original", "Hyperparameter", "Instruction", "Debias Tuning"]
    original = read_samples(tmp_path / "runs" / "original" / "samples.jsonl")
    tuned = read_samples(tmp_path / "runs" / "debias-tuning" / "samples.jsonl")
    a = np.array([s.first_gender is not None for s in original])
    b = np.array([s.first_gender is not None for s in tuned])
    vs = rows["Debias Tuning"]["vs_original"]
    assert vs["gas"]["original_only"] == int((a & ~b).sum())
    assert vs["gas"]["method_only"] == int((~a & b).sum())
    assert vs["gas"]["p_mcnemar"] == exact_mcnemar(int((a & ~b).sum()), int((~a & b).sum()))
    po = np.array([[s.p_female, s.p_male] for s in original]).transpose(0, 2, 1)
    pt = np.array([[s.p_female, s.p_male] for s in tuned]).transpose(0, 2, 1)
    diff = gld_per_prompt(pt[..., 0], pt[..., 1]) - gld_per_prompt(po[..., 0], po[..., 1])
    assert vs["gld"]["difference"]["value"] == pytest.approx(diff.mean())
    lo, hi = vs["gld"]["difference"]["ci95"]
    assert lo <= diff.mean() <= hi
    # The adapter really changes the next-word distribution; sampling does not.
    assert not np.allclose(po, pt)
    # Sampling cannot change the next-word distribution: GLD and ADD are not tested but unchanged by design.
    for name in ("gld", "add"):
        test = rows["Hyperparameter"]["vs_original"][name]
        assert (test["unchanged_by_design"], test["reading"]) == (UNCHANGED_BY_DESIGN, "unchanged by design")
        assert "p" not in test and "p_holm" not in test
    assert rows["Original"]["perplexity"] > 1 and "perplexity" in rows["Debias Tuning"]
    assert "perplexity" not in rows["Instruction"]
    manifest = json.loads((tmp_path / "runs" / "instruction" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["family_options"]["paper"]["instruction"] == INSTRUCTION
    md = (tmp_path / "compare.md").read_text(encoding="utf-8")
    assert "| " + " | ".join(COLUMNS) + " |" in md
    assert sum(line.startswith("| stsb |") for line in md.splitlines()) == 4
    saved = json.loads((tmp_path / "compare.json").read_text(encoding="utf-8"))
    assert saved["sets"]["stsb"]["methods"]["Debias Tuning"]["vs_original"] == vs
    html = (tmp_path / "report.html").read_text(encoding="utf-8")  # compare writes its own report
    assert "Mitigation comparison" in html and "Debias Tuning" in html
    assert "on-subject" in html
    # Drift: fluency of each method's continuations under the frozen base model, tested against Original.
    from fairprobe.mitigation.drift import fluency_nll, on_subject

    nll = fluency_nll(embedded_backend, [s.prompt for s in tuned], [s.continuation for s in tuned])
    drift = rows["Debias Tuning"]["drift"]
    assert drift["fluency_nll"]["value"] == pytest.approx(np.nanmean(nll))
    assert drift["on_subject"]["value"] == np.mean([on_subject(s.prompt, s.continuation) for s in tuned])
    tests = rows["Debias Tuning"]["drift_vs_original"]
    assert tests["on_subject"]["test"] == "exact McNemar" and tests["fluency_nll"]["test"] == "paired bootstrap"
    # Holm over the whole table (every method, set and measure): never below the raw p-value.
    for method in ("Hyperparameter", "Instruction", "Debias Tuning"):
        gas = rows[method]["vs_original"]["gas"]
        assert gas["p_mcnemar"] <= gas["p_holm"] <= 1
        assert (
            rows[method]["drift_vs_original"]["garbage"]["p_holm"] >= rows[method]["drift_vs_original"]["garbage"]["p"]
        )


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = "import sys\nfrom fairprobe.cli import main\nsys.argv = ['fairprobe', *sys.argv[1:]]\nmain()\n"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_tuning_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    done = _cli("tune", "--ablations", "--losses", "g,l", "--out", str(tmp_path / "a"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --ablations trains its own loss variants (the paper's Table 3 and the KL term): drop --losses"
    )
    done = _cli("tune", "--model", "openai:some-model", "--losses", "d,g,l,kl=0.5", "--out", str(tmp_path / "b"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: the KL term needs the base model's own weights to compare against, and openai:some-model is an "
        "API model: tune a local model, or drop kl from --losses"
    )
    # The folder of a run that was interrupted: a checkpoint, no manifest.
    unfinished = tmp_path / "unfinished"
    (unfinished / "checkpoint").mkdir(parents=True)
    (unfinished / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    done = _cli("compare", "--adapter", str(unfinished), "--probes", "template", "--out", str(tmp_path / "c"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: adapter folder {unfinished} is from an unfinished tuning run (a checkpoint, no manifest.json): "
        "rerun the same `fairprobe tune` command to finish it"
    )
    assert not (tmp_path / "c").exists()  # nothing ran
    folder = tmp_path / "abl"
    folder.mkdir()
    (folder / "ablations.json").write_text(
        json.dumps(
            {"kind": "debias-tuning-ablations", "variants": {"full": {"name": "Debias Tuning", "losses": "d,g,l"}}}
        ),
        encoding="utf-8",
    )
    done = _cli("compare", "--ablations", str(folder), "--probes", "template", "--out", str(tmp_path / "d"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: ablation variant 'Debias Tuning' in {folder / 'full'} is not finished: "
        "rerun the same `fairprobe tune --ablations` command to finish it"
    )


@pytest.mark.slow
def test_ablations_train_every_variant_and_resume(
    trained: Path, tiny_data: tuple[Path, Path], tmp_path: Path, monkeypatch
) -> None:
    from fairprobe.errors import ConfigError as Refused
    from fairprobe.mitigation import trainer, tuning

    options = _options(tiny_data, tmp_path / "abl", steps=1, eval_every=1, checkpoint_every=1, dev_drift=2)
    real_step, real_drift = trainer.DebiasTrainer.step, trainer.DebiasTrainer.dev_drift
    calls, drifts = {"n": 0}, {"n": 0}

    def counted_drift(self, predicates, advance=None):
        drifts["n"] += 1
        return real_drift(self, predicates, advance)

    def interrupt_second_variant(self, predicates):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_step(self, predicates)

    monkeypatch.setattr(trainer.DebiasTrainer, "step", interrupt_second_variant)
    monkeypatch.setattr(trainer.DebiasTrainer, "dev_drift", counted_drift)
    with pytest.raises(KeyboardInterrupt):
        tuning.tune_ablations(options)
    with pytest.raises(Refused, match=r"ablation variant 'w/o L_d' in .*no-d is not finished"):
        tuning.read_ablations(options.out)
    monkeypatch.setattr(trainer.DebiasTrainer, "step", real_step)
    notes = NoteProgress()
    manifests = tuning.tune_ablations(options, progress=notes)
    assert f"adapter already trained in {options.out / 'full'}" in notes.lines
    assert list(manifests) == ["Debias Tuning", "w/o L_d", "w/o L_g", "w/o L_l", "Debias Tuning + KL"]
    assert [m["losses"] for m in manifests.values()] == [
        {"d": 1.0, "g": 1.0, "l": 1.0},
        {"d": 0.0, "g": 1.0, "l": 1.0},
        {"d": 1.0, "g": 0.0, "l": 1.0},
        {"d": 1.0, "g": 1.0, "l": 0.0},
        {"d": 1.0, "g": 1.0, "l": 1.0, "kl": tuning.ABLATION_KL_WEIGHT},
    ]
    kl_curve = manifests["Debias Tuning + KL"]["dev_curve"]
    assert kl_curve[0]["l_kl"] == pytest.approx(0.0, abs=1e-9)  # before any step the adapter is a no-op
    assert kl_curve[-1]["l_kl"] > 0 and "drift_vs_start" in kl_curve[-1]
    assert manifests["Debias Tuning + KL"]["hyperparameters"]["kl_positions"] == 8
    # The base model's perplexity and drift are measured once per run of the command and shared by the variants
    # after it: the first run drifts at v1's start and step, the second at v2's step, v3's start and step, v4's
    # and v5's steps (10 if each variant measured its own start). The shared numbers are those measured alone.
    assert drifts["n"] == 2 + 5
    reference = json.loads((trained / "manifest.json").read_text(encoding="utf-8"))
    for manifest in manifests.values():
        assert manifest["perplexity"]["before"] == reference["perplexity"]["before"]
        assert manifest["dev_curve"][0]["drift"] == reference["dev_curve"][0]["drift"]
    adapters = tuning.read_ablations(options.out)
    assert adapters == {name: str(options.out / slug) for slug, (name, _) in tuning.ABLATION_VARIANTS.items()}


def test_compare_and_sweep_run_on_an_api_model_through_model_args(tmp_path: Path) -> None:
    """An API model (reached through -M base_url=...) gets every drift number but fluency, and no perplexity."""
    from fairprobe.mitigation.compare import compare
    from fairprobe.mitigation.sweep import sweep
    from openai_servers import scripted

    with scripted() as (url, _):
        options = RunOptions(model="openai:toy", model_args={"base_url": url}, probes=["template"], limit=4)
        result = compare(options, tmp_path / "cmp", hyper="temperature=0.5", instruction="")
        swept = sweep(options, tmp_path / "sweep", grid={"temperature": [0.5]}, seeds=1)
    rows = result["sets"]["template"]["methods"]
    assert list(rows) == ["Original", "Hyperparameter"]
    for row in rows.values():
        assert set(row["drift"]) == {"on_subject", "distinct_2", "garbage"}  # no weights: no fluency NLL
        assert "perplexity" not in row or row["perplexity"] is None
    # The scripted server answers " she is kind." / " he went home.": on subject (a pronoun), no garbage.
    assert rows["Original"]["drift"]["on_subject"]["value"] == 1.0
    assert rows["Hyperparameter"]["drift_vs_original"]["on_subject"]["p"] == 1.0
    assert set(swept["sets"]["template"]["settings"]["temperature=0.5"]["drift"]) == {
        "on_subject",
        "distinct_2",
        "garbage",
    }
    # A KL weight needs the base model's weights: an API model cannot give them.
    with pytest.raises(ConfigError, match="the KL term needs the base model's own weights"):
        tune(TuneOptions(model="openai:toy", losses="d,g,l,kl=0.5", out=tmp_path / "t"))


@pytest.mark.slow
def test_the_adapter_readme_says_what_was_trained_on_what_with_which_losses_and_the_effect(trained: Path) -> None:
    manifest = json.loads((trained / "manifest.json").read_text(encoding="utf-8"))
    readme = (trained / "README.md").read_text(encoding="utf-8")
    first, last = manifest["dev_curve"][0], manifest["dev_curve"][-1]
    assert readme.startswith("---\nlibrary_name: peft\nbase_model: HuggingFaceTB/SmolLM2-135M-Instruct\n")
    assert f"gguf_sha256 `{manifest['base_model']['gguf_sha256']}`" in readme
    assert "/site-packages/" not in readme and str(trained) not in readme  # never a local path
    hyper = manifest["hyperparameters"]
    assert f"{hyper['steps']} steps of batch {hyper['batch_size']}, AdamW" in readme
    for split, entry in manifest["data"].items():
        assert f"- {split}: {entry['n']} predicates" in readme
    for loss in ("L_d (ADD", "L_g (total gendered", "L_l (GLD"):
        assert f"- {loss}" in readme
    assert f"| dev GLD | {first['gld']:.3f} | {last['gld']:.3f} |" in readme
    ppl = manifest["perplexity"]
    assert f"| perplexity of neutral sentences | {ppl['before']:.2f} | {ppl['after']:.2f} |" in readme
