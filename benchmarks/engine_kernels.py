"""The three kernels that issue 31's last engine changes chose between, timed side by side in one process, each
with a check that both ways give the same numbers (SmolLM2-135M's shape: 9 query heads on 3 key heads of 64, 30
layers, a vocabulary of 49,152):

  prompt attention  one layer's attention over a prompt of L tokens: one causal SDPA pass with no mask (a row
                    alone, engine.prefill_chunk) against chunks of 512 queries, each with its mask over the keys so far
                    (as transformers prefills padded rows in chunks);
  decode scores     a decode step's scores q k^T over 30 layers, keys held as written against keys held
                    position-last (reserved.position_last), rows x positions as HiringBloomberg's and the letters'
                    pools hold them (scores of unit-normal queries and keys, of order 8);
  uniforms          a sampled step's 49,152 float64 uniforms a row from each row's generator, on one thread against
                    runs of rows on each of torch's threads (sampling.uniforms).

    python benchmarks/engine_kernels.py                      # 2 threads, median of 5
    python benchmarks/engine_kernels.py --threads 2 --repeats 7 --lengths 2857,8192
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from fairprobe.threads import quiet_openmp

quiet_openmp()

import torch

from fairprobe.models import sampling
from fairprobe.models.reserved import position_last
from fairprobe.models.sampling import generators_for

HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 9, 3, 64, 30, 49152
CHUNK = 512


def median_ms(run: Callable[[], Any], repeats: int) -> float:
    """The median wall milliseconds of `repeats` calls of `run`, after one call that warms it."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def prompt_attention(length: int, repeats: int) -> tuple[float, float, float]:
    """One layer's prompt attention at `length` tokens: (one causal pass ms, chunks ms, largest difference)."""
    gen = torch.Generator().manual_seed(length)
    q = torch.randn(1, HEADS, length, HEAD_DIM, generator=gen)
    k, v = (torch.randn(1, KV_HEADS, length, HEAD_DIM, generator=gen).repeat_interleave(3, 1) for _ in range(2))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def whole() -> torch.Tensor:
        return sdpa(q, k, v, is_causal=True)

    def chunks() -> torch.Tensor:
        out = []
        for start in range(0, length, CHUNK):
            end = min(start + CHUNK, length)
            mask = torch.ones(end - start, end, dtype=torch.bool).tril(start)
            out.append(sdpa(q[:, :, start:end], k[:, :, :end], v[:, :, :end], attn_mask=mask))
        return torch.cat(out, 2)

    difference = float((whole() - chunks()).abs().max())
    return median_ms(whole, repeats), median_ms(chunks, repeats), difference


def decode_scores(rows: int, positions: int, repeats: int) -> tuple[float, float, float]:
    """A step's scores over every layer for `rows` rows at `positions`: (keys as written ms, position-last ms,
    the largest difference between their scores: the same dot products, summed in another order)."""
    gen = torch.Generator().manual_seed(rows * positions)
    shape = (rows, KV_HEADS, positions, HEAD_DIM)
    written = [torch.randn(shape, generator=gen) for _ in range(LAYERS)]
    last = [position_last(keys, shape).copy_(keys) for keys in written]
    query = torch.randn(rows * KV_HEADS, HEADS // KV_HEADS, HEAD_DIM, generator=gen)
    bias = torch.zeros(rows * KV_HEADS, HEADS // KV_HEADS, positions)

    def scores(layers: list[torch.Tensor]) -> list[torch.Tensor]:
        flat = (keys.reshape(rows * KV_HEADS, positions, HEAD_DIM).transpose(1, 2) for keys in layers)
        return [torch.baddbmm(bias, query, keys, alpha=0.125) for keys in flat]

    difference = max(float((a - b).abs().max()) for a, b in zip(scores(written), scores(last), strict=True))
    return median_ms(lambda: scores(written), repeats), median_ms(lambda: scores(last), repeats), difference


def uniforms(rows: int, repeats: int) -> tuple[float, float, bool]:
    """A step's uniforms for `rows` rows: (one thread ms, torch's threads ms, whether they are the same)."""
    threads = torch.get_num_threads()

    def drawn(on: int) -> torch.Tensor:
        torch.set_num_threads(on)
        try:
            return sampling.uniforms(generators_for(range(rows), torch.device("cpu")), VOCAB)
        finally:
            torch.set_num_threads(threads)

    same = torch.equal(drawn(1), drawn(threads))
    return median_ms(lambda: drawn(1), repeats), median_ms(lambda: drawn(threads), repeats), same


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls of each way (default 5)")
    parser.add_argument("--lengths", default="1100,2000,2857,4096,8192", help="prompt lengths, comma-separated")
    parser.add_argument("--pools", default="55x250,30x200,7x2900", help="decode pools, rows x positions")
    parser.add_argument("--rows", default="30,55", help="sampled rows of the uniforms")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {os.getloadavg()[0]:.2f}")
    with torch.inference_mode():
        for length in (int(n) for n in args.lengths.split(",")):
            whole, chunked, difference = prompt_attention(length, args.repeats)
            print(
                f"prompt attention, {length} tokens: one causal pass {whole:.1f} ms, chunks of {CHUNK} "
                f"{chunked:.1f} ms, ratio {whole / chunked:.3f}, largest difference {difference:.1e}"
            )
        for pool in args.pools.split(","):
            rows, positions = (int(n) for n in pool.split("x"))
            written, last, difference = decode_scores(rows, positions, args.repeats)
            print(
                f"decode scores, {rows} rows x {positions} positions: keys as written {written:.2f} ms, "
                f"position-last {last:.2f} ms, ratio {last / written:.3f}, largest difference {difference:.1e}"
            )
        for rows in (int(n) for n in args.rows.split(",")):
            one, every, same = uniforms(rows, args.repeats)
            print(
                f"uniforms, {rows} rows: one thread {one:.2f} ms, {args.threads} threads {every:.2f} ms, "
                f"ratio {every / one:.3f}, the same {same}"
            )


if __name__ == "__main__":
    main()
