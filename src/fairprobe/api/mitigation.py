"""The mitigation commands behind both front ends (`compare`, `sweep`, `tune`), one implementation each: the Python
API and the CLI give their arguments here (the API's names), and print or read back what comes back."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

from fairprobe.api.arguments import names, path_or_none
from fairprobe.api.runs import request
from fairprobe.errors import ConfigError
from fairprobe.progress import Progress

# The run settings compare and sweep leave at the paper's (greedy, no instruction, the default words).
RUN_DEFAULTS: dict[str, Any] = {
    "suite": "paper",
    "out": None,
    "temperature": 0.0,
    "top_p": 1.0,
    "top_k": 0,
    "instruction": None,
    "words": None,
    "options": None,
    "adapter": None,
    "cache": None,
    "use_cache": True,
}


class Adapter:
    """A finished Debias Tuning adapter folder: its manifest (losses, data, dev curve, perplexity) and README."""

    def __init__(self, folder: Path) -> None:
        from fairprobe.api.results import read_object

        self.folder = Path(folder)
        self.manifest: dict[str, Any] = read_object(self.folder / "manifest.json", "adapter manifest")

    @property
    def readme(self) -> Path:
        """README.md: what was trained, on what, with which losses, and the measured effect."""
        return self.folder / "README.md"

    def __repr__(self) -> str:
        return f"Adapter(folder={str(self.folder)!r}, losses={self.manifest.get('losses')})"


def adapter_folder(adapter: str | Path | Adapter) -> str:
    """An adapter's folder, from the folder or from the `Adapter` that `tune()` returned."""
    return str(adapter.folder if isinstance(adapter, Adapter) else adapter)


def compare_methods(
    model: str,
    settings: dict[str, Any],
    methods: dict[str, Any],
    out: str | Path,
    progress: Progress,
) -> tuple[dict[str, Any], str | None]:
    """Original against each fix on the sets of `settings["suite"]` (a suite or a mix, "paper,fairness"; the paper's
    Table 1 sets when it is the paper's and no `probes` are named); compare.json's object, and the sweep's verdict
    when `methods["sweep"]` (a sweep.json) gave the Hyperparameter setting and it does not beat greedy decoding.

    `methods`: `adapter`, `ablations` (name: folder), `models` (name: a model spec, or a model in memory: a fairprobe
    backend or a (model, tokenizer) pair), `hyper` (None or "" skips it), `sweep`, `instruction` ("paper": each
    family's own; None or "" skips it)."""
    from fairprobe.api.memory import in_memory_variant
    from fairprobe.mitigation.compare import compare
    from fairprobe.mitigation.sweep import best_sweep_setting

    hyper, note = methods.get("hyper"), None
    if methods.get("sweep") is not None:
        hyper, note = best_sweep_setting(Path(methods["sweep"]))
    adapter = methods.get("adapter")
    suite, options = suite_request(model, settings)
    models = methods.get("models") or {}
    with ExitStack() as stack:
        loaded = {
            name: stack.enter_context(in_memory_variant(name, given, options.batch_size))
            for name, given in models.items()
            if not isinstance(given, str)
        }
        result = compare(
            options,
            Path(out),
            adapter=None if adapter is None else adapter_folder(adapter),
            ablations={k: adapter_folder(v) for k, v in (methods.get("ablations") or {}).items()},
            hyper=hyper or None,
            instruction=methods.get("instruction") or None,
            progress=progress,
            suites=suite,
            models={name: given for name, given in models.items() if isinstance(given, str)},
            loaded=loaded,
        )
    return result, note


# What compare and sweep run when neither the suite nor `probes` names other sets: the paper's Table 1 sets.
TABLE_1_SETS = "stsb,snli"


def suite_request(model: str, settings: dict[str, Any]) -> tuple[str, Any]:
    """The suites a comparison or sweep names (a mix: "paper,fairness") and the request of its first suite, the
    paper's Table 1 sets when only the paper's suite is named without `probes`."""
    suite = settings.get("suite") or "paper"
    probes = settings.get("probes")
    if probes is None and suite == "paper":
        probes = TABLE_1_SETS
    first = suite.split(",")[0].strip()
    return suite, request(model, {**RUN_DEFAULTS, **settings, "suite": first, "probes": probes})


def sweep_grid(
    model: str,
    settings: dict[str, Any],
    grid: dict[str, list[float]],
    sampling: tuple[int, float],
    out: str | Path,
    progress: Progress,
) -> dict[str, Any]:
    """The decoding sweep over `grid` (`sampling`: seeds per setting, the temperature while top-p or top-k vary) on
    the sets of `settings["suite"]`; sweep.json's object."""
    from fairprobe.mitigation.sweep import sweep

    seeds, base_temperature = sampling
    suite, options = suite_request(model, {**settings, "seed": 0})
    return sweep(
        options, Path(out), grid=grid, seeds=seeds, base_temperature=base_temperature, progress=progress, suites=suite
    )


def tune_adapters(given: dict[str, Any], ablations: bool, progress: Progress) -> dict[str, dict[str, Any]]:
    """Train Debias Tuning (with `ablations`: the paper's Table 3 variants and the KL variant); each adapter's
    manifest by its losses (by name for the ablations). `given`: the API's `tune` arguments."""
    from fairprobe.mitigation.tune_data import LLAMA_TARGETS, TuneOptions
    from fairprobe.mitigation.tuning import tune, tune_ablations

    if ablations and given.get("losses", "d,g,l") != "d,g,l":
        raise ConfigError(
            "ablations=True trains its own loss variants (the paper's Table 3 and the KL term): drop losses"
        )
    options = TuneOptions(
        **{k: v for k, v in given.items() if k in TuneOptions.model_fields and k != "data_dir" and v is not None},
        train_file=path_or_none(given.get("train"), "train"),
        dev_file=path_or_none(given.get("dev"), "dev"),
        data_dir=path_or_none(given.get("data_dir"), "data_dir"),
        words_file=path_or_none(given.get("words"), "words"),
        target_modules=names(given.get("targets"), "targets") or list(LLAMA_TARGETS),
    )
    if ablations:
        return tune_ablations(options, progress=progress)
    return {options.losses: tune(options, progress=progress)}
