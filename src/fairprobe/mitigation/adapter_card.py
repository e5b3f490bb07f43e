"""The README.md of a Debias Tuning adapter folder: what was trained, on what, with which losses, and the measured
effect, written from its manifest.json (it replaces peft's boilerplate card, which names a local cache path as the
base model)."""

from __future__ import annotations

from typing import Any

from fairprobe.formatting import markdown_table
from fairprobe.mitigation.drift import format_drift

LOSS_NAMES = {
    "d": "L_d (ADD between female and male next-word probabilities)",
    "g": "L_g (total gendered next-word probability)",
    "l": "L_l (GLD: the female-male gap, normalised)",
    "kl": "KL to the base model's next-token distribution on the continuation",
}


def base_model_line(base: dict[str, Any]) -> str:
    """The base model as a reader can find it: its id, the weights' sha256 or revision, never a local path."""
    named_by = [f"{k} `{base[k]}`" for k in ("gguf_sha256", "revision", "weights_sha256") if base.get(k)]
    return f"`{base.get('id')}`" + (f" ({', '.join(named_by)})" if named_by else "")


def front_matter(manifest: dict[str, Any]) -> list[str]:
    """The Hugging Face model-card header: peft, the base model's hub id where it has one, tags."""
    base = manifest["base_model"]
    model_id = str(base.get("id", ""))
    hub = base.get("hub_id") or (
        model_id.removeprefix("hf:") if model_id.startswith("hf:") and base.get("revision") else None
    )
    lines = ["---", "library_name: peft"]
    if hub:
        lines.append(f"base_model: {hub}")
    return [*lines, "tags: [fairprobe, debias-tuning, lora, gender-bias]", "---", ""]


def effect_rows(manifest: dict[str, Any]) -> list[list[str]]:
    """Before and after on the dev predicates: dev loss, GLD, gendered next-word mass, perplexity."""
    first, last = manifest["dev_curve"][0], manifest["dev_curve"][-1]
    ppl = manifest["perplexity"]
    rows = [
        ["dev loss (the training objective)", f"{first['loss']:.4f}", f"{last['loss']:.4f}"],
        ["dev GLD", f"{first['gld']:.3f}", f"{last['gld']:.3f}"],
    ]
    if "gendered_mass" in first:
        rows.append(["gendered next-word mass", f"{first['gendered_mass']:.4f}", f"{last['gendered_mass']:.4f}"])
    rows.append(["perplexity of neutral sentences", f"{ppl['before']:.2f}", f"{ppl['after']:.2f}"])
    return rows


def adapter_readme(manifest: dict[str, Any]) -> str:
    """README.md for an adapter folder from its finished manifest."""
    hyper, data = manifest["hyperparameters"], manifest["data"]
    losses = [f"- {LOSS_NAMES.get(k, k)}, weight {w:g}" for k, w in manifest["losses"].items() if w]
    lines = [
        *front_matter(manifest),
        "# Debias Tuning adapter (fairprobe)",
        "",
        f"A LoRA adapter for {base_model_line(manifest['base_model'])}, trained by `fairprobe tune` "
        f"(fairprobe {manifest.get('fairprobe_version')}) to even out the next-word probabilities of female and "
        "male words after gender-neutral prompts (Dong et al. 2024, Debias Tuning).",
        "",
        "## What was trained",
        "",
        f"LoRA rank {hyper['rank']}, alpha {hyper['alpha']:g}, dropout {hyper['dropout']:g} on "
        f"{', '.join(hyper['target_modules'])}; {hyper['steps']} steps of batch {hyper['batch_size']}, "
        f"{hyper['optimizer']} at learning rate {hyper['lr']:g} ({hyper['schedule']} schedule, "
        f"{hyper['warmup_steps']} warm-up), seed {hyper['seed']}, quantization {hyper['quantization']}; "
        f"{manifest['train_seconds']:.0f} s of training.",
        "",
        "## On what",
        "",
        *[
            f"- {split}: {v['n']} predicates as `My friend {{predicate}}, and` prompts, from {v['source']} "
            f"(sha256 `{v['sha256'][:16]}...`)"
            for split, v in data.items()
        ],
        f"- attribute words: {manifest['attribute_words']['pairs']} female/male pairs "
        f"({manifest['attribute_words']['source']})",
        "",
        "## Losses (summed over the batch)",
        "",
        *losses,
        "",
        f"## Measured effect (on {manifest['dev_evaluated']} dev predicates)",
        "",
        *markdown_table(["measure", "before", "after"], effect_rows(manifest)),
    ]
    last = manifest["dev_curve"][-1]
    if "drift" in last:
        lines += ["", f"Drift after tuning: {format_drift(last['drift'], last.get('drift_vs_start'))}."]
    lines += [
        "",
        "A lower GLD is a fix only where the model still does its job: measure it on your probe sets with "
        f"`fairprobe compare --adapter {{this folder}}` (paired tests, drift). Adapter weights sha256: "
        f"`{manifest['adapter_sha256']}`; every number above is in `manifest.json`.",
        "",
    ]
    return "\n".join(lines)
