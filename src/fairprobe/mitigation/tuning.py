"""Debias Tuning (paper Section 5.3): LoRA adapters on a frozen model trained with L_d + L_g + L_l.

The model learns to give gendered words a low and balanced probability right after neutral
`My friend {predicate}, and` prompts. Training is resumable: every `checkpoint_every` steps the
adapter, optimizer, scheduler, RNG state and step are saved under OUT/checkpoint, and the same
command continues from there with the same step count and the same batches (the data order is a
function of the seed and the step only).
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field

from fairprobe import __version__
from fairprobe.detectors import AttributeWords
from fairprobe.errors import ConfigError, DataError
from fairprobe.families.paper.metrics import gld_per_prompt
from fairprobe.families.paper.sets import debias_llms_file, read_predicates
from fairprobe.io import atomic_write_json, fingerprint, read_text, sha256_file
from fairprobe.mitigation.losses import LossWeights, debias_loss
from fairprobe.mitigation.perplexity import neutral_sentences, perplexity
from fairprobe.models import DEFAULT_MODEL, load_model
from fairprobe.models.adapters import quiet_peft_warnings
from fairprobe.models.hf import HFBackend, WordTable, word_log_probs
from fairprobe.progress import Progress, SilentProgress
from fairprobe.sources import fetch

PROMPT = "My friend {predicate}, and"
LLAMA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TRAIN_FILE = "total_neutral_train.csv"
DEV_FILE = "total_neutral_validation.csv"
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint"


DEFAULT_MIN_DEV = 64


class TuneOptions(BaseModel):
    """Debias Tuning settings; the defaults are the paper's (rank 64, alpha 16, dropout 0.1, lr 2e-4, batch 16, 500 steps)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

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
        obj = self.model_dump(mode="json", exclude={"out", "device", "checkpoint_every", "eval_every", "dev_limit"})
        obj["losses"] = LossWeights.parse(self.losses).as_dict()
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


def quantization_kwargs(options: TuneOptions) -> dict[str, Any]:
    """4-bit QLoRA settings where CUDA and bitsandbytes exist (quantize auto/4bit), else full precision."""
    if options.quantize == "none" or not torch.cuda.is_available() or options.device == "cpu":
        if options.quantize == "4bit":
            raise ConfigError("--quantize 4bit needs a CUDA GPU")
        return {}
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        if options.quantize == "4bit":
            raise ConfigError("--quantize 4bit needs bitsandbytes: pip install bitsandbytes") from None
        return {}
    from transformers import BitsAndBytesConfig

    config = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )
    # bitsandbytes quantizes while loading onto the GPU, so the weights are placed there directly.
    return {"quantization_config": config, "device_map": {"": torch.cuda.current_device()}}


def base_identity(backend: HFBackend) -> dict[str, Any]:
    """What an adapter records about its base model (checked when the adapter is attached)."""
    config = backend.model.config
    return {
        **{k: v for k, v in backend.identity().items() if k not in ("device", "adapter")},
        "config": {
            k: getattr(config, k, None) for k in ("model_type", "hidden_size", "num_hidden_layers", "vocab_size")
        },
    }


class DebiasTrainer:
    """The model with its LoRA adapter, optimizer and schedule; one `step` per batch of prompts."""

    def __init__(self, backend: HFBackend, options: TuneOptions, words: AttributeWords) -> None:
        from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training
        from transformers import get_linear_schedule_with_warmup

        self.options = options
        self.weights = LossWeights.parse(options.losses)
        self.tokenizer = backend.tokenizer
        self.adapt_threads = backend.adapt_threads  # before each step: threads follow the free CPUs
        self.tokenizer.truncation_side = "left"  # keep the prompt's end: the next word follows it
        self.table: WordTable = backend.word_table([tuple(p) for p in words.pairs])
        model = backend.model
        names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
        missing = [t for t in options.target_modules if t not in names]
        if missing:
            raise ConfigError(
                f"LoRA target modules {', '.join(missing)} are not in model {options.model}; "
                f"set --targets to module names it has (e.g. {', '.join(sorted(n for n in names if 'proj' in n)[:7])})"
            )
        if getattr(model, "is_loaded_in_4bit", False):
            model = prepare_model_for_kbit_training(model)
        torch.manual_seed(options.seed)
        quiet_peft_warnings()
        lora = LoraConfig(
            r=options.rank,
            lora_alpha=options.alpha,
            lora_dropout=options.dropout,
            target_modules=list(options.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(model, lora)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=options.lr)
        self.scheduler = get_linear_schedule_with_warmup(self.optimizer, options.warmup_steps, options.steps)
        self.device = next(self.model.parameters()).device

    def encode(self, predicates: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Left-padded prompts `My friend {predicate}, and`, cut to max_length from the left."""
        enc = self.tokenizer(
            [PROMPT.format(predicate=p) for p in predicates],
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.options.max_length,
        )
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def probs(self, predicates: list[str]) -> torch.Tensor:
        """Next-word probabilities (B, N, 2) of the attribute words, differentiable."""
        ids, mask = self.encode(predicates)
        return word_log_probs(self.model, ids, mask, self.table, pad_id=self.tokenizer.pad_token_id).exp()

    def step(self, predicates: list[str]) -> tuple[float, dict[str, float]]:
        """One optimizer step on a batch; returns the batch loss and each term."""
        self.adapt_threads()
        self.model.train()
        loss, parts = debias_loss(self.probs(predicates), self.weights)
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
        self.model.eval()
        chunks = []
        for i in range(0, len(predicates), batch_size):
            chunks.append(self.probs(predicates[i : i + batch_size]))
            if advance is not None:
                advance(len(chunks[-1]))
        probs = torch.cat(chunks)
        loss, parts = debias_loss(probs, self.weights)
        p = probs.double().cpu().numpy()
        n = len(predicates)
        return {
            "loss": float(loss) / n,
            **{f"l_{k}": v / n for k, v in parts.items()},
            "gld": float(gld_per_prompt(p[..., 0], p[..., 1]).mean()),
            "gendered_mass": float(p.sum(axis=(1, 2)).mean()),
        }

    def save_checkpoint(self, folder: Path, state: dict[str, Any]) -> None:
        """Adapter + optimizer + scheduler + RNG + step, swapped in whole so a crash never leaves half of one."""
        tmp = folder.with_name(f".{folder.name}.tmp")
        old = folder.with_name(f".{folder.name}.old")
        shutil.rmtree(tmp, ignore_errors=True)
        self.model.save_pretrained(tmp)
        torch.save(
            {
                **state,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "rng_cpu": torch.get_rng_state(),
                "rng_cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            },
            tmp / "trainer_state.pt",
        )
        shutil.rmtree(old, ignore_errors=True)
        if folder.exists():
            folder.rename(old)
        tmp.rename(folder)
        shutil.rmtree(old, ignore_errors=True)

    def load_checkpoint(self, folder: Path) -> dict[str, Any]:
        """Restore adapter weights, optimizer, scheduler and RNG; returns the saved state (step, curves)."""
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        state = torch.load(folder / "trainer_state.pt", map_location="cpu", weights_only=False)
        set_peft_model_state_dict(self.model, load_file(str(folder / "adapter_model.safetensors")))
        self.optimizer.load_state_dict(state.pop("optimizer"))
        self.scheduler.load_state_dict(state.pop("scheduler"))
        torch.set_rng_state(state.pop("rng_cpu"))
        rng_cuda = state.pop("rng_cuda")
        if rng_cuda is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng_cuda)
        return state


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


def measure_before(trainer: DebiasTrainer, dev: list[str], progress: Progress) -> tuple[float, dict[str, float]]:
    """Perplexity of the base model and the dev losses before any step, with a progress bar."""
    progress.start("dev evaluation before tuning", 2 * len(dev))
    with trainer.model.disable_adapter():
        before_ppl = perplexity(trainer.model, trainer.tokenizer, neutral_sentences(dev), advance=progress.advance)
    return before_ppl, trainer.evaluate(dev, advance=progress.advance)


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
    before_ppl, dev_before = measure_before(trainer, dev, progress)
    return {
        "fingerprint": fingerprint,
        "step": 0,
        "train_curve": [],
        "dev_curve": [{"step": 0, **dev_before}],
        "perplexity_before": before_ppl,
        "seconds": 0.0,
    }


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
        for step in range(state["step"], options.steps):
            rows = batch_indices(len(train), options.batch_size, step, options.seed)
            loss, parts = trainer.step([train[i] for i in rows])
            state["step"] = step + 1
            state["train_curve"].append({"step": step + 1, "loss": loss, **{f"l_{k}": v for k, v in parts.items()}})
            if state["step"] % options.eval_every == 0 or state["step"] == options.steps:
                progress.info(f"loss {loss:.4f}, evaluating {len(dev)} dev predicates")
                state["dev_curve"].append({"step": state["step"], **trainer.evaluate(dev)})
            progress.info(f"loss {loss:.4f}, dev {state['dev_curve'][-1]['loss']:.4f}")
            progress.advance(1)
            state["seconds"] = resumed_seconds + time.perf_counter() - started
            if state["step"] % options.checkpoint_every == 0 and state["step"] < options.steps:
                trainer.save_checkpoint(options.out / CHECKPOINT, state)
    except KeyboardInterrupt:
        trainer.save_checkpoint(options.out / CHECKPOINT, state)
        progress.note(f"interrupted at step {state['step']}: checkpoint saved; run the same command to resume")
        raise


def hyperparameters(options: TuneOptions, backend: HFBackend) -> dict[str, Any]:
    """The manifest's hyperparameters block."""
    return {
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
        "quantization": "4bit-nf4" if getattr(backend.model, "is_loaded_in_4bit", False) else "none",
    }


def load_tuning_model(options: TuneOptions, progress: Progress) -> HFBackend:
    """The base model to put LoRA adapters on (4-bit where QLoRA applies)."""
    progress.note(f"loading model {options.model}")
    backend = load_model(
        options.model,
        device=options.device,
        dtype=options.dtype,
        batch_size=options.batch_size,
        **quantization_kwargs(options),
    )
    if not isinstance(backend, HFBackend):
        raise ConfigError(f"Debias Tuning needs a local transformers model, not {options.model}")
    return backend


def tune(options: TuneOptions, progress: Progress | None = None) -> dict[str, Any]:
    """Train a Debias Tuning adapter into options.out and return its manifest (resumes from a checkpoint).

    `progress` shows the steps with the training and dev loss, and every dev evaluation.
    """
    progress = progress or SilentProgress()
    weights = LossWeights.parse(options.losses)
    if options.out.exists() and not options.out.is_dir():
        raise ConfigError(f"adapter output folder is a file: {options.out}")
    data = load_tuning_data(options)
    fingerprint = options.fingerprint({k: v["sha256"] for k, v in data.items()})
    manifest_path = options.out / MANIFEST
    if manifest_path.is_file():
        done = json.loads(manifest_path.read_text(encoding="utf-8"))
        if done.get("fingerprint") != fingerprint:
            raise ConfigError(f"{options.out} holds an adapter trained with other settings; choose another --out")
        progress.note(f"adapter already trained in {options.out}")
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
    after_ppl = perplexity(trainer.model, trainer.tokenizer, neutral_sentences(dev), advance=progress.advance)
    trainer.model.save_pretrained(options.out)
    manifest = {
        "fairprobe_version": __version__,
        "kind": "debias-tuning",
        "fingerprint": fingerprint,
        "base_model": base_identity(backend),
        "losses": weights.as_dict(),
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
    atomic_write_json(manifest_path, manifest)
    shutil.rmtree(options.out / CHECKPOINT, ignore_errors=True)
    return manifest
