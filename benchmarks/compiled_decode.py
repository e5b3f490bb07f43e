"""Does `torch.compile` pay for fairprobe's decode steps? The decode loop timed per step, eager and compiled, side by side.

Variants of the per-step model call that `fairprobe.models.decode.continue_decoding` makes (the prompt pass, the
first-step distribution and the scoring passes stay eager and plain in every variant):
  eager       fairprobe as it is: for SmolLM2 (a Llama) models/llama_step.py's step on packed oneDNN weights, the
              screened bfloat16 head;
  module      the model's own forward (transformers' modules) with every Linear on its packed weight, the head
              screened (fairprobe's step for models that are not Llamas);
  elementwise as module, with RMSNorm, SiLU x up and RoPE each compiled (inductor, dynamic shapes) into one kernel;
  freezing    the model's body compiled with inductor's freezing (its own weight prepacking), the screened head eager;
  plain       the body compiled without freezing (weights as inputs: aten's float32 GEMM), the screened head eager.

    python benchmarks/compiled_decode.py --variants eager,freezing --repeats 2
    python benchmarks/compiled_decode.py --variants module,eager --threads 2 --repeats 3   # the Llama step's gain

Each variant is compiled on a warm-up batch (its compile time: wall and CPU of that batch minus eager's), then the
variants alternate over the sample `--repeats` times; the decode loop's CPU seconds are summed per step it ran.
TORCHINDUCTOR_COMPILE_THREADS=1 keeps inductor's compilation in this process, so its CPU time is counted. Run it
twice with the same TORCHINDUCTOR_CACHE_DIR for the warm (on-disk cache) compile time.
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
from fairprobe.threads import quiet_openmp

quiet_openmp()

import torch
import torch._dynamo
import torch._inductor.config
import torch.fx.experimental._config
from transformers.models.llama import modeling_llama

import fairprobe.models.hf as hf_module
import fairprobe.models.reserved as reserved_module
from fairprobe.families.paper import PaperOptions
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.decode import Step, model_step
from fairprobe.models.hf import HFBackend
from fairprobe.runner import batches_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_speed import DEFAULT_DATA, MODEL, Timer, sample_sets

VARIANTS = ("eager", "module", "elementwise", "freezing", "plain")
ORIGINAL_DECODE = hf_module.continue_decoding
ORIGINAL_LAYER = reserved_module.ReservedLayer


def filled(buffer: str) -> property:
    """The filled part of a reserved layer's `buffer`, computed on reading; setting it does nothing (update writes
    the buffer itself)."""
    return property(lambda layer: getattr(layer, buffer)[..., : layer.length, :], lambda layer, value: None)


class ViewLayer(ORIGINAL_LAYER):
    """A ReservedLayer whose keys and values are views computed on reading, not stored: a compiled step then takes
    only the buffers as inputs (stored views of them are aliased inputs, which inductor's dynamic shapes refuse)."""

    keys = filled("key_buffer")  # type: ignore[assignment]
    values = filled("value_buffer")  # type: ignore[assignment]


class StepClock:
    """CPU and wall seconds of the decode loop and the steps it ran (model calls after the first token)."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0
        self.steps = self.row_steps = 0


def clocked(step: Step, clock: StepClock) -> Step:
    """`step`, counting the steps and the rows it is called with."""

    def counted(tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
        clock.steps += 1
        clock.row_steps += int(tokens.shape[0])
        return step(tokens, positions, mask, cache)

    return counted


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """LlamaRMSNorm's forward as a function (compiled into one kernel)."""
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """LlamaMLP's act_fn(gate) * up."""
    return torch.nn.functional.silu(gate) * up


@contextmanager
def elementwise_compiled(model: Any) -> Iterator[None]:
    """RMSNorm, SiLU x up and RoPE of every layer compiled while the context lasts."""
    norm = torch.compile(rms_norm, dynamic=True)
    act = torch.compile(silu_mul, dynamic=True)
    rope = torch.compile(modeling_llama.apply_rotary_pos_emb, dynamic=True)
    patched = []
    for module in model.modules():
        if isinstance(module, modeling_llama.LlamaRMSNorm):
            module.forward = lambda x, m=module: norm(x, m.weight, m.variance_epsilon)
            patched.append(module)
        elif isinstance(module, modeling_llama.LlamaMLP):
            module.forward = lambda x, m=module: m.down_proj(act(m.gate_proj(x), m.up_proj(x)))
            patched.append(module)
    original_rope = modeling_llama.apply_rotary_pos_emb
    modeling_llama.apply_rotary_pos_emb = rope
    try:
        yield
    finally:
        modeling_llama.apply_rotary_pos_emb = original_rope
        for module in patched:
            module.__dict__.pop("forward", None)


def installed(backend: HFBackend, variant: str, clock: StepClock) -> Callable[[], Iterator[None]]:
    """A context that runs `backend.generate` with the variant's decode step, timing the decode loop."""
    model = backend.model
    compiled: dict[str, Step] = {}

    def compiled_step() -> Step:
        if "step" not in compiled:
            torch._inductor.config.freezing = variant == "freezing"  # "plain": the body on aten's float32 GEMM
            torch.fx.experimental._config.use_duck_shape = False  # else the mask's length and the batch get tied
            body = torch.compile(model.get_decoder(), dynamic=True)
            head = model.get_output_embeddings()

            def step(tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Any) -> torch.Tensor:
                hidden = body(
                    input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None], cache=cache
                ).last_hidden_state
                return head(hidden)[:, -1]

            compiled["step"] = step
        return compiled["step"]

    def decode(step: Step, *args: Any, **kwargs: Any) -> torch.Tensor:
        packed = backend.packed_linears()
        chosen = step  # "eager": the step fairprobe chose
        if variant != "eager" and packed is not None:
            packed.start(greedy=True)  # every Linear packed, the head screened
            chosen = model_step(model)
        if variant in ("freezing", "plain") and packed is not None:  # the body on inductor's own packing
            for linear in packed.linears:
                if linear is not packed.head:
                    linear.__dict__.pop("forward", None)
            chosen = compiled_step()
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        try:
            return ORIGINAL_DECODE(clocked(chosen, clock), *args, **kwargs)
        finally:
            clock.cpu += time.process_time() - start_cpu
            clock.wall += time.perf_counter() - start_wall

    @contextmanager
    def context() -> Iterator[None]:
        hf_module.continue_decoding = decode
        if variant in ("freezing", "plain"):
            reserved_module.ReservedLayer = ViewLayer
        try:
            if variant == "elementwise":
                with elementwise_compiled(model):
                    yield
            else:
                yield
        finally:
            hf_module.continue_decoding = ORIGINAL_DECODE
            reserved_module.ReservedLayer = ORIGINAL_LAYER

    return context


def batches(data_dir: Path, batch: int, n: int) -> list[list[str]]:
    """`n` paper prompts as probe_speed picks them, in fairprobe's batch order: its sample of `n` when that is one
    batch a set (64 in batches of 13), else `batch` prompts from each of the five sets, as many batches as `n` takes."""
    sets = sample_sets(data_dir, n if -(-n // 5) == batch else 5 * batch)
    out = [[p.prompt for p in b] for ps in sets for b in batches_of(ps.probes, batch)]
    kept, total = [], 0
    for b in out:
        if total < n:
            kept.append(b[: n - total])
            total += len(kept[-1])
    return kept


def transformers_texts(backend: HFBackend, prompts: list[list[str]]) -> list[str]:
    """Greedy continuations of bare batched `model.generate` (50 new tokens)."""
    texts = []
    with torch.inference_mode():
        for batch in prompts:
            enc = backend.encode(batch)
            out = backend.model.generate(**enc, do_sample=False, max_new_tokens=50)
            texts += backend.tokenizer.batch_decode(out[:, enc["input_ids"].shape[1] :], skip_special_tokens=True)
    return texts


def warm_up(backend: HFBackend, variant: str, context: Callable[[], Any], batch: list[str], words: tuple) -> float:
    """Run the variant once on `batch` (its compilation, for a compiled one); CPU seconds, the compilers' included."""
    torch._dynamo.utils.counters.clear()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    with Timer() as timer, context():
        backend.generate(batch, GenerationConfig(max_new_tokens=50), [words] * len(batch))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    child_cpu = after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime
    counters = torch._dynamo.utils.counters
    stats = dict(counters["stats"]) | {k: v for k, v in counters["inductor"].items() if "cache" in k}
    print(
        f"warm-up {variant:<12} {timer.wall:8.2f} s wall {timer.cpu:8.2f} s CPU (+ {child_cpu:.2f} s in compilers)"
        f"   {stats}",
        flush=True,
    )
    return timer.cpu + child_cpu


def measure(
    backend: HFBackend, variant: str, context: Callable[[], Any], clock: StepClock, prompts: list, want: list
) -> tuple[float, float]:
    """The variant over the sample: (decode CPU ms a step, generate CPU s a prompt); prints them."""
    words = PaperOptions().continuations()
    n = sum(len(b) for b in prompts)
    before = (clock.cpu, clock.steps, clock.row_steps)
    torch._dynamo.utils.counters.clear()
    texts = []
    with Timer() as timer, context():
        for batch in prompts:
            texts += [
                c.text for c in backend.generate(batch, GenerationConfig(max_new_tokens=50), [words] * len(batch))
            ]
    cpu, steps = clock.cpu - before[0], clock.steps - before[1]
    same = sum(a == b for a, b in zip(texts, want, strict=True))
    unique = torch._dynamo.utils.counters["stats"].get("unique_graphs", 0)
    print(
        f"  {variant:<12} decode {cpu:7.2f} s CPU / {steps} steps = {cpu / steps * 1e3:6.2f} ms a step"
        f" ({(clock.row_steps - before[2]) / steps:.1f} rows)   generate {timer.cpu / n:.4f} CPU s a prompt"
        f"   identical to transformers {same}/{n}   graphs compiled {unique}   load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    return cpu / steps * 1e3, timer.cpu / n


def main() -> None:
    """Compile each variant on a warm-up batch, then alternate them over the sample; per-step times, break-even."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--variants", default="eager,freezing", help=f"first is the baseline; of {VARIANTS}")
    parser.add_argument("--batch", type=int, default=13, help="prompts a batch (13: one set's share of 64)")
    parser.add_argument("--n", type=int, default=64, help="prompts measured")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    variants = args.variants.split(",")
    if not set(variants) <= set(VARIANTS):
        sys.exit(f"error: --variants takes {', '.join(VARIANTS)}, not {args.variants}")
    torch.set_num_threads(args.threads)
    backend = load_model(MODEL, device="cpu", dtype="float32", batch_size=args.batch)
    assert isinstance(backend, HFBackend)
    prompts = batches(args.data_dir, args.batch, args.n)
    n = sum(len(b) for b in prompts)
    print(
        f"{MODEL}, {torch.get_num_threads()} thread(s), {n} prompts in batches of {args.batch}, load {os.getloadavg()}"
    )
    want = transformers_texts(backend, prompts)
    clocks = {v: StepClock() for v in variants}
    contexts = {v: installed(backend, v, clocks[v]) for v in variants}
    first = {v: warm_up(backend, v, contexts[v], prompts[0], PaperOptions().continuations()) for v in variants}
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in variants}
    for r in range(args.repeats):
        print(f"repeat {r + 1}")
        for v in variants:
            results[v].append(measure(backend, v, contexts[v], clocks[v], prompts, want))
    base = variants[0]
    step0, prompt0 = (statistics.median(x[i] for x in results[base]) for i in (0, 1))
    for v in variants:
        step, prompt = (statistics.median(x[i] for x in results[v]) for i in (0, 1))
        compile_cpu = first[v] - first[base]
        gain = prompt0 - prompt
        even = (
            "-"
            if v == base
            else "never"
            if gain <= 0
            else "at once"
            if compile_cpu <= 0
            else f"{compile_cpu / gain:,.0f} prompts"
        )
        print(
            f"{v:<12} median {step:6.2f} ms a step ({step / step0:.3f} of {base}), {prompt:.4f} CPU s a prompt"
            f" ({prompt / prompt0:.3f}); compile {compile_cpu:.0f} CPU s; pays for itself after {even}"
        )


if __name__ == "__main__":
    main()
