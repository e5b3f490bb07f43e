"""Debias Tuning speed: training steps per second and peak memory, side by side in one run.

Each configuration runs in a fresh process (so its peak memory is its own): the model is loaded,
the LoRA adapter attached, one warm-up step taken, then `--steps` timed steps on the paper's train
prompts. Peak memory is the process's peak resident set on CPU, or torch's peak allocation on CUDA.

    .venv/bin/python benchmarks/tune_speed.py --data-dir ../shared/data/debias_llms --steps 5
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import time
from pathlib import Path

CONFIGS = [
    {"label": "batch 16, L_d+L_g+L_l (paper)", "batch_size": 16, "losses": "d,g,l"},
    {"label": "batch 8, L_d+L_g+L_l", "batch_size": 8, "losses": "d,g,l"},
    {"label": "batch 16, L_g only", "batch_size": 16, "losses": "g"},
    {"label": "batch 16, rank 8", "batch_size": 16, "losses": "d,g,l", "rank": 8},
]


def measure(config: dict, args: argparse.Namespace, queue: mp.Queue) -> None:
    """Load, attach LoRA, warm up, time `args.steps` steps; put steps/s and peak memory on the queue."""
    import torch

    torch.set_num_threads(args.threads)
    from fairprobe.detectors import AttributeWords
    from fairprobe.mitigation.tuning import DebiasTrainer, TuneOptions, batch_indices, load_tuning_data
    from fairprobe.models import load_model

    options = TuneOptions(
        model=args.model,
        data_dir=args.data_dir,
        device=args.device,
        **{k: v for k, v in config.items() if k != "label"},
    )
    train = load_tuning_data(options)["train"]["predicates"]
    backend = load_model(options.model, device=options.device, dtype="auto", batch_size=options.batch_size)
    trainer = DebiasTrainer(backend, options, AttributeWords.default())
    cuda = trainer.device.type == "cuda"
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


def main() -> None:
    """Run every configuration in its own process and print a table with ratios to the first one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--data-dir", type=Path, default=None, help="folder with total_neutral_train.csv")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per configuration")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ctx = mp.get_context("spawn")
    rows = []
    for config in CONFIGS:
        queue = ctx.Queue()
        proc = ctx.Process(target=measure, args=(config, args, queue))
        proc.start()
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"configuration {config['label']!r} failed (exit {proc.exitcode})")
        rows.append(queue.get())
    base = rows[0]
    print(f"{'configuration':34s} {'steps/s':>8s} {'x paper':>8s} {'peak MiB':>9s} {'prompts/s':>9s}")
    for row, config in zip(rows, CONFIGS, strict=True):
        print(
            f"{row['label']:34s} {row['steps_per_s']:8.3f} {row['steps_per_s'] / base['steps_per_s']:8.2f} "
            f"{row['peak_mib']:9.0f} {row['steps_per_s'] * config['batch_size']:9.1f}"
        )
    print(json.dumps({"steps": args.steps, "threads": args.threads, "device": args.device, "rows": rows}))


if __name__ == "__main__":
    main()
