"""Speed and memory of fairprobe's paper suite, measured side by side in one process.

Three ways to probe the same prompts with the same model (greedy, 50 new tokens):
  (a) the paper's released way: one prompt at a time, `generate(..., output_scores=True,
      output_hidden_states=True, return_dict_in_generate=True)`, next-word probabilities read from the first step's scores;
  (b) bare batched `model.generate` (left padding, fairprobe's batches) with no metric work;
  (c) fairprobe's full pipeline: `fairprobe.runner.run_set` with the paper suite (generation, exact next-word
      probabilities of every attribute word and every extra group's word read from the same call, detection) and
      the set's metrics.

    python benchmarks/probe_speed.py                       # (a), (b), (c) on a sample of the five paper sets
    python benchmarks/probe_speed.py --full                # (c) on all 1,241 prompts: share of the peak, memory
    python benchmarks/probe_speed.py --busy                # (c) on 40 template prompts, idle vs one competing process
    python benchmarks/probe_speed.py --model hf:FOLDER --device cuda --dtype bfloat16   # (a), (b), (c) on a GPU

(a) is slow, so it runs on `--paper-n` prompts and is compared per prompt. Timings on a shared machine are noisy:
(b) and (c) alternate `--repeats` times and the ratios use the median of each.

The machine's limit is measured in the same process with the same threads: the best rate of a float32 2048 x 2048
matrix product, by torch's own kernel or oneDNN's on a packed weight, whichever is faster on the CPU (before and after
the runs); on a GPU, of an 8192 x 8192 product in the model's dtype (there the CPU-time shares are not given: the
host's CPU time is not the device's work). Each way's achieved rate counts the model's useful work, the same for all
three: 2 x (parameters outside the embedding) per token processed (each prompt's real tokens and each generated token
up to its end of sequence) plus 2 x (the LM head's parameters) per next-token distribution (one per generated token).
Attention's own products, padding, finished rows and fairprobe's scoring passes are not counted, so the shares are
lower bounds of what the CPU did.
"""

# ruff: noqa: E402  (the OpenMP wait policy is chosen before torch is imported)

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from fairprobe.threads import quiet_openmp

quiet_openmp()  # as importing fairprobe does (torch must not load before it: imports below it on purpose)

import torch

from fairprobe.asking import Lookahead
from fairprobe.families import load_probe_set
from fairprobe.families.paper import PaperOptions
from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.engine import PackedLinears, packed_product
from fairprobe.models.hf import HFBackend
from fairprobe.plan import RunPlan
from fairprobe.progress import Progress, SilentProgress, WorkClock
from fairprobe.records import ProbeSet
from fairprobe.runner import RunOptions, batches_of, run, run_set
from fairprobe.threads import usable_cpus

MODEL = "smollm2-135m-instruct"
PAPER_SETS = ["template", "llm-gen-1", "llm-gen-2", "stsb", "snli"]
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "debias_llms"


class Timer:
    """Wall-clock and process CPU seconds of a block (CPU time is less disturbed by other jobs on the machine)."""

    def __enter__(self) -> Timer:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall, self.cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def sample_sets(data_dir: Path, n: int) -> list[ProbeSet]:
    """About n prompts spread evenly over each of the five paper sets (every k-th prompt, fixed)."""
    names = PAPER_SETS
    out = []
    for i, name in enumerate(names):
        ps = load_probe_set(name, data_dir=data_dir)
        take = n // len(names) + (1 if i < n % len(names) else 0)
        step = max(1, len(ps.probes) // max(take, 1))
        out.append(ps.model_copy(update={"probes": ps.probes[::step][:take]}))
    return out


def cpu_description() -> str:
    """The CPU as Linux names it, with its family and model numbers (hosts of one machine kind differ: the ratios
    of (b), on MKL's float32 products, and (c), on oneDNN's, move with the CPU generation) and torch's vector ISA."""
    fields: dict[str, str] = {}
    cpuinfo = Path("/proc/cpuinfo")
    for line in cpuinfo.read_text().splitlines() if cpuinfo.exists() else []:
        key, _, value = line.partition(":")
        if not key.strip():
            break  # the first processor's block ends at its blank line
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name", "unknown CPU")
    return (
        f"{name} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}), "
        f"{os.cpu_count()} CPUs, torch ISA {torch.backends.cpu.get_cpu_capability()}"
    )


def matmul_peak(model: torch.nn.Module, seconds: float = 2.0) -> tuple[float, float | None, str]:
    """Matrix products on the model's device in its dtype (torch's threads as set now): the best GFLOP/s of one, on
    CPU the GFLOP a CPU-second of that kernel's products (the rate the ways' CPU times are set against; None on a
    GPU), and each kernel's best. Float32 2048 x 2048 on CPU, 8192 x 8192 on a GPU.

    On CPU two kernels are timed, `seconds` each: torch's own product (MKL) and oneDNN's on a packed weight (what
    fairprobe's decode steps run). They differ by CPU: on an AMD Zen 5, MKL runs its AVX2 code (the same rate when
    told to stop at AVX2) and oneDNN its AVX-512 code at twice the rate, so the machine's peak is the faster one's."""
    param = next(model.parameters())
    on_gpu = param.device.type == "cuda"
    size = 8192 if on_gpu else 2048
    a, b = (torch.randn(size, size, dtype=param.dtype, device=param.device) for _ in range(2))
    kernels: dict[str, Callable[[], object]] = {"torch": lambda: a @ b}
    if PackedLinears.usable(model):
        packed = torch.ops.mkldnn._reorder_linear_weight(b.t().contiguous(), None)
        kernels["oneDNN packed"] = lambda: packed_product(a, packed, None)
    rates = {name: product_rate(kernel, 2 * size**3, seconds, on_gpu) for name, kernel in kernels.items()}
    best = max(rates, key=lambda name: rates[name][0])
    each = ", ".join(f"{name} {rate[0]:.1f}" for name, rate in rates.items())
    return rates[best][0], rates[best][1], f"{best} ({each})"


def product_rate(kernel: Callable[[], object], flop: int, seconds: float, on_gpu: bool) -> tuple[float, float | None]:
    """`kernel` run for `seconds`: the best GFLOP/s of one call, and on CPU the GFLOP a CPU-second of them all."""
    best, count, end, cpu = 0.0, 0, time.perf_counter() + seconds, time.process_time()
    while time.perf_counter() < end:
        start = time.perf_counter()
        kernel()
        if on_gpu:
            torch.cuda.synchronize()
        best, count = max(best, flop / (time.perf_counter() - start) / 1e9), count + 1
    return best, None if on_gpu else flop * count / (time.process_time() - cpu) / 1e9


def useful_gflop(backend: HFBackend, prompt_tokens: int, generated: int) -> float:
    """The model's useful work in GFLOP (see the module's docstring)."""
    model = backend.model
    embedding = model.get_input_embeddings().weight.numel()
    head = model.get_output_embeddings().weight.numel()
    body = sum(p.numel() for p in model.parameters()) - embedding - (0 if head == embedding else head)
    return (2 * body * (prompt_tokens + generated) + 2 * head * generated) / 1e9


def tokens_of(enc: dict[str, torch.Tensor], new: torch.Tensor, eos: int) -> tuple[int, int]:
    """Real prompt tokens and generated tokens up to (and with) each row's first end of sequence."""
    ended = (new == eos).long().cumsum(-1)
    return int(enc["attention_mask"].sum()), int(((ended == 0) | ((ended == 1) & (new == eos))).sum())


def paper_way(backend: HFBackend, prompts: list[str], words: tuple[str, ...]) -> Timer:
    """Seconds for (a): one prompt at a time with every score and hidden state kept, as the released code does."""
    model, tok = backend.model, backend.tokenizer
    table = backend.table(words)
    kept = []
    with Timer() as timer, torch.inference_mode():
        for prompt in prompts:
            inputs = tok(prompt, return_tensors="pt")
            out = model.generate(
                inputs.input_ids,
                attention_mask=inputs.attention_mask,
                do_sample=False,
                max_new_tokens=50,
                return_dict_in_generate=True,
                output_scores=True,
                output_hidden_states=True,
            )
            tok.decode(out.sequences[0], skip_special_tokens=True)
            kept.append(out.scores[0].softmax(-1)[0, table.first])
    return timer


def bare_generate(backend: HFBackend, sets: list[ProbeSet], batch_size: int) -> tuple[Timer, list[str], float]:
    """Seconds for (b): plain left-padded batched greedy generation over fairprobe's batches, no metric work;
    its texts and the useful GFLOP of the work."""
    model, tok = backend.model, backend.tokenizer
    texts: list[str] = []
    prompt_tokens = generated = 0
    with Timer() as timer, torch.inference_mode():
        for ps in sets:
            for batch in batches_of(ps.probes, batch_size):
                enc = tok([p.prompt for p in batch], return_tensors="pt", padding=True)
                out = model.generate(**enc, do_sample=False, max_new_tokens=50)
                new = out[:, enc.input_ids.shape[1] :]
                texts += tok.batch_decode(new, skip_special_tokens=True)
                counted = tokens_of(enc, new, int(model.generation_config.eos_token_id))
                prompt_tokens, generated = prompt_tokens + counted[0], generated + counted[1]
    return timer, texts, useful_gflop(backend, prompt_tokens, generated)


def paper_plan(batch_size: int, model: str = MODEL) -> RunPlan:
    """The run plan of the five paper sets on `model` (the embedded one unless named), greedy (the runner's
    default decoding)."""
    return RunPlan.build(
        RunOptions(model=model, probes=PAPER_SETS, batch_size=batch_size, generation=GenerationConfig())
    )


def run_paper_set(
    backend: HFBackend,
    ps: ProbeSet,
    plan: RunPlan,
    progress: Progress | None = None,
    ahead: Lookahead | None = None,
) -> list[str]:
    """One paper set through the runner's per-set loop (generation, probabilities, detection) and its metrics,
    with the run's lookahead when given; the continuations in the order (b) asks them (the runner's batches)."""
    bound = plan.bound(ps.name)
    samples = run_set(backend, bound, ps, plan, progress=progress, ahead=ahead)
    bound.family.summarize(ps, list(samples), plan.context, bound.options)
    by_id = {s.id: s.continuation for s in samples}  # type: ignore[attr-defined]
    return [by_id[p.id] for batch in batches_of(ps.probes, plan.options.batch_size) for p in batch]


def fairprobe_way(
    backend: HFBackend, sets: list[ProbeSet], plan: RunPlan, progress: Progress | None = None
) -> tuple[Timer, list[str]]:
    """Seconds for (c): the runner's per-set loop plus the set metrics, over every set, with the lookahead a run
    has (a batch's generations asked together with those of the batches after it); the continuations."""
    texts: list[str] = []
    ahead = Lookahead.for_run(backend, plan, sets, None)
    with Timer() as timer:
        for ps in sets:
            texts += run_paper_set(backend, ps, plan, progress, ahead)
    return timer, texts


def print_rates(rows: list[tuple[str, float, float]], gflop: float, peak: float, per_cpu: float | None) -> None:
    """Seconds a prompt and the achieved rate as a share of the peak: by wall time (what a user waits; other jobs
    on the machine lower it) and on CPU by CPU time (GFLOP a CPU-second against the matrix product's)."""
    print(f"{'way':<58} {'wall s/prompt':>13} {'CPU s/prompt':>13} {'GFLOP/s':>8} {'of peak':>8} {'by CPU':>7}")
    for label, wall, cpu in rows:
        rate = gflop / wall
        by_cpu = "-" if per_cpu is None else f"{gflop / cpu / per_cpu:.1%}"
        print(f"{label:<58} {wall:13.4f} {cpu:13.4f} {rate:8.1f} {rate / peak:8.1%} {by_cpu:>7}")


def compare(args: argparse.Namespace) -> None:
    """(a), (b) and (c) on the same sample, (b) and (c) alternating."""
    backend = load_model(args.model, device=args.device, dtype=args.dtype, batch_size=args.batch_size)
    assert isinstance(backend, HFBackend)
    sets = sample_sets(args.data_dir, args.n)
    n = sum(len(ps.probes) for ps in sets)
    plan = paper_plan(args.batch_size, args.model)
    words = PaperOptions().continuations()
    print(
        f"model {args.model} on {args.device} in {args.dtype}, torch threads {torch.get_num_threads()}, "
        f"batch size {args.batch_size}"
    )
    print(f"CPU: {cpu_description()}")
    print(f"sample: {n} prompts ({', '.join(f'{ps.name} {len(ps.probes)}' for ps in sets)})")
    paper_prompts = [p.prompt for ps in sets for p in ps.probes][:: max(1, n // args.paper_n)][: args.paper_n]

    bare_generate(backend, sets[:1], args.batch_size)  # warm-up
    fairprobe_way(backend, sets[:1], plan)
    peak, per_cpu, kernels = matmul_peak(backend.model)
    per_second = "" if per_cpu is None else f", {per_cpu:.1f} GFLOP a CPU-second"
    print(f"{args.dtype} matmul peak on {args.device}: {peak:.1f} GFLOP/s{per_second}, by {kernels}", flush=True)
    runs_b, runs_c = [], []
    for r in range(args.repeats):
        tb, texts_b, gflop = bare_generate(backend, sets, args.batch_size)
        tc, texts_c = fairprobe_way(backend, sets, plan)
        runs_b.append(tb)
        runs_c.append(tc)
        print(
            f"repeat {r + 1}: (b) {tb.wall:7.2f} s wall {tb.cpu:7.2f} s CPU   (c) {tc.wall:7.2f} s wall {tc.cpu:7.2f} s CPU"
            f"   (c)/(b) wall {tc.wall / tb.wall:.3f} CPU {tc.cpu / tb.cpu:.3f}",
            flush=True,
        )
    same = sum(a == b for a, b in zip(texts_b, texts_c, strict=True))
    print(f"continuations of (b) and (c) identical: {same}/{n}", flush=True)
    ta = paper_way(backend, paper_prompts, words)
    again = matmul_peak(backend.model)
    print(f"{args.dtype} matmul peak again: {again[0]:.1f} GFLOP/s, by {again[2]}")
    peak, per_cpu = max(peak, again[0]), None if per_cpu is None or again[1] is None else max(per_cpu, again[1])
    k = len(paper_prompts)
    b_wall, b_cpu = statistics.median(t.wall for t in runs_b), statistics.median(t.cpu for t in runs_b)
    c_wall, c_cpu = statistics.median(t.wall for t in runs_c), statistics.median(t.cpu for t in runs_c)
    print(f"\nuseful work: {gflop / n:.2f} GFLOP a prompt; peak {peak:.1f} GFLOP/s; load average {os.getloadavg()}")
    rows = [
        (f"(a) paper: one prompt at a time (on {k} prompts)", ta.wall / k, ta.cpu / k),
        (f"(b) bare batched generate (median of {args.repeats})", b_wall / n, b_cpu / n),
        (f"(c) fairprobe run_set + metrics (median of {args.repeats})", c_wall / n, c_cpu / n),
    ]
    print_rates(rows, gflop / n, peak, per_cpu)
    print()
    print(
        f"(a)/(c) per prompt: wall {ta.wall / k / (c_wall / n):6.2f}x   CPU {ta.cpu / k / (c_cpu / n):6.2f}x   (target >= 10x)"
    )
    print(f"(c)/(b):            wall {c_wall / b_wall:6.3f}    CPU {c_cpu / b_cpu:6.3f}     (target <= 0.5)")
    print(f"peak RSS: {peak_rss_gb():.2f} GB")
    if args.device.startswith("cuda"):
        print(f"peak GPU memory allocated: {torch.cuda.max_memory_allocated() / 1e9:.2f} GB")


class TokenTally(SilentProgress):
    """Progress that shows nothing and keeps every set's clock: the prompt tokens read and new tokens made that the
    runner counts from the backend's completions (setwork.SetWatch), summed over the sets."""

    def __init__(self) -> None:
        self.clocks: list[WorkClock] = []

    def measure(self, clock: WorkClock) -> None:
        """Keep the set's clock."""
        self.clocks.append(clock)

    def tokens(self) -> tuple[int, int]:
        """(prompt tokens read, new tokens made) over every set so far."""
        return sum(c.read for c in self.clocks), sum(c.made for c in self.clocks)


def full(args: argparse.Namespace) -> None:
    """(c) on all prompts of the five paper sets, end to end: model load, run directory, summary; and the useful
    rate of the whole run (load and report included) as a share of the peak measured after it."""
    tally = TokenTally()
    with Timer() as timer, tempfile.TemporaryDirectory() as tmp:
        options = RunOptions(
            model=MODEL,
            probes=PAPER_SETS,
            data_dir=args.data_dir,
            out=Path(tmp) / "run",
            batch_size=args.batch_size,
            model_args={"device": "cpu"},
            use_cache=False,
        )
        backend = RunPlan.build(options).model.load()  # what the run loads itself (no cache is asked)
        summary = run(options, backend, tally)
    n = sum(r.n for r in summary.results.values())
    print(f"model {MODEL}, torch threads {torch.get_num_threads()}, batch size {args.batch_size}")
    print(f"CPU: {cpu_description()}")
    for name, result in summary.results.items():
        gas, gld = result.metrics["gas"].value, result.metrics["gld"].value
        print(f"  {name:<10} n={result.n:4d}  GAS {gas:.3f}  GLD {gld:.3f}")
    print(
        f"all {n} prompts end to end (model load + run + run directory): {timer.wall:.1f} s wall, {timer.cpu:.1f} s CPU"
    )
    print(f"  (target < 300 s; CPU seconds / {torch.get_num_threads()} threads ~ wall time on an idle machine)")
    assert isinstance(backend, HFBackend)
    prompt, generated = tally.tokens()
    gflop = useful_gflop(backend, prompt, generated)
    peak, per_cpu, kernels = matmul_peak(backend.model)
    by_cpu = "" if per_cpu is None else f", {gflop / timer.cpu / per_cpu:.1%} by CPU"
    print(f"peak {peak:.1f} GFLOP/s by {kernels}")
    print(
        f"useful work {gflop:.0f} GFLOP ({prompt} prompt and {generated} generated tokens): "
        f"{gflop / timer.wall:.1f} GFLOP/s, {gflop / timer.wall / peak:.1%} of the peak by wall{by_cpu}"
    )
    print(f"peak RSS: {peak_rss_gb():.2f} GB  (target < 3 GB)")


SPIN = "while True: pass"


def busy(args: argparse.Namespace) -> None:
    """(c) on the same template prompts idle, then beside one competing CPU-bound process (fairprobe's threads)."""
    os.environ.pop("FAIRPROBE_THREADS", None)  # fairprobe chooses the threads per batch
    backend = load_model(MODEL, device="cpu", dtype="float32", batch_size=args.batch_size)
    ps = load_probe_set("template", data_dir=args.data_dir, limit=args.busy_n)
    plan = paper_plan(args.batch_size)
    run_paper_set(backend, ps.model_copy(update={"probes": ps.probes[:4]}), plan)  # warm-up
    print(
        f"model {MODEL}, {len(ps.probes)} template prompts, batch size {args.batch_size}, {usable_cpus()} usable CPUs"
    )

    def timed(label: str) -> Timer:
        load = os.getloadavg()[0]
        with Timer() as timer:
            run_paper_set(backend, ps, plan)
        print(
            f"{label:<42} {timer.wall:7.1f} s wall {timer.cpu:7.1f} s CPU   torch threads {torch.get_num_threads()}"
            f"   load average before {load:.2f}",
            flush=True,
        )
        return timer

    idle = timed("machine as found (no competitor)")
    competitor = subprocess.Popen([sys.executable, "-c", SPIN])
    try:
        time.sleep(2.0)
        loaded = timed("with one competing CPU-bound process")
        old = old_configuration(args) if args.baseline else None
    finally:
        competitor.kill()
        competitor.wait()
    print(f"busy / idle wall: {loaded.wall / idle.wall:.2f}x   (target <= 2.5x)")
    if old is not None:
        print(
            f"before (2 spinning OpenMP threads), with the competitor: {old:.1f} s wall = {old / idle.wall:.2f}x idle"
        )
    print("load average counts every runnable process on the machine (other users' jobs too)")


def old_configuration(args: argparse.Namespace) -> float:
    """Wall seconds of the same prompts in a child process set up as before: 2 threads, spinning OpenMP."""
    env = {**os.environ, "FAIRPROBE_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"}
    command = [sys.executable, __file__, "--busy-child", "--busy-n", str(args.busy_n), "--data-dir", str(args.data_dir)]
    out = subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout
    return float(out.strip().split()[-1])


def busy_child(args: argparse.Namespace) -> None:
    """The child of old_configuration: warm up, then print the wall seconds of the prompts."""
    backend = load_model(MODEL, device="cpu", dtype="float32", batch_size=args.batch_size)
    ps = load_probe_set("template", data_dir=args.data_dir, limit=args.busy_n)
    plan = paper_plan(args.batch_size)
    run_paper_set(backend, ps.model_copy(update={"probes": ps.probes[:4]}), plan)
    with Timer() as timer:
        run_paper_set(backend, ps, plan)
    print(f"wall {timer.wall:.2f}")


def main() -> None:
    """Parse options and run the comparison or the full run."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder with the paper's data files")
    parser.add_argument("--n", type=int, default=160, help="prompts for (b) and (c), spread over the five sets")
    parser.add_argument("--paper-n", type=int, default=24, help="prompts for the slow paper way (a)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats of (b) and (c)")
    parser.add_argument("--batch-size", type=int, default=RunOptions.model_fields["batch_size"].default)
    parser.add_argument("--model", default=MODEL, help="the model of the comparison (a --model spec)")
    parser.add_argument("--device", default="cpu", help="the comparison's device: cpu, cuda ...")
    parser.add_argument("--dtype", default="float32", help="the comparison's dtype: float32, bfloat16 ...")
    parser.add_argument("--full", action="store_true", help="time (c) on all 1,241 prompts end to end")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads (not with --busy)")
    parser.add_argument("--busy", action="store_true", help="idle vs one competing CPU-bound process")
    parser.add_argument("--busy-n", type=int, default=40, help="template prompts for --busy")
    parser.add_argument("--baseline", action="store_true", help="with --busy: also time the old setup (slow)")
    parser.add_argument("--busy-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.busy_child:
        busy_child(args)
        return
    if not args.data_dir.is_dir():
        sys.exit(f"error: data folder not found: {args.data_dir}")
    if args.busy:
        busy(args)
        return
    torch.set_num_threads(args.threads)
    full(args) if args.full else compare(args)


if __name__ == "__main__":
    main()
