"""The one backend interface every model implements (Hugging Face, embedded GGUF, HTTP servers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from fairprobe.errors import ConfigError
from fairprobe.records import ChatMessage

Prompt = str | list[ChatMessage]


class GenerationConfig(BaseModel):
    """Decoding parameters; greedy with 50 new tokens is the paper's default."""

    model_config = ConfigDict(allow_inf_nan=False)

    max_new_tokens: int = Field(50, ge=1, le=4096)
    temperature: float = Field(0.0, ge=0.0, le=5.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    seed: int = 0

    @model_validator(mode="after")
    def _check(self) -> GenerationConfig:
        if self.temperature == 0.0 and (self.top_p != 1.0 or self.top_k != 0):
            raise ConfigError("top-p / top-k need sampling: set --temperature above 0")
        return self

    @property
    def greedy(self) -> bool:
        """True when decoding is greedy (temperature 0)."""
        return self.temperature == 0.0


@dataclass
class Completion:
    """A model's reply to one prompt and, when asked, the next-word probabilities right after it.

    `word_probs` has shape (N, 2): column 0 female, column 1 male, one row per attribute word pair.
    `word_probs_mask` marks the entries that are known (False where an API did not return them).
    """

    text: str
    word_probs: np.ndarray | None = None
    word_probs_mask: np.ndarray | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class ModelBackend(Protocol):
    """Continues prompts in batches; reads exact next-word probabilities where it can."""

    name: str
    has_chat_template: bool

    def identity(self) -> dict[str, Any]:
        """What the manifest records about the model (id, revision or sha, dtype, device)."""
        ...

    def generate(
        self,
        prompts: list[Prompt],
        config: GenerationConfig,
        word_pairs: list[tuple[str, str]] | None = None,
    ) -> list[Completion]:
        """Continue each prompt (a string, or chat messages); with word_pairs also return their probabilities."""
        ...


@dataclass(frozen=True)
class LoraSettings:
    """A LoRA adapter's shape: rank, alpha, dropout, the modules it wraps, and the seed of its initial weights."""

    rank: int
    alpha: float
    dropout: float
    target_modules: tuple[str, ...]
    seed: int = 0


@dataclass(frozen=True)
class Window:
    """Next-token log-probabilities over the first K positions after each prompt, for the tuned and the frozen model.

    `tuned` and `base` have shape (B, K, V): position 0 is the distribution right after the prompt, position k
    the one after the frozen model's first k greedy continuation tokens (fed to both models). `valid` (B, K)
    is False after the continuation has ended. `tuned` carries gradients in training mode.
    """

    tuned: Any
    base: Any
    valid: Any


@runtime_checkable
class ScoringBackend(Protocol):
    """A backend with its weights at hand: it scores given text exactly (perplexity, drift fluency).

    Implemented by `fairprobe.models.hf.HFBackend`; API backends do not score arbitrary text.
    """

    def text_log_probs(self, prefixes: list[str], texts: list[str], batch_size: int = 32) -> list[np.ndarray]:
        """Log-probability of each token of `texts[i]` after `prefixes[i]` (prefix '': every token after the first)."""
        ...


@runtime_checkable
class TrainableBackend(ScoringBackend, Protocol):
    """What Debias Tuning needs of a local model: LoRA on it, its frozen base, and differentiable scores.

    Everything training reads goes through these methods, never through the backend's model or tokenizer.
    """

    def add_lora(self, settings: LoraSettings) -> list[Any]:
        """Wrap the model in a fresh LoRA adapter; returns the trainable parameters."""
        ...

    def train_mode(self, on: bool) -> None:
        """Dropout on (training) or off (evaluation)."""
        ...

    def frozen_base(self) -> Any:
        """A context manager under which the model answers without its adapter (the frozen base model)."""
        ...

    def attribute_log_probs(self, prompts: list[str], word_pairs: list[tuple[str, str]], max_length: int) -> Any:
        """Log-probabilities (B, N, 2) that each attribute word comes next; differentiable in training mode."""
        ...

    def attribute_token_ids(self, word_pairs: list[tuple[str, str]]) -> Any:
        """The first token of every attribute word (a 1-D tensor): what the KL term leaves out."""
        ...

    def continuation_window(self, prompts: list[str], positions: int, max_length: int) -> Window:
        """The tuned and frozen next-token distributions over the first `positions` continuation positions."""
        ...

    def generate_texts(self, prompts: list[str], max_new_tokens: int) -> list[str]:
        """Greedy continuations of plain-text prompts with the model as it is now (adapter on)."""
        ...

    def save_adapter(self, folder: Any) -> None:
        """Write the adapter (adapter_config.json and adapter_model.safetensors) to `folder`."""
        ...

    def load_adapter_weights(self, folder: Any) -> None:
        """Load adapter weights saved by `save_adapter` into the adapter added by `add_lora`."""
        ...

    def architecture(self) -> dict[str, Any]:
        """model_type, hidden_size, num_hidden_layers, vocab_size and whether the weights are 4-bit."""
        ...

    def adapt_threads(self) -> None:
        """Follow the free CPUs before a batch (a no-op off CPU)."""
        ...
