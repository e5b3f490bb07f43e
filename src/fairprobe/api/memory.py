"""A transformers model already in memory (loaded in the notebook, peft-wrapped, or being fine-tuned) measured
directly, or compared as a fix's variant, with everything fairprobe changes on it put back afterwards."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fairprobe.errors import ConfigError
from fairprobe.mitigation.variants import InMemory

if TYPE_CHECKING:  # torch and transformers load when a model object is given, not for every compare
    from fairprobe.models.hf import HFBackend


def is_model_object(model: Any) -> bool:
    """Whether `model` is a model object (a transformers or peft model) rather than a spec string."""
    return not isinstance(model, str) and callable(getattr(model, "generate", None))


def memory_label(model: Any, label: str | None) -> str:
    """`memory:NAME`: the given label, else the checkpoint the model came from (`+peft` for a peft-wrapped one)."""
    if label:
        return label if label.startswith("memory:") else f"memory:{label}"
    config = getattr(model, "config", None)
    name = str(getattr(config, "_name_or_path", "") or type(model).__name__)
    return f"memory:{name}" + ("+peft" if hasattr(model, "peft_config") else "")


def memory_out(label: str, suite: str, out: Path | None) -> Path:
    """Where an in-memory model's run goes: `out`, which must hold no run yet (its weights may have changed since,
    so a folder is never resumed), else a new runs/<label>/<suite>-<UTC time> folder."""
    if out is not None:
        if (out / "manifest.json").is_file():
            raise ConfigError(
                f"{out} already holds a run: a model in memory is not recognised across runs (its weights may "
                "have changed), so give a new out (or leave it out for a new dated folder)"
            )
        return out
    slug = "".join(c if c.isalnum() or c in "-._" else "_" for c in label)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    return Path("runs") / slug / f"{suite}-{stamp}"


@contextmanager
def in_memory_backend(model: Any, tokenizer: Any, label: str, batch_size: int) -> Iterator[HFBackend]:
    """The model as a fairprobe backend for the `with` block; its training mode, generation config, forward (on
    CUDA the backend chooses the attention kernels) and the tokenizer's padding side and pad token are as they were
    afterwards."""
    from fairprobe.models.hf import HFBackend

    if tokenizer is None:
        raise ConfigError("a model object needs its tokenizer: fairprobe.run(model=model, tokenizer=tokenizer, ...)")
    saved = (model.training, getattr(model, "generation_config", None), tokenizer.padding_side, tokenizer.pad_token)
    backend = None
    try:
        backend = HFBackend(
            model, tokenizer, name=label, info={"id": label, "source": "in memory"}, batch_size=batch_size
        )
        yield backend
    finally:
        if backend is not None:
            backend.restore_attention()
        model.train(saved[0])
        if saved[1] is not None:
            model.generation_config = saved[1]
        tokenizer.padding_side, tokenizer.pad_token = saved[2], saved[3]


def run_in_memory(model: Any, tokenizer: Any, label: str | None, settings: dict[str, Any], progress: Any) -> Path:
    """A model object measured directly: no cache (its weights have no name), a new folder each time; its run folder.
    A fairprobe backend object (anything with `generate` and `identity`) runs as it is."""
    from fairprobe.api.runs import request
    from fairprobe.plan import RunPlan
    from fairprobe.runner import run

    if settings.get("adapter") is not None:
        raise ConfigError("adapter applies to a model loaded by spec: wrap a model object with peft yourself")
    is_backend = callable(getattr(model, "identity", None))
    name = (label or str(model.name)) if is_backend else memory_label(model, label)
    options = request(name, {**settings, "use_cache": False})
    plan = RunPlan.build(options.model_copy(update={"out": memory_out(name, options.suite, options.out)}))
    backend = nullcontext(model) if is_backend else in_memory_backend(model, tokenizer, name, options.batch_size)
    with backend as measured:
        run(plan, backend=measured, progress=progress)
    return plan.output_dir()


def weights_sha256(model: Any) -> str | None:
    """The sha256 of a model's weights (its state dict's names, shapes, dtypes and bytes, in name order); None for
    an object without a state dict (a backend that is no local model)."""
    state = getattr(model, "state_dict", None)
    if not callable(state):
        return None
    import torch

    digest = hashlib.sha256()
    for key, tensor in sorted(state().items()):
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{key}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@contextmanager
def in_memory_variant(name: str, given: Any, batch_size: int) -> Iterator[InMemory]:
    """A comparison's variant that is already in memory: a fairprobe backend as it is (anything with `generate` and
    `identity`), or a `(model, tokenizer)` pair of transformers/peft objects as a backend for the block (their
    state put back afterwards); with the sha256 of the weights where they can be read."""
    if callable(getattr(given, "identity", None)) and callable(getattr(given, "generate", None)):
        yield InMemory(given, name, weights_sha256(getattr(given, "model", None)))
        return
    if not (isinstance(given, tuple) and len(given) == 2 and is_model_object(given[0])):
        raise ConfigError(
            f"models[{name!r}] must be a model spec, a fairprobe backend or a (model, tokenizer) pair, "
            f"not {type(given).__name__}"
        )
    model, tokenizer = given
    with in_memory_backend(model, tokenizer, memory_label(model, None), batch_size) as backend:
        yield InMemory(backend, name, weights_sha256(model))
