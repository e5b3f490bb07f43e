"""`fairprobe compare`: Original / Hyperparameter / Instruction / Debias Tuning (+ ablations), paired against Original.

Every method is a run of the paper suite with other options (decoding, instruction prefix, adapter)
into OUT/runs/METHOD, so an interrupted comparison resumes. Against Original, on the same prompts:
an exact McNemar test on the per-prompt GAS indicators and paired bootstrap intervals of the GLD and
ADD differences. Adapters also get the perplexity of the sets' sentences as full neutral statements
("My friend is a nurse."), so the table shows what the fix costs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from fairprobe import __version__
from fairprobe.errors import ConfigError
from fairprobe.families.paper import FAMILY as PAPER
from fairprobe.families.paper import INSTRUCTION
from fairprobe.families.paper.metrics import add_per_prompt, gld_per_prompt
from fairprobe.io import atomic_write_json, atomic_write_text
from fairprobe.metrics.stats import exact_mcnemar, paired_bootstrap_difference
from fairprobe.mitigation.perplexity import perplexity
from fairprobe.mitigation.sweep import check_grid, format_value, gendered, run_variant
from fairprobe.models import GenerationConfig, ModelBackend
from fairprobe.models.cached import CachedBackend
from fairprobe.models.hf import HFBackend
from fairprobe.progress import Labelled, Progress, SilentProgress
from fairprobe.records import ProbeSet, Sample
from fairprobe.runner import RunOptions, load_backend, load_sets, write_report

DEFAULT_HYPER = "temperature=0.3"
TABLE_METRICS = ("gas", "gld", "add", "log_add")


def parse_hyper(text: str, base: GenerationConfig) -> GenerationConfig:
    """'temperature=0.7,top_p=0.9' -> a sampling config; values are checked like the sweep grid."""
    values: dict[str, list[float]] = {}
    for item in (t.strip() for t in text.split(",") if t.strip()):
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        try:
            values[key] = [float(value)]
        except ValueError:
            raise ConfigError(
                f"hyperparameter setting {item!r} must be NAME=NUMBER (temperature, top_p, top_k)"
            ) from None
        if not sep:
            raise ConfigError(f"hyperparameter setting {item!r} must be NAME=NUMBER (temperature, top_p, top_k)")
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


def paired_stats(original: list[Sample], method: list[Sample]) -> dict[str, Any]:
    """Exact McNemar on GAS indicators and paired bootstrap differences of GLD/ADD (method - original)."""
    a, b = gendered(original), gendered(method)
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
            x, y = fn(po[..., 0], po[..., 1]), fn(pm[..., 0], pm[..., 1])
            out[name] = {
                "difference": paired_bootstrap_difference(x, y).model_dump(mode="json"),
                "relative_change": None if not x.mean() else float(y.mean() / x.mean() - 1),
            }
    return out


def set_perplexity(backend: ModelBackend, ps: ProbeSet, batch_size: int) -> float | None:
    """Perplexity of the set's prompts as full sentences, where the backend exposes its weights."""
    if isinstance(backend, CachedBackend):
        backend = backend.inner
    if not isinstance(backend, HFBackend):
        return None
    return perplexity(backend.model, backend.tokenizer, [sentence_of(p.prompt) for p in ps.probes], batch_size)


def compare(
    options: RunOptions,
    out: Path,
    adapter: str | None = None,
    ablations: dict[str, str] | None = None,
    hyper: str | None = DEFAULT_HYPER,
    instruction: str = INSTRUCTION,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run each method on options' probe sets, write compare.json, compare.md and report.html to `out`; return the JSON.

    `options` is the Original run (greedy, no instruction, no adapter: the paper's setting);
    `adapter` the Debias Tuning adapter; `ablations` more adapters by name; `hyper` a decoding setting.
    """
    progress = progress or SilentProgress()
    suite = PAPER
    sets = load_sets(options)
    base = options.model_copy(update={"adapter": None, "instruction": None})
    methods: dict[str, RunOptions] = {"Original": base}
    if hyper:
        methods["Hyperparameter"] = base.model_copy(update={"generation": parse_hyper(hyper, base.generation)})
    if instruction:
        methods["Instruction"] = base.model_copy(update={"instruction": instruction})
    adapters = {**({"Debias Tuning": adapter} if adapter else {}), **(ablations or {})}
    for name, path in adapters.items():
        if name in methods:
            raise ConfigError(f"method name {name!r} is taken: name ablations otherwise")
        methods[name] = base.model_copy(update={"adapter": path})
    if backend is None:
        progress.note(f"loading model {options.model}")
        backend = load_backend(options.model_copy(update={"adapter": None}))
    samples: dict[str, dict[str, list[Sample]]] = {}
    ppl: dict[str, dict[str, float | None]] = {}
    for name, method in methods.items():
        slug = name.lower().replace(" ", "-")
        method = method.model_copy(update={"out": out / "runs" / slug})
        model = backend
        if method.adapter:
            progress.note(f"loading {options.model} + adapter {method.adapter}")
            model = load_backend(options, adapter=method.adapter)
        samples[name] = run_variant(model, suite, sets, method, Labelled(progress, name))
        if name == "Original" or method.adapter:
            ppl[name] = {ps.name: set_perplexity(model, ps, options.batch_size) for ps in sets}
    result: dict[str, Any] = {
        "fairprobe_version": __version__,
        "model": backend.identity(),
        "methods": {
            name: {
                "decoding": m.generation.model_dump(),
                "instruction": m.instruction,
                "adapter": m.adapter,
            }
            for name, m in methods.items()
        },
        "method_order": list(methods),
        "sets": {},
        "notes": [
            "p_mcnemar: exact McNemar test on per-prompt GAS indicators against Original (same prompts).",
            "GLD/ADD differences: method - Original, mean over prompts with a paired bootstrap 95% CI.",
            "Perplexity: the sets' prompts as full neutral sentences ('My friend ... .'); "
            "instruction and decoding do not change the model, so only Original and adapters have one.",
        ],
    }
    for ps in sets:
        rows: dict[str, Any] = {}
        original = samples["Original"][ps.name]
        for name in methods:
            own = samples[name][ps.name]
            metrics = suite.summarize(ps, own, methods[name]).metrics
            row: dict[str, Any] = {
                "n": len(own),
                "metrics": {k: metrics[k].model_dump(mode="json") for k in TABLE_METRICS if k in metrics},
            }
            if name != "Original":
                row["vs_original"] = paired_stats(original, own)
            if name in ppl:
                row["perplexity"] = ppl[name][ps.name]
                if name != "Original" and ppl["Original"][ps.name]:
                    row["perplexity_relative_change"] = ppl[name][ps.name] / ppl["Original"][ps.name] - 1
            rows[name] = row
        result["sets"][ps.name] = {"n": len(ps.probes), "source": ps.source, "methods": rows}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "compare.json", result)
    atomic_write_text(out / "compare.md", compare_markdown(result))
    write_report(out)
    return result


def _p(value: float | None) -> str:
    if value is None:
        return ""
    return "<0.001" if value < 1e-3 else f"{value:.3f}"


def compare_rows(result: dict[str, Any]) -> list[list[str]]:
    """The table cells (set, method, GAS, GLD, ADD, log ADD, p, GLD diff, ADD diff, perplexity) as strings."""
    rows = []
    for set_name, res in result["sets"].items():
        for method in result["method_order"]:
            row = res["methods"][method]
            m = row["metrics"]
            vs = row.get("vs_original", {})
            gas_vs = vs.get("gas", {})
            rel = gas_vs.get("relative_change")
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
                    "" if not gas_vs else f"{rel:+.0%} (p {_p(gas_vs['p_mcnemar'])})" if rel is not None else "",
                    format_value(vs.get("gld", {}).get("difference")) if "gld" in vs else "",
                    format_value(vs.get("add", {}).get("difference"), 4) if "add" in vs else "",
                    "" if ppl is None else f"{ppl:.2f}" + ("" if ppl_rel is None else f" ({ppl_rel:+.1%})"),
                ]
            )
    return rows


COLUMNS = ["set", "method", "GAS", "GLD", "ADD", "log ADD", "GAS vs Original", "GLD diff", "ADD diff", "perplexity"]


def compare_markdown(result: dict[str, Any]) -> str:
    """compare.json as a Markdown table like the paper's Tables 1-3, with the paired tests and notes."""
    lines = ["# Mitigation comparison", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cells) + " |" for cells in compare_rows(result)]
    lines += ["", *[f"- {note}" for note in result["notes"]], ""]
    return "\n".join(lines)
