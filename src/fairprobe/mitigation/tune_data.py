"""Debias Tuning's settings and data: the options (the paper's defaults), the train and dev predicates with their
sources, the batches (a function of the seed and the step only, so a resumed run sees the same ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fairprobe.errors import ConfigError, DataError
from fairprobe.families.paper.sets import debias_llms_file, read_predicates
from fairprobe.io import fingerprint, read_text, sha256_file
from fairprobe.mitigation.loss_weights import LossWeights
from fairprobe.models import DEFAULT_MODEL
from fairprobe.models.base import TrainableBackend
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
    import torch  # asked only when a model is about to load: the options are checked before torch is imported

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
