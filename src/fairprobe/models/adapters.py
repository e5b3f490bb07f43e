"""Put a trained LoRA adapter on its base model, refusing one that was trained for another model."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from safetensors import SafetensorError

from fairprobe.documents import AdapterManifest, document_dict, read_document
from fairprobe.errors import ModelError, first_line
from fairprobe.io import sha256_file

if TYPE_CHECKING:  # an adapter folder is checked without importing transformers (and torch): seconds a refusal saves
    from transformers import PreTrainedModel

ADAPTER_WEIGHTS = "adapter_model.safetensors"


def quiet_peft_warnings() -> None:
    """peft asks transformers the deprecated `is_gradient_checkpointing`; the warning is peft's to fix, not the user's."""
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


def read_adapter_manifest(folder: Path) -> dict[str, Any] | None:
    """The fairprobe manifest of an adapter folder, validated; None for a plain peft adapter without one."""
    path = folder / "manifest.json"
    if not path.exists():
        return None
    return document_dict(read_document(path, AdapterManifest, "adapter manifest"))


def check_weights(folder: Path, manifest: dict[str, Any] | None) -> str | None:
    """The sha256 of the adapter's weights, refused unless it is the one its manifest records (cut short or edited
    weights would load as other numbers, or fail deep inside peft)."""
    weights = folder / ADAPTER_WEIGHTS
    if not weights.is_file():
        if manifest is not None:
            raise ModelError(
                f"adapter {folder} has a manifest but no {ADAPTER_WEIGHTS}: retrain it or restore the file"
            )
        return None
    sha = sha256_file(weights)
    if manifest is not None and sha != manifest["adapter_sha256"]:
        raise ModelError(
            f"adapter weights {weights} do not match the sha256 its manifest.json records (cut short or edited?): "
            "retrain the adapter or restore the file"
        )
    return sha


def _label(identity: dict[str, Any]) -> str:
    sha = identity.get("gguf_sha256")
    return f"{identity.get('id')}" + (f" (gguf sha256 {sha[:12]})" if sha else "")


def check_base(adapter: Path, trained_for: dict[str, Any], base_info: dict[str, Any], model: PreTrainedModel) -> None:
    """Raise ModelError unless the adapter's recorded base model is this one (id, gguf sha256, config)."""
    same = trained_for.get("id") == base_info.get("id")
    if trained_for.get("gguf_sha256") or base_info.get("gguf_sha256"):
        same = same and trained_for.get("gguf_sha256") == base_info.get("gguf_sha256")
    config = trained_for.get("config") or {}
    for key, value in config.items():
        if value is not None and getattr(model.config, key, None) not in (None, value):
            same = False
    if not same:
        raise ModelError(f"adapter {adapter} was trained for {_label(trained_for)}, not {_label(base_info)}")


def check_finished(folder: Path) -> None:
    """Refuse the folder of a `fairprobe tune` run that has a checkpoint but no manifest yet (still unfinished)."""
    if (folder / "manifest.json").is_file():
        return
    if (folder / "ablations.json").is_file():
        raise ModelError(f"{folder} is a folder of ablation adapters: give it to compare as --ablations {folder}")
    if any((folder / name / "trainer_state.pt").is_file() for name in ("checkpoint", ".checkpoint.old")):
        raise ModelError(
            f"adapter folder {folder} is from an unfinished tuning run (a checkpoint, no manifest.json): "
            f"rerun the same `fairprobe tune` command to finish it"
        )


def check_adapter(folder: Path) -> None:
    """Refuse what is no finished LoRA adapter folder, before any model is loaded (a comparison checks each
    variant's adapter before its first run)."""
    check_finished(folder)
    if not (folder / "adapter_config.json").is_file():
        raise ModelError(f"not a LoRA adapter folder (no adapter_config.json): {folder}")


def attach_adapter(
    model: PreTrainedModel, adapter_path: str | Path, base_info: dict[str, Any]
) -> tuple[PreTrainedModel, dict[str, Any]]:
    """Load a peft LoRA adapter onto `model` and merge it; returns the model and the adapter's manifest entry.

    The adapter is merged into the weights, so the backend keeps a plain transformers model (its own
    generation settings, same speed as the base model).
    """
    from peft import PeftModel

    folder = Path(adapter_path)
    check_adapter(folder)
    manifest = read_adapter_manifest(folder)
    if manifest is not None:
        check_base(folder, manifest["base_model"], base_info, model)
    sha = check_weights(folder, manifest)
    quiet_peft_warnings()
    try:
        merged = PeftModel.from_pretrained(model, str(folder), is_trainable=False).merge_and_unload()
    except (OSError, ValueError, RuntimeError, KeyError, TypeError, SafetensorError) as exc:
        first = first_line(str(exc)) or type(exc).__name__
        raise ModelError(f"cannot load adapter {folder}: {first}") from exc
    info: dict[str, Any] = {
        "path": str(folder),
        "sha256": sha,
        "config_sha256": sha256_file(folder / "adapter_config.json"),
    }
    if manifest is not None:
        info["training"] = {
            "kind": manifest.get("kind"),
            "losses": manifest.get("losses"),
            "hyperparameters": manifest.get("hyperparameters"),
            "data": manifest.get("data"),
            "finished": manifest.get("finished"),
        }
    return merged, info
