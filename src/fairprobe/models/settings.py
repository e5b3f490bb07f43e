"""Backend settings, typed per backend: what `-M key=value` (and the CLI's `--device`, `--dtype`, `--base-url`,
`--concurrency` shortcuts) may set, validated by pydantic before a model is loaded.

A key the backend does not take is a one-line error naming the keys it takes; a value of the wrong type, a
negative timeout or a non-finite number is refused by its type. `neutral` names the settings that change no
answer (where the model runs, how many requests at once): they are left out of a run's settings and cache keys.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, field_validator

from fairprobe.errors import ConfigError


class BackendSettings(BaseModel):
    """The settings of one kind of backend (a subclass per backend); unknown keys and non-finite numbers refused."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    kind: ClassVar[str] = "backend"
    neutral: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def parse(cls, args: dict[str, Any]) -> BackendSettings:
        """Validate `-M` args; a bad key or value is a one-line ConfigError naming the backend and its keys."""
        try:
            return cls.model_validate(args)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(x) for x in first.get("loc", ())) or "?"
            if first.get("type") == "extra_forbidden":
                raise ConfigError(
                    f"the {cls.kind} backend takes no -M key {key!r}: it takes {', '.join(cls.model_fields)}"
                ) from None
            raise ConfigError(f"-M {key}={args.get(key)!r} for the {cls.kind} backend: {first.get('msg')}") from None

    def answer_args(self) -> dict[str, Any]:
        """The settings given (not defaulted) that may change answers: part of a run's settings and cache keys."""
        given = self.model_dump(mode="json", exclude_unset=True)
        return {k: v for k, v in sorted(given.items()) if k not in self.neutral}

    def told_topk(self) -> bool:
        """Whether the settings tell the backend to score from top-k logprobs only (`-M implicit=topk`)."""
        return self.model_dump().get("implicit") == "topk"


UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9}
UNITS.update({"kib": 2**10, "mib": 2**20, "gib": 2**30})


def parse_memory(text: str | int) -> int:
    """Bytes of a size such as '2GB', '512MiB', '1.5g' or a plain number of bytes; ValueError when it is not one."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else None
    if match is None or unit not in UNITS or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a memory size: write e.g. 2GB, 512MB or 1.5GiB")
    return int(float(match.group(1)) * UNITS[unit])


class LocalSettings(BackendSettings):
    """A model whose weights run here (embedded models, `hf:ID_OR_PATH`).

    `device` auto, cpu, cuda, cuda:N or mps; `dtype` auto (bfloat16 on CUDA, float32 on CPU), float32, float16 or
    bfloat16; `batch_size` prompts per forward pass; `revision` a hub revision (branch, tag or commit); `quantize`
    4bit loads the weights in 4 bits (bitsandbytes NF4 on CUDA, as QLoRA does); `memory` the working memory a
    batch may take besides the weights (e.g. 2GB; by default as much as the weights): a batch whose keys, values and
    activations would exceed it runs in parts (the manifest records it under the model). On CPU, batches that read no
    probabilities may also take the room of the plain weights they give back (models/mapped.py).
    """

    kind: ClassVar[str] = "local"
    neutral: ClassVar[frozenset[str]] = frozenset({"device", "memory"})

    device: str = "auto"
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    batch_size: PositiveInt = 32
    revision: str | None = None
    quantize: Literal["none", "4bit"] = "none"
    memory: str | int | None = None

    @field_validator("memory")
    @classmethod
    def _memory_size(cls, value: str | int | None) -> str | int | None:
        """A size parse_memory reads (checked before any model loads)."""
        if value is not None:
            parse_memory(value)
        return value

    @field_validator("device")
    @classmethod
    def _known_device(cls, value: str) -> str:
        """A device named as torch names the ones fairprobe runs on; whether it is here is asked when loading."""
        if not re.fullmatch(r"auto|cpu|mps|cuda(:[0-9]+)?", value):
            raise ValueError("use auto, cpu, cuda, cuda:N or mps")
        return value


class OpenAISettings(BackendSettings):
    """An OpenAI-compatible server (`openai:MODEL`).

    `base_url` the server's /v1 URL (comma-separated URLs are used round-robin); `concurrency` requests at once;
    `timeout` seconds per request (unset: a limit that follows the tokens asked and the server's measured rate,
    models/pace.py); `implicit` how continuations are scored: exact (the server scores prompt
    tokens, e.g. vLLM), topk (bounds from the first position's `top_logprobs` top logprobs), auto (exact where
    every endpoint can, else topk); `api_key` the key, sent as $FAIRPROBE_API_KEY's would be (the environment is
    the better place: a command line is seen by `ps` and kept in shell history); it is redacted from everything
    written or printed, the manifest shows it as ***, and it changes no run's settings.
    """

    kind: ClassVar[str] = "openai"
    neutral: ClassVar[frozenset[str]] = frozenset({"concurrency", "timeout", "api_key"})

    base_url: str | None = None
    api_key: str | None = Field(None, repr=False, min_length=1)
    concurrency: PositiveInt = 8
    timeout: PositiveFloat | None = None
    top_logprobs: PositiveInt = 20
    implicit: Literal["auto", "exact", "topk"] = "auto"


class OpenSettings(BackendSettings):
    """The settings of a third-party scheme that declares none: any key, passed to its loader as given."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)

    def answer_args(self) -> dict[str, Any]:
        """Every key given."""
        return dict(sorted((self.model_extra or {}).items()))
