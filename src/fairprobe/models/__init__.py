"""Model backends and the `--model SPEC` resolver.

Specs: `smollm2-135m-instruct` (default, embedded), `gemma-3-270m` (embedded), `hf:ID_OR_PATH`
(any transformers causal LM), `openai:MODEL` (any OpenAI-compatible server, see models/api.py).
Further schemes register with `register_scheme`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from fairprobe.errors import ModelError
from fairprobe.models.base import Completion, GenerationConfig, ModelBackend, Prompt
from fairprobe.registry import Registry

DEFAULT_MODEL = "smollm2-135m-instruct"

SchemeLoader = Callable[..., ModelBackend]
# Loaders of `PREFIX:REST` specs; third-party packages add theirs in the entry-point group `fairprobe.models`.
SCHEMES: Registry[SchemeLoader] = Registry("model scheme", entry_point_group="fairprobe.models")


def register_scheme(prefix: str) -> Callable[[SchemeLoader], SchemeLoader]:
    """Register a loader for specs `PREFIX:REST` (decorator); a taken prefix is a ConfigError."""
    return SCHEMES.register(prefix)


def hub_offline() -> bool:
    """True when the Hugging Face hub must not be contacted."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def _load_embedded(name: str, **options: Any) -> ModelBackend:
    from fairprobe.io import sha256_file
    from fairprobe.models.embedded import EMBEDDED, converted_folder, find_gguf
    from fairprobe.models.hf import load_hf

    entry = EMBEDDED[name]
    gguf = find_gguf(entry)
    if gguf is None:
        if hub_offline():
            raise ModelError(f"model {name!r} is not installed and the hub is offline: run `{entry.install_hint}`")
        info = {"id": name, "source": f"hf:{entry.hub_id}", "license": entry.license}
        return with_hf_content(load_hf(entry.hub_id, name=name, info=info, **options), entry.hub_id, options)
    sha = sha256_file(gguf)
    folder = converted_folder(entry, gguf, sha)
    info = {"id": name, "source": str(gguf), "gguf_sha256": sha, "hub_id": entry.hub_id, "license": entry.license}
    return load_hf(str(folder), name=name, info=info, **options)


@register_scheme("hf")
def _load_hf_spec(rest: str, **options: Any) -> ModelBackend:
    from fairprobe.models.hf import load_hf

    if not rest:
        raise ModelError("model spec 'hf:' needs a model id or path, e.g. hf:HuggingFaceTB/SmolLM2-360M")
    backend = load_hf(rest, name=f"hf:{rest}", info={"id": f"hf:{rest}", "source": rest}, **options)
    return with_hf_content(backend, rest, options)


def with_hf_content(backend: ModelBackend, path_or_id: str, options: dict[str, Any]) -> ModelBackend:
    """Add what names the loaded weights by content (folder digest or hub revision) to the backend's identity."""
    from fairprobe.models.content import hf_content

    backend.info.update(hf_content(path_or_id, options.get("revision")))  # type: ignore[attr-defined]
    return backend


def known_specs() -> list[str]:
    """Every spec form the resolver accepts, for error messages and help text."""
    from fairprobe.models.embedded import EMBEDDED

    return [*EMBEDDED, *(f"{p}:..." for p in SCHEMES.names())]


def load_model(spec: str, **options: Any) -> ModelBackend:
    """Resolve a `--model` spec to a backend; options: device, dtype, batch_size, adapter, ..."""
    from fairprobe.models.embedded import EMBEDDED

    if spec in EMBEDDED:
        return _load_embedded(spec, **options)
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in SCHEMES:
        return SCHEMES.get(prefix)(rest, **options)
    raise ModelError(f"unknown model spec {spec!r}: use one of {', '.join(known_specs())}")


__all__ = [
    "DEFAULT_MODEL",
    "Completion",
    "GenerationConfig",
    "ModelBackend",
    "Prompt",
    "known_specs",
    "load_model",
    "register_scheme",
]

# Registers the `openai:` scheme (OpenAI-compatible HTTP servers).
from fairprobe.models import api as _api  # noqa: E402, F401
