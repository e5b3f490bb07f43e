"""Model backends and the `--model SPEC` resolver: the only place that reads a spec's scheme.

Specs: `smollm2-135m-instruct` (default, embedded), `gemma-3-270m` (embedded), `hf:ID_OR_PATH`
(any transformers causal LM), `openai:MODEL` (any OpenAI-compatible server, see models/api.py).
Further schemes register with `register_scheme`, each with its typed settings (models/settings.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fairprobe.errors import ConfigError, ModelError
from fairprobe.models.base import Completion, GenerationConfig, ModelBackend, Prompt, ScoreRequest, Scores
from fairprobe.models.hub import hub_arguments, hub_offline
from fairprobe.models.settings import BackendSettings, LocalSettings, OpenSettings
from fairprobe.registry import Registry

if TYPE_CHECKING:
    from fairprobe.models.hf import HFBackend

DEFAULT_MODEL = "smollm2-135m-instruct"

# A typed scheme's loader takes the spec's rest (after `PREFIX:`), its validated settings and an adapter folder (or
# None); a scheme without a settings type takes the rest and its `-M` args as keywords.
SchemeLoader = Callable[..., ModelBackend]


@dataclass(frozen=True)
class Scheme:
    """A model scheme: its loader and the settings type its `-M` args are validated against."""

    loader: SchemeLoader
    settings: type[BackendSettings]

    def load(self, rest: str, settings: BackendSettings, adapter: str | None) -> ModelBackend:
        """The backend of a spec's rest, with its validated settings."""
        if isinstance(settings, OpenSettings):  # untyped: the args as given, as keywords
            return self.loader(rest, **settings.answer_args(), **({"adapter": adapter} if adapter else {}))
        return self.loader(rest, settings, adapter)


# `PREFIX:REST` specs; third-party packages add theirs in the entry-point group `fairprobe.models` (a Scheme, or a
# plain loader function, whose `-M` args then pass unchecked).
SCHEMES: Registry[Scheme | SchemeLoader] = Registry("model scheme", entry_point_group="fairprobe.models")
# OpenAI-compatible HTTP servers: imported (httpx and all) only when an `openai:` spec is used.
SCHEMES.register_lazy("openai", "fairprobe.models.api:SCHEME")


def register_scheme(
    prefix: str, settings: type[BackendSettings] = OpenSettings
) -> Callable[[SchemeLoader], SchemeLoader]:
    """Register a loader for specs `PREFIX:REST` with its settings type (decorator); a taken prefix is a ConfigError."""

    def wrap(loader: SchemeLoader) -> SchemeLoader:
        SCHEMES.register(prefix, Scheme(loader, settings))
        return loader

    return wrap


def _load_embedded(name: str, settings: LocalSettings, adapter: str | None) -> ModelBackend:
    from fairprobe.io import sha256_file
    from fairprobe.models.embedded import EMBEDDED, converted_folder, find_gguf
    from fairprobe.models.hf import load_hf, resolve_device

    resolve_device(settings.device)  # a device this machine lacks is refused before the weights are converted
    entry = EMBEDDED[name]
    gguf = find_gguf(entry)
    if gguf is None:
        if hub_offline():
            raise ModelError(f"model {name!r} is not installed and the hub is offline: run `{entry.install_hint}`")
        info = {"id": name, "source": f"hf:{entry.hub_id}", "license": entry.license}
        hub_args = hub_arguments(entry.hub_id, settings.revision)
        backend = load_hf(entry.hub_id, name=name, info=info, settings=settings, adapter=adapter, hub_args=hub_args)
        return with_hf_content(backend, entry.hub_id, settings.revision)
    sha = sha256_file(gguf)
    folder = converted_folder(entry, gguf, sha)
    info = {"id": name, "source": str(gguf), "gguf_sha256": sha, "hub_id": entry.hub_id, "license": entry.license}
    return load_hf(str(folder), name=name, info=info, settings=settings, adapter=adapter)


@register_scheme("hf", settings=LocalSettings)
def _load_hf_spec(rest: str, settings: LocalSettings, adapter: str | None) -> ModelBackend:
    if not rest:
        raise ModelError("model spec 'hf:' needs a model id or path, e.g. hf:HuggingFaceTB/SmolLM2-360M")
    hub_args = hub_arguments(rest, settings.revision)  # before transformers is imported: a missing model fails fast
    from fairprobe.models.hf import load_hf

    info = {"id": f"hf:{rest}", "source": rest}
    backend = load_hf(rest, name=f"hf:{rest}", info=info, settings=settings, adapter=adapter, hub_args=hub_args)
    return with_hf_content(backend, rest, settings.revision)


def with_hf_content(backend: HFBackend, path_or_id: str, revision: str | None) -> HFBackend:
    """Add what names the loaded weights by content (folder digest or hub revision) to the backend's identity."""
    from fairprobe.models.content import hf_content

    backend.info.update(hf_content(path_or_id, revision))
    return backend


def known_specs() -> list[str]:
    """Every spec form the resolver accepts, for error messages and help text."""
    from fairprobe.models.embedded import EMBEDDED

    return [*EMBEDDED, *(f"{p}:..." for p in SCHEMES.names())]


def scheme_of(spec: str) -> Scheme:
    """The scheme a `--model` spec names (embedded models are local), checked without loading anything: an unknown
    name or scheme, or a scheme with no model after it (`openai:`), is a ModelError, so a list of models is checked
    whole before the first one runs."""
    from fairprobe.models.embedded import EMBEDDED

    if spec in EMBEDDED:
        return Scheme(lambda rest, settings, adapter: _load_embedded(spec, settings, adapter), LocalSettings)
    prefix, sep, rest = spec.partition(":")
    if not (sep and prefix in SCHEMES):
        raise ModelError(f"unknown model spec {spec!r}: use one of {', '.join(known_specs())}")
    if not rest.strip():
        raise ModelError(f"model spec {spec!r} names no model: write {prefix}:NAME (a model id, path or server name)")
    found = SCHEMES.get(prefix)
    return found if isinstance(found, Scheme) else Scheme(found, OpenSettings)


def runs_locally(spec: str) -> bool:
    """Whether a spec's weights run in this process (what Debias Tuning and perplexity need)."""
    return issubclass(scheme_of(spec).settings, LocalSettings)


def load_model(
    spec: str, adapter: str | None = None, settings: BackendSettings | None = None, **args: Any
) -> ModelBackend:
    """Resolve a `--model` spec to a backend; `args` are its settings (`-M`), validated by its scheme's type, or
    `settings` the settings a run plan typed already."""
    scheme = scheme_of(spec)
    settings = settings if settings is not None else scheme.settings.parse(args)
    if adapter and not issubclass(scheme.settings, LocalSettings):
        raise ConfigError(f"--adapter needs a local model (embedded or hf:), not {spec!r}")
    return scheme.load(spec.partition(":")[2], settings, adapter)


__all__ = [
    "DEFAULT_MODEL",
    "BackendSettings",
    "Completion",
    "GenerationConfig",
    "ModelBackend",
    "Prompt",
    "ScoreRequest",
    "Scores",
    "known_specs",
    "load_model",
    "register_scheme",
    "runs_locally",
    "scheme_of",
]
