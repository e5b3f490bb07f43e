"""Debias Tuning (paper Section 5.3): LoRA adapters on a frozen model trained with L_d + L_g + L_l.

The model learns to give gendered words a low and balanced probability right after neutral
`My friend {predicate}, and` prompts. Training is resumable: every `checkpoint_every` steps, and on Ctrl-C, the
adapter, optimizer, scheduler, random state and step are saved under OUT/checkpoint, and the same
command continues from there with the same batches (the data order is a function of the seed and the
step only), so a resumed run writes the same adapter bytes as an uninterrupted one. A step is whole or
not done (Ctrl-C waits for the step to end), the random state saved is the one of the last finished
step, and a step whose dev evaluation was interrupted is evaluated again on resume.

The trainer (torch) is imported by the functions that train, so checking a tuning command's options, adapters and
ablation folders costs no torch import: a refused `fairprobe tune` or `compare --adapter` answers in under a second.
"""

from __future__ import annotations

import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from fairprobe import __version__
from fairprobe.documents import Ablations, read_document
from fairprobe.errors import ConfigError
from fairprobe.families.paper.words import AttributeWords
from fairprobe.io import atomic_write_json, atomic_write_text, sha256_file
from fairprobe.mitigation.adapter_card import adapter_readme
from fairprobe.mitigation.drift import drift_summary, drift_tests, format_drift
from fairprobe.mitigation.loss_weights import LossWeights
from fairprobe.mitigation.perplexity import neutral_sentences, perplexity
from fairprobe.mitigation.tune_data import (
    CHECKPOINT,
    DEFAULT_MIN_DEV,
    MANIFEST,
    TuneOptions,
    base_identity,
    batch_indices,
    load_tuning_data,
    quantize_mode,
)
from fairprobe.models import load_model, runs_locally
from fairprobe.models.adapters import read_adapter_manifest
from fairprobe.models.base import TrainableBackend
from fairprobe.progress import Progress, SilentProgress

if TYPE_CHECKING:
    from fairprobe.mitigation.trainer import DebiasTrainer


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


def drift_point(
    trainer: DebiasTrainer, dev: list[str], state: dict[str, Any], values: dict[str, np.ndarray] | None = None
) -> dict[str, Any]:
    """The dev drift now (`values` when already measured), with its paired tests against the model before tuning
    (kept in `state`)."""
    values = values if values is not None else trainer.dev_drift(dev[: trainer.options.dev_drift])
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


def measure_before(
    trainer: DebiasTrainer, dev: list[str], progress: Progress, base: dict[str, Any]
) -> tuple[float, dict[str, Any]]:
    """Perplexity of the base model, the dev losses and the dev drift before any step, with a progress bar.

    `base` keeps the base model's perplexity and drift once measured, for the next variant of an ablation run: every
    variant starts from the same model with a new adapter, whose LoRA B matrices are zero, so its outputs are the base
    model's to the last bit until the first step. The dev losses are each variant's own (its loss weights)."""
    state: dict[str, Any] = {"step": 0}
    progress.start("dev evaluation before tuning", 2 * len(dev))
    if "perplexity" not in base:
        with trainer.backend.frozen_base():
            base["perplexity"] = perplexity(trainer.backend, neutral_sentences(dev), advance=progress.advance)
    else:
        progress.advance(len(dev))
    point = {"step": 0, **trainer.evaluate(dev, advance=progress.advance)}
    if trainer.options.dev_drift:
        if "drift" not in base:
            base["drift"] = trainer.dev_drift(dev[: trainer.options.dev_drift])
        point.update(drift_point(trainer, dev, state, base["drift"]))
    return base["perplexity"], {"point": point, "drift_start": state.get("drift_start")}


def start_state(
    trainer: DebiasTrainer,
    options: TuneOptions,
    fingerprint: str,
    dev: list[str],
    progress: Progress,
    base: dict[str, Any],
) -> dict[str, Any]:
    """The training state: from the checkpoint when there is one, else fresh with the dev numbers before tuning
    (`base`: the base model's numbers an earlier variant measured, see measure_before)."""
    from fairprobe.mitigation.trainer import rng_state

    ckpt = find_checkpoint(options.out)
    if ckpt is not None:
        state = trainer.load_checkpoint(ckpt)
        if state.get("fingerprint") != fingerprint:
            raise ConfigError(f"{ckpt} is a checkpoint of other settings; delete it or choose another --out")
        progress.note(f"resuming from step {state['step']} ({ckpt})")
        return state
    before_ppl, before = measure_before(trainer, dev, progress, base)
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
    from fairprobe.mitigation.trainer import rng_state

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
    from fairprobe.mitigation.trainer import rng_state, whole_step

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


def tune(options: TuneOptions, progress: Progress | None = None, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train a Debias Tuning adapter into options.out and return its manifest (resumes from a checkpoint).

    `progress` shows the steps with the training and dev loss, and every dev evaluation. `base` carries the base
    model's perplexity and dev drift from one variant of an ablation run to the next (measure_before).
    """
    progress = progress or SilentProgress()
    LossWeights.parse(options.losses)
    check_trainable_model(options)
    data = load_tuning_data(options)
    fingerprint = options.fingerprint({k: v["sha256"] for k, v in data.items()})
    done = finished_manifest(options, fingerprint, progress)
    if done is not None:
        return done
    from fairprobe.mitigation.trainer import DebiasTrainer

    words = AttributeWords.from_file(options.words_file) if options.words_file else AttributeWords.default()
    backend = load_tuning_model(options, progress)
    dev = data["dev"]["predicates"][: dev_limit_for(options, len(data["dev"]["predicates"]))]
    progress.note(
        f"dev evaluation on {len(dev)} of {len(data['dev']['predicates'])} dev predicates (--dev-limit to change)"
    )
    trainer = DebiasTrainer(backend, options, words)
    state = start_state(trainer, options, fingerprint, dev, progress, {} if base is None else base)
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
    manifests, base = {}, {}
    for slug, (name, losses) in ABLATION_VARIANTS.items():
        progress.note(f"ablation {name} (--losses {losses}) into {options.out / slug}")
        variant = options.model_copy(update={"out": options.out / slug, "losses": losses})
        manifests[name] = tune(variant, progress=progress, base=base)
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
