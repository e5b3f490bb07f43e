"""A fix is a model variant: Original, a decoding setting, an instruction, LoRA adapters, another model spec or a model
already in memory (the Python API's).

Every variant is the Original run with one thing changed, run on the same items (the same suites, sets, limit and
draw) into its own resumable run folder under the comparison folder: OUT/runs/VARIANT, or OUT/runs/VARIANT/SUITE
when the comparison spans several suites (a run folder holds one suite). Every variant's plan on every suite is
built before anything runs (`variant_plans`), so a bad variant fails in one line before the first set runs. An instruction reaches every family that
takes the `instruction` option: the paper's plain prompts get it as their prefix, chat prompts as a system message.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fairprobe.errors import ConfigError, ModelError
from fairprobe.families.base import RunContext
from fairprobe.io import parse_pairs
from fairprobe.mitigation.suites import on_suite
from fairprobe.mitigation.sweep import check_grid
from fairprobe.mitigation.tuning import read_ablations
from fairprobe.models import GenerationConfig, ModelBackend, scheme_of
from fairprobe.models.adapters import check_adapter
from fairprobe.options import RunOptions
from fairprobe.plan import RunPlan
from fairprobe.progress import Labelled, Progress
from fairprobe.records import ProbeSet, Sample, SetResult
from fairprobe.runner import load_backend, load_sets, run_with_samples

ORIGINAL = "Original"
# Why a decoding-only variant's next-word metrics are not tested: they read the distribution right after the
# prompt, which temperature, top-p and top-k do not change (any difference is float noise of batching).
UNCHANGED_BY_DESIGN = "unchanged by design: decoding settings do not change next-word probabilities"


def parse_hyper(text: str, base: GenerationConfig) -> GenerationConfig:
    """'temperature=0.7,top_p=0.9' -> a sampling config; values are checked like the sweep grid."""
    form = "NAME=NUMBER (temperature, top_p, top_k)"
    values: dict[str, list[float]] = {}
    for key, value in parse_pairs([t for t in text.split(",") if t.strip()], "hyperparameter setting", form).items():
        try:
            values[key.replace("-", "_")] = [float(value)]
        except ValueError:
            raise ConfigError(f"hyperparameter setting {key}={value!r} must be {form}") from None
    check_grid(values)
    update: dict[str, Any] = {"temperature": values.get("temperature", [1.0])[0]}
    if "top_p" in values:
        update["top_p"] = values["top_p"][0]
    if "top_k" in values:
        update["top_k"] = int(values["top_k"][0])
    return GenerationConfig(**{**base.model_dump(), **update})


def decoding_only(variant: RunOptions, base: RunOptions) -> bool:
    """True when a variant differs from Original only in its decoding settings."""
    keep = {"generation", "out"}
    return variant.model_dump(exclude=keep) == base.model_dump(exclude=keep)


def changes_model(variant: RunOptions, base: RunOptions) -> bool:
    """True when a variant runs another model (an adapter or another spec): its perplexity can differ."""
    return (variant.model, variant.adapter) != (base.model, base.adapter)


@dataclass(frozen=True)
class InMemory:
    """A model already in memory as a variant (the Python API's): its backend, the variant's name, and the sha256
    of its weights where they can be read (None for a backend without a state dict)."""

    backend: ModelBackend
    label: str
    sha256: str | None = None

    @property
    def spec(self) -> str:
        """The model name its runs record: memory:LABEL@sha256:HASH (the first 16 hex digits), memory:LABEL
        without a hash; a resumed comparison whose model changed since then is a new run, never mixed answers."""
        return f"memory:{self.label}" + (f"@sha256:{self.sha256[:16]}" if self.sha256 else "")

    def record(self) -> dict[str, Any]:
        """What compare.json says of it (as its variant's `in_memory`): its label, the sha256 of its weights and
        what the backend says of itself."""
        return {"label": self.label, "sha256": self.sha256, "identity": self.backend.identity()}


@dataclass(frozen=True)
class Fixes:
    """The fixes to compare with Original: a decoding setting, an instruction, adapters, other model specs and
    models in memory by variant name (an adapter is a folder: a `fairprobe tune` output or any LoRA adapter)."""

    hyper: str | None = None
    instruction: str | None = None
    adapters: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, InMemory] = field(default_factory=dict)


def plan_variants(base: RunOptions, fixes: Fixes) -> dict[str, RunOptions]:
    """Each variant's run options: Original, Hyperparameter, Instruction, then the adapters and the other models;
    everything is checked before any data or model is read (a taken name, an unfinished tuning run, a folder
    that is no adapter)."""
    variants: dict[str, RunOptions] = {ORIGINAL: base}
    if fixes.hyper:
        variants["Hyperparameter"] = base.model_copy(update={"generation": parse_hyper(fixes.hyper, base.generation)})
    if fixes.instruction:
        guided = {**base.probe_options, "instruction": fixes.instruction}
        variants["Instruction"] = base.model_copy(update={"probe_options": guided})
    for kind, given, key in (("adapter", fixes.adapters, "adapter"), ("model", fixes.models, "model")):
        for name, value in given.items():
            if name in variants:
                raise ConfigError(f"variant name {name!r} is taken: name the {kind} {value} otherwise (NAME={value})")
            if kind == "adapter":
                check_adapter(Path(value))
            variants[name] = base.model_copy(update={key: value})
    for name, found in fixes.loaded.items():
        if name in variants:
            raise ConfigError(f"variant name {name!r} is taken: name the model in memory otherwise")
        # A model object has no spec to load or settings to type, and no cache key for its weights.
        variants[name] = base.model_copy(update={"model": found.spec, "model_args": {}, "use_cache": False})
    return variants


def variant_plans(
    variants: dict[str, RunOptions], per_suite: list[RunOptions], out: Path, loaded: Collection[str] = ()
) -> dict[str, list[RunPlan]]:
    """Each variant's run plan on each suite, into its folder under `out`, built before anything runs: a variant's
    bad backend setting (-M), unknown set or option, or model spec no scheme loads fails here, in one line
    (`loaded`: the names of the variants that are models in memory, which no scheme loads)."""
    plans: dict[str, list[RunPlan]] = {}
    suites = [base.suite for base in per_suite]
    for name, variant in variants.items():
        try:
            plans[name] = [
                RunPlan.build(
                    on_suite(variant, base.suite, base.probes, suites).model_copy(
                        update={"out": out / variant_folder(Path(), name, base.suite, len(per_suite) > 1)}
                    )
                )
                for base in per_suite
            ]
            if changes_model(variant, variants[ORIGINAL]) and name not in loaded:
                scheme_of(variant.model)  # says why a spec names no model fairprobe loads
        except (ConfigError, ModelError) as exc:
            raise type(exc)(str(exc) if name == ORIGINAL else f"variant {name!r}: {exc}") from None
    return plans


def named_adapters(items: Sequence[str] | None, ablations: dict[str, str]) -> dict[str, str]:
    """Variant name -> adapter folder from repeated `--adapter [NAME=]DIR` (one unnamed adapter is "Debias
    Tuning", several are named by their folders) and the ablations' adapters."""
    unnamed = [item for item in items or () if "=" not in item]
    out: dict[str, str] = {}
    for item in items or ():
        name, _, path = item.partition("=") if "=" in item else ("", "", item)
        name = name.strip() or ("Debias Tuning" if len(unnamed) == 1 else Path(path).name)
        if name in out or name in ablations:
            raise ConfigError(f"--adapter {item}: the variant name {name!r} is taken (give NAME=DIR)")
        out[name] = path.strip()
    return {**out, **ablations}


def compare_adapters(items: list[str] | None, folder: Path | None) -> dict[str, str]:
    """Variant name -> adapter folder from repeated --ablation NAME=PATH and a `tune --ablations` folder."""
    out = read_ablations(folder) if folder is not None else {}
    for name, path in parse_pairs(items, "--ablation", "NAME=PATH", last=True).items():
        if name in out:
            raise ConfigError(f"method name {name!r} is taken by {folder}: name the --ablation otherwise")
        out[name] = path
    return out


def slug(name: str) -> str:
    """A variant's folder name: 'Debias Tuning' -> 'debias-tuning'."""
    return name.lower().replace(" ", "-").replace("/", "-")


def variant_folder(out: Path, name: str, suite: str, several: bool) -> Path:
    """OUT/runs/VARIANT, or OUT/runs/VARIANT/SUITE when the comparison spans several suites."""
    folder = out / "runs" / slug(name)
    return folder / suite if several else folder


@dataclass
class VariantRuns:
    """What the variants gave: the sets, and per variant its model, and per set its samples, result, folder and
    what its family saw (`bound`: the run's context and the set's typed options, which a family's `resample` reads)."""

    sets: dict[str, ProbeSet] = field(default_factory=dict)
    samples: dict[str, dict[str, list[Sample]]] = field(default_factory=dict)
    results: dict[str, dict[str, SetResult]] = field(default_factory=dict)
    folders: dict[str, dict[str, str]] = field(default_factory=dict)
    backends: dict[str, ModelBackend] = field(default_factory=dict)
    bound: dict[str, dict[str, tuple[RunContext, BaseModel]]] = field(default_factory=dict)


def variant_backend(
    name: str,
    plan: RunPlan,
    original: RunPlan,
    models: tuple[ModelBackend, dict[str, InMemory]],
    progress: Progress,
) -> ModelBackend:
    """The model a variant runs: Original's (`models[0]`), a model in memory (`models[1]`, by variant name), or an
    adapter on Original's model, or another model spec."""
    base, loaded = models
    if name in loaded:
        return loaded[name].backend
    if not changes_model(plan.options, original.options):
        return base
    adapter = f" + adapter {plan.model.adapter}" if plan.model.adapter else ""
    progress.note(f"loading {plan.model.name}{adapter} for {name}")
    return load_backend(plan)


def run_variants(
    plans: dict[str, list[RunPlan]],
    context: tuple[Path, ModelBackend, Progress],
    loaded: dict[str, InMemory] | None = None,
) -> VariantRuns:
    """Run every variant's plans (one resumable run folder per variant and suite), Original first; `loaded`: the
    variants that are models in memory."""
    out, backend, progress = context
    runs = VariantRuns()
    original = plans[ORIGINAL]
    for plan in original:
        runs.sets.update({ps.name: ps for ps in load_sets(plan, progress)})
    for name, suite_plans in plans.items():
        model = variant_backend(name, suite_plans[0], original[0], (backend, loaded or {}), progress)
        runs.backends[name] = model
        runs.samples[name], runs.results[name], runs.folders[name], runs.bound[name] = {}, {}, {}, {}
        for plan in suite_plans:
            folder = plan.output_dir().relative_to(out).as_posix()
            runs.bound[name].update({b.name: (plan.context, b.options) for b in plan.sets})
            summary, done = run_with_samples(plan, model, Labelled(progress, name))
            runs.samples[name].update({k: list(v) for k, v in done.items()})
            runs.results[name].update(summary.results)
            runs.folders[name].update(dict.fromkeys(summary.results, folder))
    return runs
