"""The options of a run: everything that decides its samples (hashed to recognise a resumable run) plus where to write.

They sit below the families and the runner, so both read them without importing each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from fairprobe.catalog import suite_names, suite_sets
from fairprobe.detectors import AttributeWords
from fairprobe.errors import ConfigError
from fairprobe.io import fingerprint
from fairprobe.models import DEFAULT_MODEL, GenerationConfig

# Options newer than the first release, with their defaults (left out of the settings when unchanged).
LATER_OPTION_DEFAULTS: dict[str, Any] = {"implicit": "auto", "top_logprobs": 20, "model_args": {}}


class RunOptions(BaseModel):
    """Everything that decides a run's samples (hashed to recognise a resumable run) plus where to write."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = DEFAULT_MODEL
    adapter: str | None = None
    suite: str = "paper"
    probes: list[str] | None = None
    data_dir: Path | None = None
    out: Path | None = None
    limit: int | None = Field(None, ge=1)
    limit_order: Literal["stratified", "first"] = "stratified"
    seed: int = 0
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    instruction: str | None = None
    words_file: Path | None = None
    probe_options: dict[str, Any] = Field(default_factory=dict)
    batch_size: int = Field(32, ge=1)
    device: str = "auto"
    dtype: str = "auto"
    base_url: str | None = None
    concurrency: int | None = Field(None, ge=1)
    implicit: Literal["auto", "exact", "topk", "off"] = "auto"
    top_logprobs: int = Field(20, ge=1)
    cache: Path | None = None
    use_cache: bool = True
    model_args: dict[str, Any] = Field(default_factory=dict)

    _words: AttributeWords | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _check_endpoint(self) -> RunOptions:
        if self.base_url is not None and not self.model.startswith("openai:"):
            raise ConfigError(f"--base-url needs an openai:MODEL model, not {self.model!r}")
        if self.implicit == "topk" and not self.model.startswith("openai:"):
            raise ConfigError(f"--implicit topk needs an openai:MODEL model; {self.model!r} gives exact probabilities")
        return self

    def attribute_words(self) -> AttributeWords:
        """The attribute word lists of this run (package default or --words FILE)."""
        if self._words is None:
            self._words = AttributeWords.from_file(self.words_file) if self.words_file else AttributeWords.default()
        return self._words

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

    def settings(self) -> dict[str, Any]:
        """Every option that changes samples (recorded in the manifest; a refusal names those that differ)."""
        obj = self.model_dump(mode="json", exclude={"out", "device", "concurrency", "cache", "use_cache"})
        obj["words"] = [list(p) for p in sorted(self.attribute_words().pairs)]
        if self.attribute_words().groups:  # the extra groups' probabilities are part of every sample
            obj["word_groups"] = {name: list(words) for name, words in self.attribute_words().groups}
        # Options added after the first release count only when changed, so older run folders still resume.
        for key, default in LATER_OPTION_DEFAULTS.items():
            if obj.get(key) == default:
                obj.pop(key)
        # Runs before stratified limits took the first N prompts: their folders resume with --limit-order first.
        if self.limit is None or self.limit_order == "first":
            obj.pop("limit_order")
        return obj

    def fingerprint(self) -> str:
        """Hash of the settings; a run folder with another fingerprint is not resumed."""
        return fingerprint(self.settings())
