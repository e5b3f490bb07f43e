"""The request of a run, as given: everything that decides its samples (hashed to recognise a resumable run) plus
where to write, and the builder of it from a command's flags or the Python API's arguments. A family's own
settings are its `-o family.key=value` pairs (`probe_options`) and a backend's its `-M key=value` pairs
(`model_args`): the run plan (`fairprobe.plan`) types both once, and the manifest records the request as given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fairprobe.catalog import suite_names, suite_sets
from fairprobe.errors import ConfigError
from fairprobe.models import DEFAULT_MODEL, GenerationConfig
from fairprobe.records import LimitOrder
from fairprobe.redact import secret_options


class RunOptions(BaseModel):
    """Everything that decides a run's samples (hashed to recognise a resumable run) plus where to write."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", allow_inf_nan=False)

    model: str = DEFAULT_MODEL
    adapter: str | None = None
    suite: str = "paper"
    probes: list[str] | None = None
    data_dir: Path | None = None
    out: Path | None = None
    limit: int | None = Field(None, ge=1)
    limit_order: LimitOrder = "stratified"
    seed: int = 0
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    probe_options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(32, ge=1)
    cache: Path | None = None
    use_cache: bool = True
    model_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _mask_secrets(self) -> RunOptions:
        secret_options(self.model_args)  # a key given as -M api_key=... is masked in everything written from now
        return self

    def probe_names(self) -> list[str]:
        """The probe sets to run: --probes, else every set of the suite."""
        if self.suite not in suite_names():
            raise ConfigError(f"unknown suite {self.suite!r}: choose from {', '.join(suite_names())}")
        return list(self.probes) if self.probes else suite_sets(self.suite)

    def output_dir(self) -> Path:
        """--out, else runs/<model>/<suite> (deterministic, so rerunning the same command resumes)."""
        if self.out is not None:
            return self.out
        slug = "".join(c if c.isalnum() or c in "-._" else "_" for c in self.model)
        if self.adapter:
            slug += "+" + Path(self.adapter).name
        return Path("runs") / slug / self.suite

    def settings(self, answer_args: dict[str, Any]) -> dict[str, Any]:
        """The generic settings that change samples, with the backend's typed settings that change answers
        (`answer_args`, from the run plan's model spec)."""
        obj = self.model_dump(mode="json", exclude={"out", "cache", "use_cache", "model_args"})
        if answer_args:
            obj["model_args"] = answer_args
        # How a limit draws matters only when one applies; `first` (the draw before stratified limits) is left
        # out, so folders made then resume with --limit-order first.
        if self.limit is None or self.limit_order == "first":
            obj.pop("limit_order")
        return obj

    def recorded(self, scoring: str | None) -> dict[str, Any]:
        """The options as a manifest records them (decoding apart; a secret backend option shown as ***), with how
        the loaded server said it scores (`scoring`; None for a local model, or a run that asks no scores)."""
        obj = self.model_dump(mode="json", exclude={"generation"})
        obj["model_args"] = secret_options(obj["model_args"])
        obj["scoring"] = scoring
        return obj


# Command-line shortcuts for backend settings (`--device cuda` is `-M device=cuda`) and for family options
# that keep their flags (`--instruction X` is `-o instruction=X`, reaching every family of the suite that takes it).
BACKEND_SHORTCUTS = ("device", "dtype", "base_url", "concurrency", "top_logprobs")
FAMILY_SHORTCUTS = ("instruction", "words")
DECODING = ("max_new_tokens", "temperature", "top_p", "top_k")


def run_options_from_settings(
    flags: dict[str, Any], model_args: dict[str, Any], probe_options: dict[str, Any]
) -> RunOptions:
    """The RunOptions of the front ends' settings (`fairprobe.api.runs.request`), whose `-M` and `-o` settings are
    dicts already: decoding flags become a GenerationConfig, `--probes a,b` a list, and the shortcuts fold into
    the dicts (a shortcut and its `-M`/`-o` key together are a one-line error). `--implicit off` turns a family's
    next-word probabilities off (`-o implicit=off`); another `--implicit` is the backend's `-M implicit=...`."""
    flags, model_args, probe_options = dict(flags), dict(model_args), dict(probe_options)
    implicit = flags.pop("implicit", None)
    if implicit == "off":
        fold(probe_options, "implicit", "off", "--implicit off", "-o")
    elif implicit not in (None, "auto"):
        fold(model_args, "implicit", implicit, "--implicit", "-M")
    for key in BACKEND_SHORTCUTS:
        if flags.get(key) is not None:
            fold(model_args, key, flags[key], f"--{key.replace('_', '-')}", "-M")
    for key in FAMILY_SHORTCUTS:
        if flags.get(key) is not None:
            fold(probe_options, key, str(flags[key]), f"--{key}", "-o")
    decoding = {k: flags.pop(k) for k in DECODING if k in flags}
    probes = flags.pop("probes", None)
    fields = {k: v for k, v in flags.items() if k in RunOptions.model_fields and k not in BACKEND_SHORTCUTS}
    return RunOptions(
        **fields,
        probes=[p.strip() for p in probes.split(",") if p.strip()] or None if isinstance(probes, str) else probes,
        generation=GenerationConfig(**decoding, seed=flags.get("seed", 0)),
        probe_options=probe_options,
        model_args=model_args,
    )


def fold(target: dict[str, Any], key: str, value: Any, flag: str, switch: str) -> None:
    """Put a shortcut's value under its key; the same key given both ways is a ConfigError."""
    if key in target and target[key] != value:
        raise ConfigError(f"{flag} and {switch} {key}={target[key]!r} disagree: give one of them")
    target[key] = value


def parse_pairs_typed(pairs: list[str] | None, what: str, values: bool) -> dict[str, Any]:
    """`key=value` pairs (dashes in keys read as underscores); with `values`, a value reads as JSON when it is one
    (1, 0.5, true, "x") and is then checked by the backend's settings type."""
    from fairprobe.io import parse_pairs, parse_value

    parsed = parse_pairs(pairs, what)
    if values:
        return {k: parse_value(v) for k, v in parsed.items()}
    return {k.replace("-", "_"): v for k, v in parsed.items()}
