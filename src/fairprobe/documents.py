"""The JSON documents fairprobe writes and later reads back, as pydantic models: one validation layer for them all.

A comparison's `leaderboard.json`, a sweep's `sweep.json`, a `tune --ablations` folder's `ablations.json`, an
adapter's `manifest.json`, a mitigation comparison's `compare.json` (and any comparison JSON a report reads) and
the manifest of a run folder a report shows may have been edited by hand, cut short or copied from elsewhere.
`read_document` reads one against its model: a missing, empty or non-UTF-8 file, text that is not JSON (NaN and
Infinity included, which JSON does not have), a field of the wrong type, a number that is not finite or out of
range, or an inconsistent document (a best setting that is not in the grid, a method order naming a method that
is not there) is one DataError naming the file and the field, e.g.
`malformed sweep file runs/sweep/sweep.json: sets.stsb.best.setting: not one of the sweep's settings`.
Models keep unknown keys (a newer fairprobe may add some) but check every key that fairprobe reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fairprobe.errors import DataError
from fairprobe.io import read_text
from fairprobe.redact import clip, escape_controls

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Count = Annotated[int, Field(ge=0)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
# A folder name inside the document's folder: no separator, no `..`, nothing hidden.
FolderName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")]


class Document(BaseModel):
    """A JSON document as fairprobe reads it back: every number finite, unknown keys kept."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class Metric(Document):
    """A metric value with its 95% interval (records.MetricValue as written), every number finite."""

    value: float | None
    ci95: tuple[float | None, float | None] = (None, None)
    bounds: tuple[float | None, float | None] | None = None
    note: str | None = None
    n: Count | None = None


# leaderboard.json (report/leaderboard.py)


class BoardRun(Document):
    """One model run of a comparison: its label and its folder, relative to the comparison folder."""

    model: str
    path: str = Field(min_length=1)


class BoardRow(Document):
    """One model's metrics on one set."""

    model: str
    n: Count
    metrics: dict[str, Metric]


class BoardSet(Document):
    """One set's rows, best first by `sort_by`."""

    set: str
    sort_by: str | None = None
    rows: list[BoardRow]


class PairTest(Document):
    """One paired test between two models on one set and metric."""

    set: str
    metric: str
    a: str
    b: str
    test: str
    n: Count
    difference: Metric
    p: Probability | None = None
    p_holm: Probability | None = None


class Leaderboard(Document):
    """leaderboard.json: the models' runs, per set every model's metrics, and the pairwise tests."""

    kind: Literal["leaderboard"]
    sort_by: str | None = None
    runs: list[BoardRun] = Field(min_length=1)
    sets: list[BoardSet]
    pairwise: list[PairTest] = Field(default_factory=list)


# sweep.json (mitigation/sweep.py)


class SweepSetting(Document):
    """One grid point: its set's headline metric over seeds (`gas` and `gas_per_seed` for the paper's sets; another
    family's headline under its own name)."""

    parameter: Literal["temperature", "top_p", "top_k"]
    value: float
    gas: Metric | None = None
    gas_per_seed: list[Probability] | None = None


class SweepBest(Document):
    """A set's best setting (by its headline metric) against greedy decoding."""

    setting: str
    gas: Metric | None = None
    beats_greedy: bool
    vs_greedy: Metric
    verdict: str | None = None


class SweepSet(Document):
    """One set's sweep: greedy reference, every setting, the best one."""

    n: Count
    source: str
    greedy: dict[str, Metric]
    settings: dict[str, SweepSetting] = Field(min_length=1)
    best: SweepBest

    @model_validator(mode="after")
    def _best_is_a_setting(self) -> SweepSet:
        if self.best.setting not in self.settings:
            raise ValueError(f"best setting {self.best.setting!r} is not one of the sweep's settings")
        return self


class Sweep(Document):
    """sweep.json: the grid and, per set, GAS per setting and the best setting."""

    fairprobe_version: str
    model: dict[str, Any]
    grid: dict[Literal["temperature", "top_p", "top_k"], list[float]]
    seeds: int = Field(ge=1)
    base_temperature: float
    setting_order: list[str]
    sets: dict[str, SweepSet] = Field(min_length=1)

    @model_validator(mode="after")
    def _order_names_settings(self) -> Sweep:
        for name, result in self.sets.items():
            missing = [s for s in self.setting_order if s not in result.settings]
            if missing:
                raise ValueError(f"set {name!r} has no result for setting {missing[0]!r} of setting_order")
        return self


# ablations.json (mitigation/tuning.py)


class AblationVariant(Document):
    """One ablation variant: its method name and its loss terms."""

    name: str = Field(min_length=1)
    losses: str = Field(min_length=1)


class Ablations(Document):
    """ablations.json: the variants of a `tune --ablations` folder, each in the subfolder of its name."""

    kind: Literal["debias-tuning-ablations"]
    variants: dict[FolderName, AblationVariant] = Field(min_length=1)
    order: list[FolderName] = Field(default_factory=list)

    @model_validator(mode="after")
    def _order_names_variants(self) -> Ablations:
        unknown = [slug for slug in self.order if slug not in self.variants]
        if unknown:
            raise ValueError(f"order names {unknown[0]!r}, which is not one of the variants")
        names = [v.name for v in self.variants.values()]
        if len(set(names)) < len(names):
            raise ValueError("two variants have the same name")
        return self


# An adapter folder's manifest.json (mitigation/tuning.py writes it, models/adapters.py reads it)


class BaseModelIdentity(Document):
    """The base model an adapter was trained for."""

    id: str
    gguf_sha256: Sha256 | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class DevPoint(Document):
    """One dev evaluation of a tuning run."""

    step: Count
    loss: float
    gld: Probability


class Perplexity(Document):
    """Perplexity of the neutral sentences before and after tuning."""

    before: float = Field(gt=0)
    after: float = Field(gt=0)
    relative_change: float


class AdapterManifest(Document):
    """manifest.json of a Debias Tuning adapter: base model, losses, settings, dev curve, weights' sha256."""

    kind: Literal["debias-tuning"]
    fingerprint: str = Field(min_length=1)
    base_model: BaseModelIdentity
    losses: dict[str, Annotated[float, Field(ge=0)]]
    hyperparameters: dict[str, Any]
    data: dict[str, Any]
    dev_evaluated: Count
    dev_curve: list[DevPoint] = Field(min_length=1)
    train_curve: list[dict[str, Any]]
    perplexity: Perplexity
    train_seconds: float = Field(ge=0)
    finished: str
    adapter_sha256: Sha256


# compare.json (mitigation/compare.py)


class GasTest(Document):
    """GAS against Original: the discordant prompts and the exact McNemar p."""

    original_only: Count
    method_only: Count
    p_mcnemar: Probability | None = None
    relative_change: float | None = None
    p_holm: Probability | None = None


class DifferenceTest(Document):
    """A paired bootstrap difference against Original, or a GLD/ADD that a decoding-only method cannot change."""

    difference: Metric | None = None
    p: Probability | None = None
    p_floor: bool = False
    equal: bool = False
    unchanged_by_design: str | None = None
    relative_change: float | None = None
    p_holm: Probability | None = None

    @model_validator(mode="after")
    def tested_or_unchanged(self) -> DifferenceTest:
        """A test holds its difference unless it says the method cannot change the metric."""
        if self.difference is None and self.unchanged_by_design is None:
            raise ValueError("a test needs its difference, or unchanged_by_design")
        return self


class VsOriginal(Document):
    """A method's paired tests against Original."""

    gas: GasTest | None = None
    gld: DifferenceTest | None = None
    add: DifferenceTest | None = None


class DriftTest(Document):
    """A drift measure's paired test against Original."""

    difference: Metric | float | None = None
    p: Probability | None = None
    p_holm: Probability | None = None


class MethodRow(Document):
    """One method on one set."""

    n: Count
    metrics: dict[str, Metric]
    drift: dict[str, Metric] = Field(default_factory=dict)
    vs_original: VsOriginal | None = None
    drift_vs_original: dict[str, DriftTest] = Field(default_factory=dict)
    perplexity: float | None = Field(None, gt=0)
    perplexity_relative_change: float | None = None


class CompareSet(Document):
    """One set of a mitigation comparison: every method's row."""

    n: Count
    source: str
    methods: dict[str, MethodRow]


class MethodSettings(Document):
    """What a method changes: decoding, instruction, adapter."""

    decoding: dict[str, Any]
    instruction: str | None = None
    adapter: str | None = None


class Comparison(Document):
    """compare.json: Original against each mitigation method, per set."""

    fairprobe_version: str
    model: dict[str, Any]
    methods: dict[str, MethodSettings] = Field(min_length=1)
    method_order: list[str]
    sets: dict[str, CompareSet]
    notes: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _every_set_has_every_method(self) -> Comparison:
        for method in self.method_order:
            if method not in self.methods:
                raise ValueError(f"method_order names {method!r}, which is not one of the methods")
            lacking = [name for name, result in self.sets.items() if method not in result.methods]
            if lacking:
                raise ValueError(f"set {lacking[0]!r} has no row for method {method!r}")
        return self


class OtherComparison(Document):
    """A comparison JSON of another shape (read generically): every `{"value": ...}` object in it is a Metric."""

    @model_validator(mode="before")
    @classmethod
    def _metrics_are_metrics(cls, obj: Any) -> Any:
        check_metric_leaves(obj)
        return obj


def check_metric_leaves(obj: Any, where: str = "") -> None:
    """Validate every nested `{"value": ...}` object as a Metric (ValueError naming its path)."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for key, value in items:
        path = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if isinstance(value, dict) and "value" in value:
            try:
                Metric.model_validate_json(json.dumps(value), strict=True)
            except ValidationError as exc:
                raise ValueError(f"{path}.{_error_text(exc)}") from None
        elif isinstance(value, dict | list):
            check_metric_leaves(value, path)


def comparison_model(obj: Any) -> type[Document]:
    """The model a comparison JSON is read with: fairprobe's compare.json, or any other shape generically."""
    return Comparison if isinstance(obj, dict) and "method_order" in obj else OtherComparison


# A run folder's manifest.json as a report reads it (runner.build_manifest writes it)


class RecordedOptions(Document):
    """The options a run manifest records that a report shows."""

    adapter: str | None = None
    probes: list[str] | None = None
    probe_options: dict[str, Any] = Field(default_factory=dict)


class RecordedDecoding(Document):
    """The decoding a run manifest records."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: Count = 0


class RunManifest(Document):
    """manifest.json of a run (or `score`) folder, as the report reads it."""

    options: RecordedOptions = Field(default_factory=RecordedOptions)
    decoding: RecordedDecoding = Field(default_factory=RecordedDecoding)
    instruction: str | None = None


T = TypeVar("T", bound=BaseModel)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _location(loc: tuple[Any, ...]) -> str:
    """pydantic's error location as a path, `sets.template.rows[0].n` (union branch names left out)."""
    parts: list[str] = []
    for part in loc:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif part == "[key]" or part in ("float", "int", "str", "bool", "Metric") or "[" in str(part):
            continue
        elif re.fullmatch(r"[A-Za-z0-9_-]+", str(part)):
            parts.append(f".{part}" if parts else str(part))
        else:
            parts.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(parts)


def _error_text(exc: ValidationError) -> str:
    """The first error of a validation as 'field: message (got VALUE)', the value redacted and cut."""
    first = exc.errors()[0]
    where = _location(first.get("loc", ()))
    text = (f"{where}: " if where else "") + first.get("msg", "invalid").removeprefix("Value error, ")
    value = first.get("input")
    if first.get("type") != "missing" and isinstance(value, str | int | float | bool | type(None)):
        text += f" (got {clip(json.dumps(value, ensure_ascii=False), 40)})"
    return escape_controls(text)


def parse_document(text: str, model: type[T], where: str) -> T:
    """Validate a JSON document's text against `model`; a DataError names `where` and the field."""
    try:
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise DataError(f"malformed {where}: {_error_text(exc)}") from None


def read_json_object(path: Path, what: str, non_finite: bool = False) -> tuple[dict[str, Any], str]:
    """A JSON object file and its text; a missing, empty, non-JSON or non-object file is a DataError naming it.

    NaN and Infinity are refused unless `non_finite` (a summary.json, whose every number `fairprobe check` judges).
    """
    where = f"{what} {path}"
    text = read_text(path, what)
    try:
        obj = json.loads(text, parse_constant=float if non_finite else _reject_constant)
    except json.JSONDecodeError as exc:
        raise DataError(f"malformed {where}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except ValueError as exc:
        raise DataError(f"malformed {where}: {exc}") from None
    except RecursionError:
        raise DataError(f"malformed {where}: nested too deeply") from None
    if not isinstance(obj, dict):
        raise DataError(f"malformed {where}: expected a JSON object, got {type(obj).__name__}")
    return obj, text


def read_document(path: Path, model: type[T], what: str) -> T:
    """A JSON document file validated against `model`; anything wrong is a DataError naming the file and field."""
    return parse_document(read_json_object(path, what)[1], model, f"{what} {path}")


def document_dict(document: BaseModel) -> dict[str, Any]:
    """A validated document as the plain JSON object it was read from (every key it had, no defaults added)."""
    return document.model_dump(mode="json", exclude_unset=True)
