"""The one backend interface every model implements (Hugging Face, embedded GGUF, HTTP servers)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from pydantic import BaseModel, Field, model_validator

from fairprobe.errors import ConfigError
from fairprobe.records import ChatMessage

Prompt = str | list[ChatMessage]


class GenerationConfig(BaseModel):
    """Decoding parameters; greedy with 50 new tokens is the paper's default."""

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
