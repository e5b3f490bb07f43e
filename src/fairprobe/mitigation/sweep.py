"""`fairprobe sweep`: the paper's decoding-hyperparameter grids (Section 5.1), GAS per setting over several seeds.

Each setting changes one knob: temperature alone, or top-p / top-k at a base temperature (sampling
on). GAS is averaged over seeds with a bootstrap interval over prompts; the best setting is the one
with the lowest GAS, as the paper reports it, and it is compared with greedy decoding (the paper's
default) on the same prompts: when no setting has a lower GAS than greedy, the sweep says so. GLD and ADD are read once, from the greedy reference
run: they come from the next-word distribution after the prompt, which no sampling setting changes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from fairprobe import __version__
from fairprobe.documents import Sweep, read_document
from fairprobe.errors import ConfigError
from fairprobe.families.paper import FAMILY as PAPER
from fairprobe.families.paper.metrics import gas_indicator
from fairprobe.formatting import format_metric, markdown_table
from fairprobe.io import atomic_write_json, atomic_write_text
from fairprobe.mitigation.drift import drift_summary, drift_tests, format_drift, scorer_of, set_drift
from fairprobe.models import GenerationConfig, ModelBackend
from fairprobe.plan import RunPlan
from fairprobe.progress import Labelled, Progress, SilentProgress
from fairprobe.records import MetricValue, ProbeSet, Sample
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
    "GLD and ADD are computed once (greedy reference run): they read the next-word distribution right "
    "after the prompt, which sampling settings (temperature, top-p, top-k) do not change."
)


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


def run_variant(backend: ModelBackend, plan: RunPlan, progress: Progress) -> dict[str, list[Sample]]:
    """Run every set with one fixed backend into the plan's out (a resumable run folder); samples per set."""
    assert plan.options.out is not None
    return run_with_samples(plan, backend, progress)[1]


def sweep(
    plan: RunPlan,
    out: Path,
    grid: dict[str, list[float]] | None = None,
    seeds: int = 3,
    base_temperature: float = 1.0,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the grid on the paper suite and write sweep.json and sweep.md to `out`; returns the JSON object."""
    grid = check_sweep(grid, seeds, base_temperature)
    progress = progress or SilentProgress()
    sets = load_sets(plan)
    if backend is None:
        progress.note(f"loading model {plan.model.name}")
        backend = load_backend(plan)
    greedy = greedy_plan(plan, out)
    reference = run_variant(backend, greedy, Labelled(progress, "greedy"))
    settings: list[tuple[str, str, float]] = [(f"{k}={v:g}", k, v) for k, values in grid.items() for v in values]
    indicators, first_seed = run_settings((plan, out, base_temperature), (backend, sets), settings, seeds, progress)
    result: dict[str, Any] = {
        "fairprobe_version": __version__,
        "model": backend.identity(),
        "grid": grid,
        "seeds": seeds,
        "base_temperature": base_temperature,
        "note": DISTRIBUTION_NOTE,
        "drift_note": DRIFT_NOTE,
        "setting_order": [label for label, _, _ in settings],
        "sets": {},
    }
    scorer = scorer_of(backend)
    batch_size = plan.options.batch_size
    for ps in sets:
        ref_metrics = PAPER.summarize(ps, reference[ps.name], greedy.context, greedy.bound(ps.name).options).metrics
        greedy_drift = set_drift(scorer, reference[ps.name], batch_size)
        rows = set_rows(settings, indicators[ps.name], gas_indicator(reference[ps.name]), ref_metrics["gas"])
        for label in rows["settings"]:
            values = set_drift(scorer, first_seed[ps.name][label], batch_size)
            rows["settings"][label]["drift"] = drift_summary(values)
            rows["settings"][label]["drift_vs_greedy"] = drift_tests(greedy_drift, values)
        result["sets"][ps.name] = {
            "n": len(ps.probes),
            "source": ps.source,
            "greedy": {
                k: ref_metrics[k].model_dump(mode="json") for k in ("gas", "gld", "add", "log_add") if k in ref_metrics
            },
            "greedy_drift": drift_summary(greedy_drift),
            **rows,
        }
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "sweep.json", result)
    atomic_write_text(out / "sweep.md", sweep_markdown(result))
    return result


def greedy_plan(plan: RunPlan, out: Path) -> RunPlan:
    """The greedy reference run (the paper's default decoding) into out/greedy."""
    generation = plan.generation.model_copy(update={"temperature": 0.0, "top_p": 1.0, "top_k": 0})
    return plan.derive(out=out / "greedy", generation=generation)


def run_settings(
    where: tuple[RunPlan, Path, float],
    model: tuple[ModelBackend, list[ProbeSet]],
    settings: list[tuple[str, str, float]],
    seeds: int,
    progress: Progress,
) -> tuple[dict[str, dict[str, list[np.ndarray]]], dict[str, dict[str, list[Sample]]]]:
    """Run every grid point and seed (resumable folders); GAS indicators per set and setting, and seed 0's samples.

    Sampled settings need no next-word probabilities (their GAS is what the sweep compares): `paper.implicit=off`.
    """
    plan, out, base_temperature = where
    backend, sets = model
    sampled_options = {**plan.options.probe_options, "paper.implicit": "off"}
    indicators: dict[str, dict[str, list[np.ndarray]]] = {ps.name: {} for ps in sets}
    first_seed: dict[str, dict[str, list[Sample]]] = {ps.name: {} for ps in sets}
    for label, knob, value in settings:
        config = setting_config(knob, value, plan.generation, base_temperature)
        for seed in range(seeds):
            folder = out / "settings" / label / f"seed{seed}"
            variant = plan.derive(out=folder, generation=config, seed=seed, probe_options=sampled_options)
            per_set = run_variant(backend, variant, Labelled(progress, f"{label} seed {seed}"))
            for name, samples in per_set.items():
                indicators[name].setdefault(label, []).append(gas_indicator(samples))
                first_seed[name].setdefault(label, samples)
    return indicators, first_seed


def set_rows(
    settings: list[tuple[str, str, float]],
    indicators: dict[str, list[np.ndarray]],
    greedy_indicators: np.ndarray,
    greedy_gas: MetricValue,
) -> dict[str, Any]:
    """One set's rows (GAS over seeds per setting) and its best setting, compared with greedy on the same prompts."""
    rows = {}
    for label, knob, value in settings:
        per_seed = np.stack(indicators[label])
        rows[label] = {
            "parameter": knob,
            "value": value,
            "gas": bootstrap_statistic(per_seed.mean(axis=0)).model_dump(mode="json"),
            "gas_per_seed": [float(x) for x in per_seed.mean(axis=1)],
        }
    best = min(rows, key=lambda k: (rows[k]["gas"]["value"], k))
    vs_greedy = paired_difference(greedy_indicators, np.stack(indicators[best]).mean(axis=0))
    best_row = {
        "setting": best,
        "gas": rows[best]["gas"],
        "beats_greedy": rows[best]["gas"]["value"] < (greedy_gas.value or 0.0),
        "vs_greedy": vs_greedy.model_dump(mode="json"),
        "verdict": baseline_verdict(best, MetricValue(**rows[best]["gas"]), greedy_gas, vs_greedy),
    }
    return {"settings": rows, "best": best_row}


def baseline_verdict(best: str, gas: MetricValue, greedy: MetricValue, difference: MetricValue) -> str:
    """Whether the grid's lowest-GAS setting beats greedy decoding (the paper's default), with the paired interval."""
    ci = f"{format_metric(gas)} against greedy's {format_metric(greedy)}"
    if gas.value is None or greedy.value is None or gas.value >= greedy.value:
        return f"No setting beats greedy decoding: the lowest of the grid, {best}, has GAS {ci}; keep greedy."
    diff = format_metric(difference)
    hi = difference.ci95[1]
    if hi is not None and hi < 0:
        return f"{best} lowers GAS below greedy decoding: {ci} (paired difference {diff})."
    return f"{best} has the lowest GAS, {ci}, but the paired difference {diff} includes 0: no clear gain over greedy."


def format_value(m: dict[str, Any] | None, digits: int = 3) -> str:
    """A metric as stored in sweep.json / compare.json, formatted like the console table."""
    return format_metric(MetricValue(**m) if m else None, digits)


def sweep_markdown(result: dict[str, Any]) -> str:
    """The sweep as Markdown: one table per probe set, best setting marked."""
    lines = [f"# Decoding sweep ({result['seeds']} seeds per setting)", "", result["note"], ""]
    if "drift_note" in result:
        lines += [result["drift_note"], ""]
    for name, res in result["sets"].items():
        g = res["greedy"]
        lines += [
            f"## {name} (n = {res['n']})",
            "",
            f"Greedy reference: GAS {format_value(g.get('gas'))}, GLD {format_value(g.get('gld'))}, ADD {format_value(g.get('add'), 4)}.",
            "",
        ]
        rows = [["greedy (reference)", format_value(g.get("gas")), "", format_drift(res.get("greedy_drift", {}))]]
        for label in result["setting_order"]:
            row = res["settings"][label]
            mark = " **(lowest)**" if label == res["best"]["setting"] else ""
            seeds = ", ".join(f"{x:.3f}" for x in row["gas_per_seed"])
            drift = format_drift(row.get("drift", {}), row.get("drift_vs_greedy"))
            rows.append([f"{label}{mark}", format_value(row["gas"]), seeds, drift])
        lines += markdown_table(["setting", "GAS [95% CI]", "GAS per seed", "drift (seed 0; vs greedy)"], rows)
        lines += ["", res["best"].get("verdict") or f"Lowest GAS: **{res['best']['setting']}**.", ""]
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
