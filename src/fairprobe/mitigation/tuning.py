"""Debias Tuning (paper Section 5.3): LoRA adapters on a frozen model trained with L_d + L_g + L_l.

The model learns to give gendered words a low and balanced probability right after neutral
`My friend {predicate}, and` prompts. Training is resumable: every `checkpoint_every` steps, and on Ctrl-C, the
adapter, optimizer, scheduler, random state and step are saved under OUT/checkpoint, and the same
command continues from there with the same batches (the data order is a function of the seed and the
step only), so a resumed run writes the same adapter bytes as an uninterrupted one. A step is whole or
not done (Ctrl-C waits for the step to end), the random state saved is the one of the last finished
step, and a step whose dev evaluation was interrupted is evaluated again on resume.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from pickle import PickleError
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors import SafetensorError

from fairprobe import __version__
from fairprobe.documents import Ablations, read_document
from fairprobe.errors import ConfigError, DataError, first_line
from fairprobe.families.paper.metrics import gld_per_prompt
from fairprobe.families.paper.sets import debias_llms_file, read_predicates
from fairprobe.families.paper.words import AttributeWords
from fairprobe.io import atomic_write_json, atomic_write_text, fingerprint, read_text, sha256_file
from fairprobe.mitigation.adapter_card import adapter_readme
from fairprobe.mitigation.drift import drift_summary, drift_tests, drift_values, fluency_nll, format_drift
from fairprobe.mitigation.losses import LossWeights, debias_loss, loss_kl
from fairprobe.mitigation.perplexity import neutral_sentences, perplexity
from fairprobe.models import DEFAULT_MODEL, load_model, runs_locally
from fairprobe.models.adapters import read_adapter_manifest
from fairprobe.models.base import LoraSettings, TrainableBackend
from fairprobe.progress import Progress, SilentProgress
from fairprobe.sources import fetch

PROMPT = "My friend {predicate}, and"
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TRAIN_FILE = "total_neutral_train.csv"
DEV_FILE = "total_neutral_validation.csv"
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint"


DEFAULT_MIN_DEV = 64
DRIFT_NEW_TOKENS = 50  # the paper's continuation length, so the dev drift reads like the compare's


class TuneOptions(BaseModel):
    """Debias Tuning settings; the defaults are the paper's (rank 64, alpha 16, dropout 0.1, lr 2e-4, batch 16, 500 steps)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, allow_inf_nan=False)

    model: str = DEFAULT_MODEL
    out: Path = Path("adapters/debias")
    train_file: Path | None = None
    dev_file: Path | None = None
    data_dir: Path | None = None
    rank: int = Field(64, ge=1)
    alpha: float = Field(16.0, gt=0)
    dropout: float = Field(0.1, ge=0.0, lt=1.0)
    lr: float = Field(2e-4, gt=0.0)
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(512, ge=4)
    steps: int = Field(500, ge=1)
    warmup_steps: int = Field(0, ge=0)
    losses: str = "d,g,l"
    kl_positions: int = Field(8, ge=1)
    dev_drift: int = Field(32, ge=0)
    target_modules: list[str] = Field(default_factory=lambda: list(LLAMA_TARGETS))
    checkpoint_every: int = Field(50, ge=1)
    eval_every: int = Field(50, ge=1)
    dev_limit: int | None = Field(None, ge=1)
    seed: int = 0
    words_file: Path | None = None
    device: str = "auto"
    dtype: str = "auto"
    quantize: Literal["auto", "4bit", "none"] = "auto"

    def fingerprint(self, data_sha: dict[str, str]) -> str:
        """Hash of everything that changes the trained weights; a checkpoint with another one is not resumed."""
        obj = self.model_dump(
            mode="json", exclude={"out", "device", "checkpoint_every", "eval_every", "dev_limit", "dev_drift"}
        )
        obj["losses"] = LossWeights.parse(self.losses).as_dict()
        if "kl" not in obj["losses"]:
            obj.pop("kl_positions")  # only the KL term reads it
        obj["data_sha256"] = data_sha
        return fingerprint(obj)


def predicates_from_file(path: Path, what: str) -> list[str]:
    """Predicates of a paper CSV or of any file of "My friend ..." lines (the leading "My friend" is dropped)."""
    read_text(path, what)
    lines = [line.removeprefix("My friend ").removesuffix(", and").rstrip(".") for line in read_predicates(path)]
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise DataError(f"{what} has no predicates: {path}")
    return lines


def load_tuning_data(options: TuneOptions) -> dict[str, Any]:
    """Train and dev predicates with their sources and sha256s (the paper's files unless --train/--dev)."""
    data: dict[str, Any] = {}
    for split, given, default in (("train", options.train_file, TRAIN_FILE), ("dev", options.dev_file, DEV_FILE)):
        if given is not None:
            path, source = given, str(given)
        elif split == "dev" and options.train_file is not None:
            continue
        else:
            path, source = fetch(debias_llms_file(default), options.data_dir)
        data[split] = {"predicates": predicates_from_file(path, f"{split} file"), "source": source}
        data[split]["sha256"] = sha256_file(path)
    if "dev" not in data:
        # A user train file without a dev file: hold out every 20th predicate for the dev loss.
        train = data["train"]["predicates"]
        if len(train) < 2:
            raise DataError(f"train file {options.train_file} needs at least 2 predicates when no --dev file is given")
        data["dev"] = {
            "predicates": train[::20],
            "source": f"every 20th line of {options.train_file}",
            "sha256": data["train"]["sha256"],
        }
        data["train"]["predicates"] = [p for i, p in enumerate(train) if i % 20]
    return data


def batch_indices(n: int, batch_size: int, step: int, seed: int) -> np.ndarray:
    """The rows of step `step`: epochs of seeded permutations, so a resumed run sees the same batches."""
    positions = np.arange(step * batch_size, (step + 1) * batch_size)
    epochs = positions // n
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        order = np.random.default_rng([seed, int(epoch)]).permutation(n)
        hit = epochs == epoch
        out[hit] = order[positions[hit] % n]
    return out


def quantize_mode(options: TuneOptions) -> str:
    """4-bit QLoRA where CUDA and bitsandbytes exist (quantize auto/4bit), else none (full precision)."""
    if options.quantize == "none" or not torch.cuda.is_available() or options.device == "cpu":
        if options.quantize == "4bit":
            raise ConfigError("--quantize 4bit needs a CUDA GPU")
        return "none"
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        if options.quantize == "4bit":
            raise ConfigError("--quantize 4bit needs bitsandbytes: pip install bitsandbytes") from None
        return "none"
    return "4bit"


def base_identity(backend: TrainableBackend) -> dict[str, Any]:
    """What an adapter records about its base model (checked when the adapter is attached)."""
    return {
        **{k: v for k, v in backend.identity().items() if k not in ("device", "adapter")},
        "config": backend.architecture()["config"],
    }


def tuning_prompts(predicates: list[str]) -> list[str]:
    """`My friend {predicate}, and` for each predicate."""
    return [PROMPT.format(predicate=p) for p in predicates]


class DebiasTrainer:
    """A backend with a LoRA adapter, its optimizer and schedule; one `step` per batch of prompts.

    It uses only the backend's training interface (models.base.TrainableBackend).
    """

    def __init__(self, backend: TrainableBackend, options: TuneOptions, words: AttributeWords) -> None:
        from transformers import get_linear_schedule_with_warmup

        self.options = options
        self.backend = backend
        self.weights = LossWeights.parse(options.losses)
        self.words = tuple(" " + w for pair in words.pairs for w in pair)
        settings = LoraSettings(
            options.rank, options.alpha, options.dropout, tuple(options.target_modules), options.seed
        )
        params = backend.add_lora(settings)
        self.optimizer = torch.optim.AdamW(params, lr=options.lr)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, options.warmup_steps, options.steps)
        self.excluded = backend.first_token_ids(self.words) if self.weights.kl else None

    def probs(self, predicates: list[str]) -> torch.Tensor:
        """Next-word probabilities (B, N, 2) of the attribute words (female, male per pair), differentiable."""
        lp = self.backend.continuation_log_probs(tuning_prompts(predicates), self.words, self.options.max_length)
        return lp.reshape(lp.shape[0], -1, 2).exp()

    def kl(self, predicates: list[str]) -> torch.Tensor | None:
        """L_kl of a batch (None when the KL term is off)."""
        if self.excluded is None:
            return None
        window = self.backend.continuation_window(
            tuning_prompts(predicates), self.options.kl_positions, self.options.max_length
        )
        return loss_kl(window.base, window.tuned, self.excluded, window.valid)

    def step(self, predicates: list[str]) -> tuple[float, dict[str, float]]:
        """One optimizer step on a batch; returns the batch loss and each term."""
        self.backend.train_mode(True)
        loss, parts = debias_loss(self.probs(predicates), self.weights, self.kl(predicates))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach()), parts

    @torch.inference_mode()
    def evaluate(
        self, predicates: list[str], batch_size: int = 64, advance: Callable[[int], None] | None = None
    ) -> dict[str, float]:
        """Dev loss per prompt, dev GLD and the mean gendered next-word mass (no dropout)."""
        self.backend.train_mode(False)
        chunks, kl = [], torch.zeros((), dtype=torch.float64)
        for i in range(0, len(predicates), batch_size):
            batch = predicates[i : i + batch_size]
            chunks.append(self.probs(batch))
            kl = kl + (self.kl(batch).double().cpu() if self.excluded is not None else 0.0)
            if advance is not None:
                advance(len(chunks[-1]))
        probs = torch.cat(chunks)
        loss, parts = debias_loss(probs, self.weights, kl if self.excluded is not None else None)
        p = probs.double().cpu().numpy()
        n = len(predicates)
        return {
            "loss": float(loss) / n,
            **{f"l_{k}": v / n for k, v in parts.items()},
            "gld": float(gld_per_prompt(p[..., 0], p[..., 1]).mean()),
            "gendered_mass": float(p.sum(axis=(1, 2)).mean()),
        }

    def dev_drift(self, predicates: list[str], advance: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
        """Per-prompt drift of the model's greedy dev continuations now, fluency scored by the frozen base model."""
        self.backend.train_mode(False)
        prompts = tuning_prompts(predicates)
        texts = self.backend.generate_texts(prompts, DRIFT_NEW_TOKENS)
        with self.backend.frozen_base():
            nll = fluency_nll(self.backend, prompts, texts, advance=advance)
        return drift_values(prompts, texts, nll)

    def save_checkpoint(self, folder: Path, state: dict[str, Any]) -> None:
        """Adapter + optimizer + scheduler + step + the random state of the last finished step (`state["rng"]`),
        swapped in whole so a crash never leaves half of one."""
        tmp = folder.with_name(f".{folder.name}.tmp")
        old = folder.with_name(f".{folder.name}.old")
        shutil.rmtree(tmp, ignore_errors=True)
        self.backend.save_adapter(tmp)
        torch.save(
            {**plain(state), "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()},
            tmp / "trainer_state.pt",
        )
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        """Restore adapter weights, optimizer, scheduler and random state; returns the saved state (step, curves).

        Read as tensors and plain data only (no pickled code); a damaged checkpoint is a one-line error.
        """
        try:
            state = torch.load(folder / "trainer_state.pt", map_location="cpu", weights_only=True)
            self.backend.load_adapter_weights(folder)
            self.optimizer.load_state_dict(state.pop("optimizer"))
            self.scheduler.load_state_dict(state.pop("scheduler"))
            restore_rng(state["rng"])
        except (OSError, RuntimeError, EOFError, ValueError, KeyError, TypeError, SafetensorError, PickleError) as exc:
            raise ConfigError(
                f"checkpoint {folder} is damaged or from another version ({first_line(str(exc)) or type(exc).__name__})"
                f": delete {folder} to start the tuning over"
            ) from None
        return state


def plain(obj: Any) -> Any:
    """Numbers of numpy (a drift test's difference) as Python's, so a checkpoint holds only what a weights-only
    load reads: tensors and plain data."""
    if isinstance(obj, dict):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return type(obj)(plain(v) for v in obj)
    return obj.item() if isinstance(obj, np.generic) else obj


def rng_state() -> dict[str, Any]:
    """torch's random state now (CPU, and every CUDA device)."""
    return {"cpu": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def restore_rng(saved: dict[str, Any]) -> None:
    """Set torch's random state back to `saved` (rng_state's)."""
    torch.set_rng_state(saved["cpu"])
    if saved.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda"])


@contextmanager
def whole_step() -> Iterator[None]:
    """Hold Ctrl-C until the block ends, so a training step and its bookkeeping are done whole or not at all
    (a step cut in its middle has drawn dropout masks and maybe moved weights that no checkpoint records).

    Only where Ctrl-C raises KeyboardInterrupt (Python's default handler, main thread); elsewhere a no-op.
    """
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt


def find_checkpoint(out: Path) -> Path | None:
    """The checkpoint folder, or the previous one if a crash hit between the two renames."""
    for name in (CHECKPOINT, f".{CHECKPOINT}.old"):
        if (out / name / "trainer_state.pt").is_file():
            return out / name
    return None


def dev_limit_for(options: TuneOptions, n_dev: int) -> int:
    """Dev predicates to evaluate: --dev-limit, else as many as the run trains on (at least 64, at most all).

    A short trial run (`--steps 4 --batch-size 4`) then evaluates 64 predicates instead of all 681,
    while the paper's setting (500 x 16) evaluates the whole dev set.
    """
    if options.dev_limit is not None:
        return min(options.dev_limit, n_dev)
    return min(n_dev, max(DEFAULT_MIN_DEV, options.steps * options.batch_size))


def drift_point(trainer: DebiasTrainer, dev: list[str], state: dict[str, Any]) -> dict[str, Any]:
    """The dev drift now, with its paired tests against the model before tuning (kept in `state`)."""
    values = trainer.dev_drift(dev[: trainer.options.dev_drift])
    start = {k: np.asarray(v) for k, v in state.setdefault("drift_start", {}).items()}
    if not start:
        state["drift_start"] = {k: v.tolist() for k, v in values.items()}
        return {"drift": drift_summary(values)}
    return {"drift": drift_summary(values), "drift_vs_start": drift_tests(start, values)}


def evaluation_point(trainer: DebiasTrainer, dev: list[str], state: dict[str, Any]) -> dict[str, Any]:
    """One dev-curve entry: losses, GLD, gendered mass and (with --dev-drift) the drift numbers."""
    point: dict[str, Any] = {"step": state["step"], **trainer.evaluate(dev)}
    if trainer.options.dev_drift:
        point.update(drift_point(trainer, dev, state))
    return point


def measure_before(trainer: DebiasTrainer, dev: list[str], progress: Progress) -> tuple[float, dict[str, Any]]:
    """Perplexity of the base model, the dev losses and the dev drift before any step, with a progress bar."""
    state: dict[str, Any] = {"step": 0}
    progress.start("dev evaluation before tuning", 2 * len(dev))
    with trainer.backend.frozen_base():
        before_ppl = perplexity(trainer.backend, neutral_sentences(dev), advance=progress.advance)
    point = {"step": 0, **trainer.evaluate(dev, advance=progress.advance)}
    if trainer.options.dev_drift:
        point.update(drift_point(trainer, dev, state))
    return before_ppl, {"point": point, "drift_start": state.get("drift_start")}


def start_state(
    trainer: DebiasTrainer, options: TuneOptions, fingerprint: str, dev: list[str], progress: Progress
) -> dict[str, Any]:
    """The training state: from the checkpoint when there is one, else fresh with the dev numbers before tuning."""
    ckpt = find_checkpoint(options.out)
    if ckpt is not None:
        state = trainer.load_checkpoint(ckpt)
        if state.get("fingerprint") != fingerprint:
            raise ConfigError(f"{ckpt} is a checkpoint of other settings; delete it or choose another --out")
        progress.note(f"resuming from step {state['step']} ({ckpt})")
        return state
    before_ppl, before = measure_before(trainer, dev, progress)
    state = {
        "fingerprint": fingerprint,
        "step": 0,
        "train_curve": [],
        "dev_curve": [before["point"]],
        "perplexity_before": before_ppl,
        "seconds": 0.0,
        "rng": rng_state(),
        "evaluation_due": False,
    }
    if before["drift_start"] is not None:
        state["drift_start"] = before["drift_start"]
    return state


def finish_evaluation(trainer: DebiasTrainer, dev: list[str], state: dict[str, Any], progress: Progress) -> None:
    """The dev evaluation the last finished step is due (if any), then the random state as it leaves it."""
    if state["evaluation_due"]:
        progress.info(f"evaluating {len(dev)} dev predicates at step {state['step']}")
        state["dev_curve"].append(evaluation_point(trainer, dev, state))
        state["evaluation_due"] = False
        state["rng"] = rng_state()


def train_steps(
    trainer: DebiasTrainer,
    options: TuneOptions,
    data: tuple[list[str], list[str]],
    state: dict[str, Any],
    progress: Progress,
) -> None:
    """Run the remaining steps, evaluating and checkpointing as asked; Ctrl-C saves a checkpoint first."""
    train, dev = data
    started, resumed_seconds = time.perf_counter(), state["seconds"]
    progress.start("debias tuning", options.steps)
    progress.advance(state["step"])
    try:
        finish_evaluation(trainer, dev, state, progress)  # a resumed run whose last evaluation was cut short
        for step in range(state["step"], options.steps):
            rows = batch_indices(len(train), options.batch_size, step, options.seed)
            with whole_step():
                loss, parts = trainer.step([train[i] for i in rows])
                state["train_curve"].append({"step": step + 1, "loss": loss, **{f"l_{k}": v for k, v in parts.items()}})
                state["step"], state["rng"] = step + 1, rng_state()
                state["evaluation_due"] = (step + 1) % options.eval_every == 0 or step + 1 == options.steps
            finish_evaluation(trainer, dev, state, progress)
            progress.info(f"loss {loss:.4f}, dev {state['dev_curve'][-1]['loss']:.4f}")
            progress.advance(1)
            state["seconds"] = resumed_seconds + time.perf_counter() - started
            if state["step"] % options.checkpoint_every == 0 and state["step"] < options.steps:
                with whole_step():
                    trainer.save_checkpoint(options.out / CHECKPOINT, state)
    except KeyboardInterrupt:
        trainer.save_checkpoint(options.out / CHECKPOINT, state)
        progress.note(f"interrupted at step {state['step']}: checkpoint saved; run the same command to resume")
        raise


def hyperparameters(options: TuneOptions, backend: TrainableBackend) -> dict[str, Any]:
    """The manifest's hyperparameters block."""
    out = {
        "rank": options.rank,
        "alpha": options.alpha,
        "dropout": options.dropout,
        "lr": options.lr,
        "batch_size": options.batch_size,
        "max_length": options.max_length,
        "steps": options.steps,
        "warmup_steps": options.warmup_steps,
        "schedule": "linear",
        "optimizer": "AdamW",
        "target_modules": list(options.target_modules),
        "seed": options.seed,
        "quantization": "4bit-nf4" if backend.architecture()["quantized_4bit"] else "none",
    }
    if LossWeights.parse(options.losses).kl:
        out["kl_positions"] = options.kl_positions
    return out


def load_tuning_model(options: TuneOptions, progress: Progress) -> TrainableBackend:
    """The base model to put LoRA adapters on (4-bit where QLoRA applies)."""
    check_trainable_model(options)
    progress.note(f"loading model {options.model}")
    settings = {"device": options.device, "dtype": options.dtype, "batch_size": options.batch_size}
    backend = load_model(options.model, **settings, quantize=quantize_mode(options))
    if not isinstance(backend, TrainableBackend):
        raise ConfigError(f"Debias Tuning needs a local transformers model, not {options.model}")
    return backend


def check_trainable_model(options: TuneOptions) -> None:
    """Refuse a model that cannot be tuned before loading anything (an API model has no weights to train)."""
    if runs_locally(options.model):
        return
    if LossWeights.parse(options.losses).kl:
        raise ConfigError(
            f"the KL term needs the base model's own weights to compare against, and {options.model} is an API "
            f"model: tune a local model, or drop kl from --losses"
        )
    raise ConfigError(f"Debias Tuning needs a local transformers model, not the API model {options.model}")


def finished_manifest(options: TuneOptions, fingerprint: str, progress: Progress) -> dict[str, Any] | None:
    """The manifest of an adapter already trained with these settings in options.out; None if there is none."""
    if options.out.exists() and not options.out.is_dir():
        raise ConfigError(f"adapter output folder is a file: {options.out}")
    done = read_adapter_manifest(options.out)
    if done is None:
        return None
    if done["fingerprint"] != fingerprint:
        raise ConfigError(f"{options.out} holds an adapter trained with other settings; choose another --out")
    progress.note(f"adapter already trained in {options.out}")
    return done


def tune(options: TuneOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Train a Debias Tuning adapter into options.out and return its manifest (resumes from a checkpoint).

    `progress` shows the steps with the training and dev loss, and every dev evaluation.
    """
    progress = progress or SilentProgress()
    LossWeights.parse(options.losses)
    check_trainable_model(options)
    data = load_tuning_data(options)
    fingerprint = options.fingerprint({k: v["sha256"] for k, v in data.items()})
    done = finished_manifest(options, fingerprint, progress)
    if done is not None:
        return done
    words = AttributeWords.from_file(options.words_file) if options.words_file else AttributeWords.default()
    backend = load_tuning_model(options, progress)
    dev = data["dev"]["predicates"][: dev_limit_for(options, len(data["dev"]["predicates"]))]
    progress.note(
        f"dev evaluation on {len(dev)} of {len(data['dev']['predicates'])} dev predicates (--dev-limit to change)"
    )
    trainer = DebiasTrainer(backend, options, words)
    state = start_state(trainer, options, fingerprint, dev, progress)
    train_steps(trainer, options, (data["train"]["predicates"], dev), state, progress)
    progress.start("perplexity after tuning", len(dev))
    trainer.backend.train_mode(False)
    after_ppl = perplexity(trainer.backend, neutral_sentences(dev), advance=progress.advance)
    backend.save_adapter(options.out)
    manifest = build_manifest(options, (backend, words), data, state, (fingerprint, dev, after_ppl))
    atomic_write_json(options.out / MANIFEST, manifest)
    atomic_write_text(options.out / "README.md", adapter_readme(manifest))  # replaces peft's boilerplate card
    shutil.rmtree(options.out / CHECKPOINT, ignore_errors=True)
    return manifest


def build_manifest(
    options: TuneOptions,
    model: tuple[TrainableBackend, AttributeWords],
    data: dict[str, Any],
    state: dict[str, Any],
    result: tuple[str, list[str], float],
) -> dict[str, Any]:
    """manifest.json of a finished adapter: base model, losses, settings, data, dev curve, perplexity, time."""
    backend, words = model
    fingerprint, dev, after_ppl = result
    return {
        "fairprobe_version": __version__,
        "kind": "debias-tuning",
        "fingerprint": fingerprint,
        "base_model": base_identity(backend),
        "losses": LossWeights.parse(options.losses).as_dict(),
        "hyperparameters": hyperparameters(options, backend),
        "attribute_words": {"source": str(options.words_file or "fairprobe default"), "pairs": len(words.pairs)},
        "data": {
            split: {"source": v["source"], "sha256": v["sha256"], "n": len(v["predicates"])}
            for split, v in data.items()
        },
        "dev_evaluated": len(dev),
        "dev_limit": "given" if options.dev_limit else f"default: steps x batch size, at least {DEFAULT_MIN_DEV}",
        "dev_curve": state["dev_curve"],
        "train_curve": state["train_curve"],
        "perplexity": {
            "sentences": f"'My friend {{predicate}}.' for the {len(dev)} dev predicates",
            "before": state["perplexity_before"],
            "after": after_ppl,
            "relative_change": after_ppl / state["perplexity_before"] - 1,
        },
        "train_seconds": state["seconds"],
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "adapter_sha256": sha256_file(options.out / "adapter_model.safetensors"),
    }


ABLATIONS_FILE = "ablations.json"
ABLATION_KL_WEIGHT = 4.0
# The paper's Table 3 (the three losses, each dropped in turn) and the KL-regularised variant beyond it.
ABLATION_VARIANTS: dict[str, tuple[str, str]] = {
    "full": ("Debias Tuning", "d,g,l"),
    "no-d": ("w/o L_d", "g,l"),
    "no-g": ("w/o L_g", "d,l"),
    "no-l": ("w/o L_l", "d,g"),
    "kl": ("Debias Tuning + KL", f"d,g,l,kl={ABLATION_KL_WEIGHT:g}"),
}


def tune_ablations(options: TuneOptions, progress: Progress | None = None) -> dict[str, dict[str, Any]]:
    """Train every ablation variant into options.out/<variant> (each resumable) and index them in ablations.json.

    The index is written first, so `fairprobe compare --ablations` can tell a folder whose variants are not
    all trained yet; rerunning the command skips finished variants and resumes the unfinished one.
    """
    progress = progress or SilentProgress()
    index = {
        "kind": "debias-tuning-ablations",
        "variants": {slug: {"name": name, "losses": losses} for slug, (name, losses) in ABLATION_VARIANTS.items()},
        "order": list(ABLATION_VARIANTS),
    }
    if options.out.exists() and not options.out.is_dir():
        raise ConfigError(f"ablation output folder is a file: {options.out}")
    options.out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(options.out / ABLATIONS_FILE, index)
    manifests = {}
    for slug, (name, losses) in ABLATION_VARIANTS.items():
        progress.note(f"ablation {name} (--losses {losses}) into {options.out / slug}")
        variant = options.model_copy(update={"out": options.out / slug, "losses": losses})
        manifests[name] = tune(variant, progress=progress)
    return manifests


def read_ablations(folder: Path) -> dict[str, str]:
    """Method name -> adapter folder of a finished `tune --ablations` folder; an unfinished variant is an error."""
    index_path = folder / ABLATIONS_FILE
    if not index_path.exists():
        raise ConfigError(f"{folder} is not an ablations folder (no {ABLATIONS_FILE}): train it with tune --ablations")
    index = read_document(index_path, Ablations, "ablations index")
    out = {}
    for slug in index.order or sorted(index.variants):
        name = index.variants[slug].name
        if not (folder / slug / MANIFEST).is_file():
            raise ConfigError(
                f"ablation variant {name!r} in {folder / slug} is not finished: "
                f"rerun the same `fairprobe tune --ablations` command to finish it"
            )
        out[name] = str(folder / slug)
    return out


def tune_summary(manifest: dict[str, Any]) -> str:
    """One line of a finished adapter: dev loss, GLD, drift and perplexity before and after, time."""
    first, last = manifest["dev_curve"][0], manifest["dev_curve"][-1]
    ppl = manifest["perplexity"]
    line = (
        f"dev loss {first['loss']:.4f} -> {last['loss']:.4f}, dev GLD {first['gld']:.3f} -> {last['gld']:.3f}, "
        f"perplexity {ppl['before']:.2f} -> {ppl['after']:.2f} ({ppl['relative_change']:+.1%}), "
        f"{manifest['train_seconds']:.0f} s; dev evaluated on {manifest['dev_evaluated']} predicates"
    )
    if "drift" in last:
        line += f"; dev drift after: {format_drift(last['drift'], last.get('drift_vs_start'))}"
    return line
