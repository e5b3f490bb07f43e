"""Debias Tuning speed: training steps per second and peak memory, side by side in one run, with the machine load.

Each configuration runs in a fresh process (so its peak memory is its own): the model is loaded,
the LoRA adapter attached, one warm-up step taken, then `--steps` timed steps on the paper's train
prompts. Peak memory is the process's peak resident set on CPU, or torch's peak allocation on CUDA.
Configurations: the paper's (rank 64, batch 16), the one the README measured on 2 CPU cores (rank 16,
batch 8), each with and without the KL term; the 4-bit QLoRA path is measured only where a CUDA GPU
and bitsandbytes exist (the CPU path never needs them), otherwise the output says it was not measured.

    .venv/bin/python benchmarks/tune_speed.py --data-dir ../shared/data --steps 5 --threads 1
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import time
from pathlib import Path
from typing import Any

CONFIGS: list[dict[str, Any]] = [
    {"label": "paper: rank 64, batch 16, d,g,l", "rank": 64, "batch_size": 16, "losses": "d,g,l"},
    {"label": "paper + KL (kl=4, 8 positions)", "rank": 64, "batch_size": 16, "losses": "d,g,l,kl=4"},
    {"label": "measured: rank 16, batch 8, d,g,l", "rank": 16, "batch_size": 8, "losses": "d,g,l"},
    {"label": "measured + KL (kl=4, 8 positions)", "rank": 16, "batch_size": 8, "losses": "d,g,l,kl=4"},
]
QLORA = {"label": "paper, 4-bit QLoRA on CUDA", "rank": 64, "batch_size": 16, "losses": "d,g,l", "quantize": "4bit"}


def qlora_unavailable() -> str | None:
    """Why the 4-bit QLoRA path cannot be measured here (None when it can)."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU on this machine"
    try:
        import bitsandbytes  # noqa: F401
    except ImportError:
        return "bitsandbytes is not installed"
    return None


def measure(config: dict, args: argparse.Namespace, queue: mp.Queue) -> None:
    """Load, attach LoRA, warm up, time `args.steps` steps; put steps/s and peak memory on the queue."""
    import torch

    torch.set_num_threads(args.threads)
    from fairprobe.families.paper.words import AttributeWords
    from fairprobe.mitigation.tuning import (
        DebiasTrainer,
        TuneOptions,
        batch_indices,
        load_tuning_data,
        quantize_mode,
    )
    from fairprobe.models import load_model

    device = "cuda" if config.get("quantize") == "4bit" else args.device
    fields = {k: v for k, v in config.items() if k != "label"}
    options = TuneOptions(model=args.model, data_dir=args.data_dir, device=device, **fields)
    train = load_tuning_data(options)["train"]["predicates"]
    settings = {"device": device, "dtype": "auto", "batch_size": options.batch_size}
    backend = load_model(options.model, **settings, quantize=quantize_mode(options))
    trainer = DebiasTrainer(backend, options, AttributeWords.default())
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.step([train[i] for i in batch_indices(len(train), options.batch_size, 0, 0)])
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        trainer.step([train[i] for i in batch_indices(len(train), options.batch_size, step, 0)])
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    queue.put({"label": config["label"], "steps_per_s": args.steps / elapsed, "peak_mib": peak / 2**20})


def run_config(config: dict, args: argparse.Namespace) -> dict:
    """One configuration in its own spawned process."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=measure, args=(config, args, queue))
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise SystemExit(f"configuration {config['label']!r} failed (exit {proc.exitcode})")
    return {**queue.get(), "load_after": os.getloadavg()[0]}


def main() -> None:
    """Run every configuration in its own process and print a table with ratios to the paper's setting."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder with debias_llms/total_neutral_train.csv")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per configuration")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    load_before = os.getloadavg()
    configs = list(CONFIGS)
    why_not = qlora_unavailable()
    if why_not is None:
        configs.append(QLORA)
    rows = [run_config(config, args) for config in configs]
    base = rows[0]
    print(
        f"machine: {os.cpu_count()} CPUs, load average before {load_before[0]:.2f} (1 min), {args.threads} torch thread(s)"
    )
    print(
        f"{'configuration':36s} {'steps/s':>8s} {'x paper':>8s} {'peak MiB':>9s} {'prompts/s':>9s} {'80 steps':>9s} {'load':>5s}"
    )
    for row, config in zip(rows, configs, strict=True):
        print(
            f"{row['label']:36s} {row['steps_per_s']:8.3f} {row['steps_per_s'] / base['steps_per_s']:8.2f} "
            f"{row['peak_mib']:9.0f} {row['steps_per_s'] * config['batch_size']:9.1f} "
            f"{80 / row['steps_per_s'] / 60:7.1f} m {row['load_after']:5.2f}"
        )
    if why_not is not None:
        print(f"{QLORA['label']}: not measured: {why_not} (the CPU path above does not use it)")
    print(
        json.dumps(
            {
                "steps": args.steps,
                "threads": args.threads,
                "device": args.device,
                "load_before": load_before,
                "rows": rows,
                "qlora": why_not or "measured",
            }
        )
    )


if __name__ == "__main__":
    main()
