"""How far float32 next-word probabilities move with the arithmetic around them, on the paper sample: the yardstick
for the local engine's exactness bar (every probability within 1e-6 of the model's own forward pass).

For the 60 words the paper's metrics read after each prompt (words of several tokens included), the largest
absolute difference of probability between:
  1. the model's own forward pass (`score_continuations`: the prompt pass, then the words' tokens after its cache)
     on each prompt alone, unpadded, and on the same prompt in its set's left-padded batch: what batching moves
     in `transformers` itself;
  2. the same, with batches of `--batch-size` prompts formed across the sets instead of one set at a time;
  3. fairprobe's engine (`HFBackend.generate` with the words scored, as the runner asks) and the model's own
     forward on the same batch;
  4. the model's own forward on the same batch with every Linear on oneDNN's packed weights (the kernels of
     fairprobe's decode steps) and on the plain ones (MKL): what moving the prompt and scoring passes to the faster
     kernel would change. Their CPU seconds are printed too.

    python benchmarks/probability_noise.py                 # the 64-prompt sample, 2 threads
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from fairprobe.threads import quiet_openmp

quiet_openmp()

import numpy as np
import torch

from fairprobe.families.paper import PaperOptions
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.continuations import ContinuationTable, score_continuations
from fairprobe.models.hf import HFBackend

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_speed import DEFAULT_DATA, MODEL, sample_sets

Forward = Callable[[list[str]], torch.Tensor]


def forward_probs(backend: HFBackend, table: ContinuationTable) -> Forward:
    """The model's own forward: probabilities (B, C) of the table's words after each of a batch's prompts."""

    def probs(prompts: list[str]) -> torch.Tensor:
        enc = backend.encode(prompts)
        with torch.inference_mode():
            scored = score_continuations(backend.model, enc["input_ids"], enc["attention_mask"], table)
        return scored.log_probs.double().exp()

    return probs


def engine_probs(backend: HFBackend, words: tuple[str, ...]) -> Forward:
    """fairprobe's engine: the words' probabilities as a greedy generation call that scores them returns them."""

    def probs(prompts: list[str]) -> torch.Tensor:
        done = backend.generate(prompts, GenerationConfig(), [words] * len(prompts))
        log_probs = np.stack([c.scores.logprobs() for c in done])  # type: ignore[union-attr]
        return torch.from_numpy(log_probs).double().exp()

    return probs


def on_packed(backend: HFBackend, forward: Forward) -> Forward:
    """`forward` with every Linear of the model on its oneDNN-packed weight: the backend's own packed weights,
    packed once and shared with its decode steps."""
    packed = backend.packed_linears()
    if packed is None:
        raise SystemExit("error: oneDNN's packed weights need a float32 model on a CPU with oneDNN")

    def probs(prompts: list[str]) -> torch.Tensor:
        with packed.decoding():
            packed.start(greedy=False)
            return forward(prompts)

    return probs


def over(batches: list[list[str]], forward: Forward) -> tuple[torch.Tensor, float]:
    """Every batch's probabilities, stacked in order, and the CPU seconds they took."""
    start = time.process_time()
    stacked = torch.cat([forward(batch) for batch in batches])
    return stacked, time.process_time() - start


def apart(a: torch.Tensor, b: torch.Tensor) -> str:
    """The largest absolute difference of two tables of probabilities, and where it is relative to the bar."""
    gap = float((a - b).abs().max())
    return f"{gap:.2e} ({gap / 1e-6:.2f} x the 1e-6 bar)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder with the paper's data files")
    parser.add_argument("--n", type=int, default=64, help="prompts, spread over the five paper sets")
    parser.add_argument("--batch-size", type=int, default=32, help="prompts a batch formed across the sets")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    os.environ["FAIRPROBE_THREADS"] = str(args.threads)
    backend = load_model(MODEL, device="cpu", dtype="float32", batch_size=args.batch_size)
    assert isinstance(backend, HFBackend)
    words = PaperOptions().continuations()
    table = backend.table(words)
    sets = [[p.prompt for p in ps.probes] for ps in sample_sets(args.data_dir, args.n)]
    prompts = [p for batch in sets for p in batch]
    pooled = [prompts[i : i + args.batch_size] for i in range(0, len(prompts), args.batch_size)]
    plain = forward_probs(backend, table)
    over(sets[:1], on_packed(backend, plain))  # packs the weights before anything is timed
    alone, _ = over([[p] for p in prompts], plain)
    per_set, plain_cpu = over(sets, plain)
    across, _ = over(pooled, plain)
    engine, _ = over(sets, engine_probs(backend, words))
    packed, packed_cpu = over(sets, on_packed(backend, plain))
    print(f"{len(prompts)} prompts x {len(words)} words, torch threads {torch.get_num_threads()}; largest |dp|:")
    print(f"1. model's forward, alone vs in its set's batch:          {apart(alone, per_set)}")
    print(f"2. model's forward, alone vs in batches across sets:      {apart(alone, across)}")
    print(f"   model's forward, set's batch vs batch across sets:     {apart(per_set, across)}")
    print(f"3. fairprobe's engine vs model's forward, same batch:     {apart(engine, per_set)}")
    print(f"   fairprobe's engine vs model's forward, alone:          {apart(engine, alone)}")
    print(f"4. model's forward on oneDNN vs plain, same batch:        {apart(packed, per_set)}")
    print(f"   model's forward on oneDNN vs plain alone:              {apart(packed, alone)}")
    print(f"   CPU seconds of the sets' batches: plain {plain_cpu:.2f}, oneDNN {packed_cpu:.2f}")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
