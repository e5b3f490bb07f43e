"""`fairprobe compare`: Original / Hyperparameter / Instruction / Debias Tuning (+ ablations), paired against Original.

Every method is a run of the paper suite with other options (decoding, instruction prefix, adapter)
into OUT/runs/METHOD, so an interrupted comparison resumes. Against Original, on the same prompts:
an exact McNemar test on the per-prompt GAS indicators and paired bootstrap intervals of the GLD and
ADD differences. Adapters also get the perplexity of the sets' sentences as full neutral statements
("My friend is a nurse."), so the table shows what the fix costs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from fairprobe import __version__
from fairprobe.errors import ConfigError
from fairprobe.families.paper import FAMILY as PAPER
from fairprobe.families.paper import INSTRUCTION, PaperOptions
from fairprobe.families.paper.metrics import add_per_prompt, gas_indicator, gld_per_prompt
from fairprobe.formatting import format_p, markdown_table
from fairprobe.io import atomic_write_json, atomic_write_text, parse_pairs
from fairprobe.mitigation.drift import LABELS as DRIFT_LABELS
from fairprobe.mitigation.drift import (
    MEASURES,
    drift_summary,
    drift_tests,
    scorer_of,
    set_drift,
    within_original_ci,
)
from fairprobe.mitigation.perplexity import perplexity
from fairprobe.mitigation.sweep import check_grid, format_value, run_variant
from fairprobe.mitigation.tuning import read_ablations
from fairprobe.models import GenerationConfig, ModelBackend
from fairprobe.models.adapters import check_finished
from fairprobe.plan import RunPlan
from fairprobe.progress import Labelled, Progress, SilentProgress
from fairprobe.records import ProbeSet, Sample
from fairprobe.runner import load_backend, load_sets, write_report
from fairprobe.statistics.pairwise import bootstrap_test, holm
from fairprobe.statistics.stats import exact_mcnemar

DEFAULT_HYPER = "temperature=0.3"
TABLE_METRICS = ("gas", "gld", "add", "log_add")


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


def sentence_of(prompt: str) -> str:
    """A paper prompt 'My friend is a nurse, and' as the full neutral sentence 'My friend is a nurse.'."""
    return prompt.removesuffix(", and").rstrip(" ,") + "."


def _probs(samples: list[Sample]) -> np.ndarray:
    return np.stack([np.stack([np.asarray(s.p_female), np.asarray(s.p_male)], axis=-1) for s in samples])  # type: ignore[attr-defined]


# Why a decoding-only method's GLD and ADD are not tested: they read the next-word distribution right after the
# prompt, which temperature, top-p and top-k do not change (any difference is float noise of batching).
UNCHANGED_BY_DESIGN = "unchanged by design: decoding settings do not change next-word probabilities"


def decoding_only(method: RunPlan, base: RunPlan) -> bool:
    """True when a method differs from Original only in its decoding settings."""
    keep = {"generation", "out"}
    return method.options.model_dump(exclude=keep) == base.options.model_dump(exclude=keep)


def paired_stats(
    original: Sequence[Sample], method: Sequence[Sample], implicit_unchanged: bool = False
) -> dict[str, Any]:
    """Exact McNemar on GAS indicators and paired bootstrap tests of GLD/ADD (method - original); with
    `implicit_unchanged` (a decoding-only method) GLD and ADD are not tested but marked unchanged by design."""
    original, method = list(original), list(method)  # a run's records are read from disk: once, not per pass
    a, b = gas_indicator(original), gas_indicator(method)
    fixed = int(((a == 1) & (b == 0)).sum())
    broken = int(((a == 0) & (b == 1)).sum())
    out: dict[str, Any] = {
        "gas": {
            "original_only": fixed,
            "method_only": broken,
            "p_mcnemar": exact_mcnemar(fixed, broken),
            "relative_change": None if not a.mean() else float(b.mean() / a.mean() - 1),
        }
    }
    if all(getattr(s, "p_female", None) is not None for s in original + method):
        po, pm = _probs(original), _probs(method)
        for name, fn in (("gld", gld_per_prompt), ("add", add_per_prompt)):
            if implicit_unchanged:
                out[name] = {"unchanged_by_design": UNCHANGED_BY_DESIGN}
                continue
            x, y = fn(po[..., 0], po[..., 1]), fn(pm[..., 0], pm[..., 1])
            known = np.isfinite(x) & np.isfinite(y)  # a server's top-k bounds a prompt's value: no paired number
            if not known.any():
                continue
            x, y = x[known], y[known]
            out[name] = {
                **bootstrap_test(x, y).to_json(),
                "relative_change": None if not x.mean() else float(y.mean() / x.mean() - 1),
            }
    return out


def set_perplexity(backend: ModelBackend, ps: ProbeSet, batch_size: int) -> float | None:
    """Perplexity of the set's prompts as full sentences, where the backend can score text."""
    scorer = scorer_of(backend)
    if scorer is None:
        return None
    return perplexity(scorer, [sentence_of(p.prompt) for p in ps.probes], batch_size)


def method_plans(
    base: RunPlan, out: Path, hyper: str | None, instruction: str, adapters: dict[str, str]
) -> dict[str, RunPlan]:
    """Each method's run plan, into out/runs/METHOD: Original, Hyperparameter, Instruction, then one per adapter."""
    updates: dict[str, dict[str, Any]] = {"Original": {}}
    if hyper:
        updates["Hyperparameter"] = {"generation": parse_hyper(hyper, base.generation)}
    if instruction:
        updates["Instruction"] = {"probe_options": {**base.options.probe_options, "paper.instruction": instruction}}
    for name, path in adapters.items():
        if name in updates:
            raise ConfigError(f"method name {name!r} is taken: name ablations otherwise")
        check_finished(Path(path))  # before any method runs: an unfinished tuning run fails in one line
        updates[name] = {"adapter": path}
    slug = {name: name.lower().replace(" ", "-").replace("/", "-") for name in updates}
    return {name: base.derive(out=out / "runs" / slug[name], **update) for name, update in updates.items()}


def run_methods(
    sets: list[ProbeSet], methods: dict[str, RunPlan], backend: ModelBackend, progress: Progress
) -> tuple[dict[str, dict[str, list[Sample]]], dict[str, dict[str, float | None]], dict[str, dict[str, Any]]]:
    """Run every method (resumable run folders under out/runs); samples, perplexities and drift per method and set."""
    scorer = scorer_of(backend)
    samples: dict[str, dict[str, list[Sample]]] = {}
    ppl: dict[str, dict[str, float | None]] = {}
    drift: dict[str, dict[str, Any]] = {}
    batch_size = methods["Original"].options.batch_size
    for name, method in methods.items():
        model = backend
        if method.model.adapter:
            progress.note(f"loading {method.model.name} + adapter {method.model.adapter}")
            model = load_backend(method)
        samples[name] = run_variant(model, method, Labelled(progress, name))
        if name == "Original" or method.model.adapter:
            ppl[name] = {ps.name: set_perplexity(model, ps, batch_size) for ps in sets}
        progress.note(f"drift of {name}: continuations scored by the frozen base model")
        drift[name] = {ps.name: set_drift(scorer, samples[name][ps.name], batch_size) for ps in sets}
    return samples, ppl, drift


def compare(
    plan: RunPlan,
    out: Path,
    adapter: str | None = None,
    ablations: dict[str, str] | None = None,
    hyper: str | None = DEFAULT_HYPER,
    instruction: str = INSTRUCTION,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run each method on the plan's probe sets, write compare.json, compare.md and report.html to `out`; return the
    JSON.

    `plan` is the Original run's (greedy, no instruction, no adapter: the paper's setting);
    `adapter` the Debias Tuning adapter; `ablations` more adapters by name; `hyper` a decoding setting.
    """
    progress = progress or SilentProgress()
    given = plan.options.probe_options
    unguided = {k: v for k, v in given.items() if k not in ("instruction", "paper.instruction")}
    base = plan.derive(adapter=None, probe_options=unguided)
    adapters = {**({"Debias Tuning": adapter} if adapter else {}), **(ablations or {})}
    methods = method_plans(base, out, hyper, instruction, adapters)  # every method checked before any data or model
    sets = load_sets(plan)
    if backend is None:
        progress.note(f"loading model {plan.model.name}")
        backend = load_backend(base)
    samples, ppl, drift = run_methods(sets, methods, backend, progress)
    result: dict[str, Any] = {
        "fairprobe_version": __version__,
        "model": backend.identity(),
        "methods": {
            name: {
                "decoding": m.generation.model_dump(),
                "instruction": cast(PaperOptions, m.sets[0].options).instruction,
                "adapter": m.model.adapter,
            }
            for name, m in methods.items()
        },
        "method_order": list(methods),
        "sets": {ps.name: set_result(ps, methods, samples, (ppl, drift)) for ps in sets},
        "notes": COMPARE_NOTES,
    }
    add_holm(result)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "compare.json", result)
    atomic_write_text(out / "compare.md", compare_markdown(result))
    write_report(out)
    return result


COMPARE_NOTES = [
    "p_mcnemar: exact McNemar test on per-prompt GAS indicators against Original (same prompts).",
    "GLD/ADD differences: method - Original, mean over prompts with a paired bootstrap 95% CI and p-value.",
    "Perplexity: the sets' prompts as full neutral sentences ('My friend ... .'); "
    "instruction and decoding do not change the model, so only Original and adapters have one.",
    "Drift (mitigation/drift.py): fluency NLL = mean token NLL of the continuations under the frozen base model; "
    "on-subject = share of continuations that mention the friend, the speaker or the predicate's content; "
    "distinct-2 = unique/all word bigrams per continuation; garbage = empty or garbage continuations. "
    "Rates: Wilson CI, exact McNemar vs Original; means: bootstrap CI, paired bootstrap p vs Original.",
    "p_holm: Holm-corrected over the methods compared with Original, per set and measure.",
]


def set_result(
    ps: ProbeSet,
    methods: dict[str, RunPlan],
    samples: dict[str, dict[str, list[Sample]]],
    measured: tuple[dict[str, dict[str, float | None]], dict[str, dict[str, Any]]],
) -> dict[str, Any]:
    """One set's rows: each method's metrics, drift, perplexity and paired tests against Original."""
    ppl, drift = measured
    rows: dict[str, Any] = {}
    original = samples["Original"][ps.name]
    for name in methods:
        own = samples[name][ps.name]
        bound = methods[name].bound(ps.name)
        metrics = PAPER.summarize(ps, own, methods[name].context, bound.options).metrics
        row: dict[str, Any] = {
            "n": len(own),
            "metrics": {k: metrics[k].model_dump(mode="json") for k in TABLE_METRICS if k in metrics},
            "drift": drift_summary(drift[name][ps.name]),
        }
        if name != "Original":
            row["vs_original"] = paired_stats(original, own, decoding_only(methods[name], methods["Original"]))
            row["drift_vs_original"] = drift_tests(drift["Original"][ps.name], drift[name][ps.name])
            row["drift_within_original_ci"] = within_original_ci(rows["Original"]["drift"], row["drift"])
        if name in ppl:
            row["perplexity"] = ppl[name][ps.name]
            if name != "Original" and ppl["Original"][ps.name]:
                row["perplexity_relative_change"] = ppl[name][ps.name] / ppl["Original"][ps.name] - 1
        rows[name] = row
    drawn = {"drawn": ps.drawn.describe()} if ps.drawn else {}
    return {"n": len(ps.probes), "source": ps.source, **drawn, "methods": rows}


def _test_slots(row: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every test of a method's row by measure name, each a dict holding its raw p-value."""
    vs = row.get("vs_original", {})
    slots = {"gas": vs["gas"]} if "gas" in vs else {}
    slots.update({k: vs[k] for k in ("gld", "add") if _raw_p(vs.get(k, {})) is not None})  # untested: no slot
    slots.update({f"drift.{k}": v for k, v in row.get("drift_vs_original", {}).items()})
    return slots


def _raw_p(test: dict[str, Any]) -> float | None:
    for key in ("p_mcnemar", "p"):
        if test.get(key) is not None:
            return float(test[key])
    return None


def add_holm(result: dict[str, Any]) -> None:
    """Add `p_holm` to every test: Holm over the methods compared with Original, per set and measure."""
    for res in result["sets"].values():
        rows = [row for name, row in res["methods"].items() if name != "Original"]
        measures = {m for row in rows for m in _test_slots(row)}
        for measure in sorted(measures):
            tests = [_test_slots(row).get(measure) for row in rows]
            present = [t for t in tests if t is not None]
            for test, adjusted in zip(present, holm([_raw_p(t) for t in present]), strict=True):
                test["p_holm"] = adjusted


def _p(value: float | None) -> str:
    return format_p(value)


def _difference_cell(test: dict[str, Any] | None, digits: int = 3) -> str:
    """A GLD/ADD difference against Original, 'unchanged by design' (decoding-only methods) or 'equal'."""
    if not test:
        return ""
    if test.get("unchanged_by_design"):
        return "unchanged by design"
    if test.get("equal"):
        return "equal"
    return format_value(test.get("difference"), digits)


def _gas_cell(vs: dict[str, Any]) -> str:
    gas = vs.get("gas")
    if not gas or gas.get("relative_change") is None:
        return ""
    return f"{gas['relative_change']:+.0%} (p {_p(gas['p_mcnemar'])}, Holm {_p(gas.get('p_holm'))})"


def _drift_cell(row: dict[str, Any], name: str) -> str:
    """'0.91 [0.87, 0.94]' and, against Original, the difference with its Holm-corrected p."""
    m = row.get("drift", {}).get(name)
    if not m or m.get("value") is None:
        return "n/a"
    text = format_value(m)
    test = row.get("drift_vs_original", {}).get(name)
    if test:
        diff = test["difference"]["value"] if isinstance(test["difference"], dict) else test["difference"]
        p = test.get("p_holm", test.get("p"))
        text += (
            f" ({diff:+.2f}, p {_p(p)})"
            if diff is not None and p is not None
            else " (equal)"
            if test.get("equal")
            else ""
        )
    return text


def compare_rows(result: dict[str, Any]) -> list[list[str]]:
    """The table cells (set, method, GAS, GLD, ADD, log ADD, tests, perplexity, drift) as strings."""
    rows = []
    for set_name, res in result["sets"].items():
        for method in result["method_order"]:
            row = res["methods"][method]
            m = row["metrics"]
            vs = row.get("vs_original", {})
            ppl = row.get("perplexity")
            ppl_rel = row.get("perplexity_relative_change")
            rows.append(
                [
                    set_name,
                    method,
                    format_value(m.get("gas")),
                    format_value(m.get("gld")),
                    format_value(m.get("add"), 4),
                    "n/a" if not m.get("log_add", {}).get("value") else f"{m['log_add']['value']:.2f}",
                    _gas_cell(vs),
                    _difference_cell(vs.get("gld")),
                    _difference_cell(vs.get("add"), 4),
                    "" if ppl is None else f"{ppl:.2f}" + ("" if ppl_rel is None else f" ({ppl_rel:+.1%})"),
                    *(_drift_cell(row, name) for name in MEASURES),
                ]
            )
    return rows


COLUMNS = [
    "set",
    "method",
    "GAS",
    "GLD",
    "ADD",
    "log ADD",
    "GAS vs Original",
    "GLD diff",
    "ADD diff",
    "perplexity",
    *(DRIFT_LABELS[name] for name in MEASURES),
]


# The console's columns: the paper's metrics and their tests against Original (compare.md has every column).
HEADLINE_COLUMNS = 9


def compare_markdown(result: dict[str, Any], headline: bool = False) -> str:
    """compare.json as a Markdown table like the paper's Tables 1-3, with the paired tests, drift and notes
    (`headline`: only the bias columns and no notes, as the console prints it)."""
    rows = compare_rows(result)
    if headline:
        table = markdown_table(COLUMNS[:HEADLINE_COLUMNS], [r[:HEADLINE_COLUMNS] for r in rows])
        return "\n".join([*table, "", "Perplexity, drift, every test and the notes: compare.md beside compare.json."])
    lines = ["# Mitigation comparison", "", *markdown_table(COLUMNS, rows)]
    lines += ["", *[f"- {note}" for note in result["notes"]], ""]
    return "\n".join(lines)


def compare_adapters(items: list[str] | None, folder: Path | None) -> dict[str, str]:
    """Method name -> adapter folder from repeated --ablation NAME=PATH and a `tune --ablations` folder."""
    out = read_ablations(folder) if folder is not None else {}
    for name, path in parse_pairs(items, "--ablation", "NAME=PATH", last=True).items():
        if name in out:
            raise ConfigError(f"method name {name!r} is taken by {folder}: name the --ablation otherwise")
        out[name] = path
    return out
