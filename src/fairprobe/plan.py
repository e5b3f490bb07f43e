"""A run plan: a run's settings resolved once, into typed parts, before anything runs.

Every entry point (the CLI and the Python API; `run`, many models, `score`, `compare`, `sweep`) turns what it was
given into `RunOptions` (the request, as the manifest records it), and `RunPlan.build` resolves that request once:
the model spec (its scheme's typed backend settings), each probe set bound to its family and that family's typed
options, the decoding and the seed. The runner, the set work, the mitigation methods and the families read the
plan's typed parts and never parse a setting again; a family sees only its small `RunContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fairprobe.errors import ModelError
from fairprobe.families import Family
from fairprobe.families.base import RunContext, ScoringWay, all_families, known_family_of_set
from fairprobe.io import fingerprint
from fairprobe.models import BackendSettings, GenerationConfig, ModelBackend, load_model, scheme_of
from fairprobe.models.settings import LocalSettings
from fairprobe.options import RunOptions


@dataclass(frozen=True)
class ModelSpec:
    """The model of a run: its spec, adapter and typed backend settings (None: a name fairprobe does not load, such
    as the system that wrote replies `score` reads, or a model object measured in memory)."""

    name: str
    adapter: str | None = None
    settings: BackendSettings | None = None

    @classmethod
    def parse(cls, name: str, args: dict[str, Any], adapter: str | None = None) -> ModelSpec:
        """A spec and its `-M` args, typed by the spec's scheme (a bad key or value is a one-line ConfigError)."""
        try:
            scheme = scheme_of(name)
        except ModelError:
            if args:  # settings for a model no scheme loads
                raise
            return cls(name, adapter)
        return cls(name, adapter, scheme.settings.parse(dict(args)))

    def answer_args(self) -> dict[str, Any]:
        """The backend settings given that may change answers: part of the run's settings and the cache's keys
        (with the loaded weights' content, `ModelBackend.identity`, they name what answered)."""
        return self.settings.answer_args() if self.settings is not None else {}

    def scoring(self) -> ScoringWay:
        """How the model scores before a server is asked: locally, exactly (a server's default), top-k (a server
        told `-M implicit=topk`), or not at all (no model fairprobe loads)."""
        if self.settings is None:
            return "none"
        if self.settings.told_topk():
            return "topk"
        return "local" if isinstance(self.settings, LocalSettings) else "exact"

    def load(self, adapter: str | None = None) -> ModelBackend:
        """The backend (with `adapter` instead of the spec's when given); an unknown spec is a ModelError."""
        if self.settings is None:
            scheme_of(self.name)  # says why the name is no spec
        return load_model(self.name, adapter=adapter or self.adapter, settings=self.settings)


@dataclass(frozen=True)
class BoundSet:
    """A probe set of the run bound to its family and that family's typed options."""

    name: str
    family: Family[Any, Any]
    options: BaseModel


@dataclass(frozen=True)
class RunPlan:
    """A run resolved once: the request as given (`options`, recorded in the manifest), the model, the bound sets
    and what families see (`context`: decoding, scoring, seed); `run_settings` names the run's samples."""

    options: RunOptions
    model: ModelSpec
    sets: tuple[BoundSet, ...]
    context: RunContext

    @classmethod
    def build(cls, options: RunOptions) -> RunPlan:
        """Resolve a request once: the model's typed settings, each set's family and that family's typed options.
        A bad backend setting, an unknown set or a bad option fails here, before any data or model work."""
        model = ModelSpec.parse(options.model, options.model_args, options.adapter)
        sets = bind_all(options.probe_names(), options.probe_options)
        context = RunContext(generation=options.generation, scoring=model.scoring(), seed=options.seed)
        return cls(options, model, sets, context)

    def derive(self, **updates: Any) -> RunPlan:
        """Another run's plan: this request with `updates` (another method of a comparison, a sweep setting)."""
        return RunPlan.build(self.options.model_copy(update=updates))

    def bound(self, name: str) -> BoundSet:
        """The bound set of a probe set's name."""
        return next(b for b in self.sets if b.name == name)

    def narrowed(self, names: list[str]) -> RunPlan:
        """The plan of the sets that loaded (a whole-suite run skips a set whose data is not at hand)."""
        return replace(self, sets=tuple(self.bound(name) for name in names))

    def with_scoring(self, detected: str | None) -> RunPlan:
        """The plan once the loaded backend said how it scores ("exact"/"topk" on a server, None locally)."""
        if detected is None or self.context.scoring in ("topk", "none"):
            return self
        return replace(self, context=replace(self.context, scoring="topk" if detected == "topk" else "exact"))

    @property
    def seed(self) -> int:
        """The run's seed (each sampled request's own seed is hashed from it)."""
        return self.context.seed

    @property
    def generation(self) -> GenerationConfig:
        """The run's decoding as given (a family may change it: `Family.generation`)."""
        return self.context.generation

    def output_dir(self) -> Path:
        """The run folder."""
        return self.options.output_dir()

    def family_settings(self) -> dict[str, Any]:
        """Each family's typed options as this run uses them (files they name are part of them, content included)."""
        out: dict[str, Any] = {}
        for bound in self.sets:
            out.setdefault(bound.family.name, bound.options.model_dump(mode="json"))
        return out

    def run_settings(self) -> dict[str, Any]:
        """Every setting that changes samples: the run's own and its families' (an option left at its default is
        left out, so adding one keeps older run folders resumable)."""
        settings = self.options.settings(self.model.answer_args())
        for name, values in self.family_settings().items():
            changed = {k: v for k, v in values.items() if v is not None and v != {} and v != []}
            if changed:
                settings.setdefault("families", {})[name] = changed
        return settings

    def fingerprint(self) -> str:
        """The hash of the run's settings: a run folder resumes only a run of the same fingerprint."""
        return fingerprint(self.run_settings())


def bind_all(names: list[str], probe_options: dict[str, Any]) -> tuple[BoundSet, ...]:
    """A run's sets bound to their families and those families' typed options: a plain `-o` key goes to every
    family of the run that takes it and is an error only when no family of the suites of the run's sets takes it
    (`--probes template,bbq-gender -o mode=exact` reads bbq-gender exactly and template as ever)."""
    families = [known_family_of_set(name) for name in names]
    peers = [f for f in all_families() if f.suite in {family.suite for family in families}]
    return tuple(
        BoundSet(name, family, family.parse_options(probe_options, name, peers))
        for name, family in zip(names, families, strict=True)
    )


def planned(given: RunPlan | RunOptions) -> RunPlan:
    """A plan as given, or the plan of a request (the runner's functions take either)."""
    return given if isinstance(given, RunPlan) else RunPlan.build(given)
