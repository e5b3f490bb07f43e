"""The Debias Tuning trainer: a LoRA step and a dev evaluation (losses, GLD, drift), checkpoints that save and
restore everything a resumed run needs (adapter, optimizer, scheduler, random state), and steps that Ctrl-C waits
for.
"""

from __future__ import annotations

import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from pickle import PickleError
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError

from fairprobe.errors import ConfigError, first_line
from fairprobe.families.paper.metrics import gld_per_prompt
from fairprobe.families.paper.words import AttributeWords
from fairprobe.mitigation.drift import drift_values, fluency_nll
from fairprobe.mitigation.loss_weights import LossWeights
from fairprobe.mitigation.losses import debias_loss, loss_kl
from fairprobe.mitigation.tune_data import (
    DRIFT_NEW_TOKENS,
    TuneOptions,
    tuning_prompts,
)
from fairprobe.models.base import LoraSettings, TrainableBackend


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
