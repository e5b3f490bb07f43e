"""A sampled decode's draw: every token raced, against only the tokens that can win, side by side in one process.

    python benchmarks/sampled_draw.py                       # 16 BusinessVocabulary letters of 300 sampled tokens
    python benchmarks/sampled_draw.py --rows 32 --repeats 3

A sampled row draws the token argmax over tokens of log p + race(U), one uniform U per token from the row's own
generator (models/sampling.py). Racing every token (`sampling.race_every_token`) takes two float64 logarithms of
49,152 uniforms a row a step and several (rows x 49,152) float64 temporaries; `sampling.draw` races only the tokens
that can still win. This script asks the embedded model for the same letters with the same seeds (GenderBench's
BusinessVocabulary prompts, sampled as the suite asks them) with each way in the decode loop, alternating the two
over the repeats. It prints each way's CPU seconds for the whole generation and inside the draws, and checks that
every reply is the same text.
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from fairprobe.threads import quiet_openmp

quiet_openmp()

import torch

import fairprobe.models.decode as decode
from fairprobe.families.chat import chat_prompt
from fairprobe.families.genderbench.business_vocabulary.items import items
from fairprobe.families.genderbench.resources import Resources
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.hf import HFBackend
from fairprobe.models.sampling import draw, race_every_token

MODEL = "smollm2-135m-instruct"
Draw = Callable[[torch.Tensor, list[torch.Generator], GenerationConfig], torch.Tensor]


def generate_with(
    way: Draw, backend: HFBackend, prompts: list[str], config: GenerationConfig
) -> tuple[list[str], float, float]:
    """The replies with `way` as the decode loop's draw, the CPU seconds of the generation and of its draws."""
    inside = 0.0

    def timed(logits: torch.Tensor, generators: list[torch.Generator], cfg: GenerationConfig) -> torch.Tensor:
        nonlocal inside
        start = time.process_time()
        token = way(logits, generators, cfg)
        inside += time.process_time() - start
        return token

    decode.draw = timed  # the decode loop's chooser calls decode.draw
    try:
        start = time.process_time()
        replies = backend.generate(prompts, config, None, list(range(len(prompts))))
        return [r.text for r in replies], time.process_time() - start, inside
    finally:
        decode.draw = draw


def main() -> None:
    """Generate with each way over the repeats, alternating, and compare their replies."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16, help="letters decoded together")
    parser.add_argument("--new-tokens", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    backend = load_model(MODEL, device="cpu", dtype="float32", batch_size=args.rows)
    assert isinstance(backend, HFBackend)
    prompts = [chat_prompt(item.prompts[0], None) for item in items(Resources.find())[: args.rows]]
    config = GenerationConfig(max_new_tokens=args.new_tokens, temperature=1.0, top_p=1.0, seed=0)
    backend.generate(prompts[:1], GenerationConfig(max_new_tokens=2))  # loads and packs the weights before timing
    print(f"{MODEL}, {args.rows} BusinessVocabulary letters, {args.new_tokens} new tokens, {args.threads} threads")
    print(f"load average before: {os.getloadavg()}")
    ways: dict[str, Draw] = {"every token raced": race_every_token, "sampling.draw": draw}
    totals: dict[str, list[float]] = {name: [] for name in ways}
    draws: dict[str, list[float]] = {name: [] for name in ways}
    texts: dict[str, list[str]] = {}
    for _ in range(args.repeats):
        for name, way in ways.items():
            texts[name], total, inside = generate_with(way, backend, prompts, config)
            totals[name].append(total)
            draws[name].append(inside)
            print(f"  {name:<18} {total:7.1f} CPU s, of which the draws {inside:6.1f}", flush=True)
    full, pruned = (statistics.median(totals[name]) for name in ways)
    full_draws, pruned_draws = (statistics.median(draws[name]) for name in ways)
    print(
        f"median CPU s: every token raced {full:.1f} (draws {full_draws:.1f}), draw {pruned:.1f} (draws {pruned_draws:.1f})"
    )
    print(f"draw / every token raced: whole generation {pruned / full:.3f}, the draws {pruned_draws / full_draws:.3f}")
    print(f"every reply the same text: {texts['every token raced'] == texts['sampling.draw']}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
