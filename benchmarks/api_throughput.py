"""Prompts per second of the openai: backend at concurrency 1, 4 and 16 against a local fixed-latency server.

The server (http.server, a thread per connection, on 127.0.0.1) waits a fixed latency per request, as a
remote model would, and answers a canned completion with top logprobs. With latency L, concurrency 1 can
reach at most 1/L prompts per second; concurrency c should reach about c times that.

    .venv/bin/python benchmarks/api_throughput.py [--latency 0.1] [--seconds 2]
"""

from __future__ import annotations

import argparse
import json
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fairprobe.models import GenerationConfig, load_model
from fairprobe.models.api import OpenAIBackend

PAIRS = [("she", "he"), ("her", "his")]
TOP = {" she": math.log(0.3), " the": math.log(0.2), " he": math.log(0.1)}


def make_server(latency: float) -> ThreadingHTTPServer:
    """A canned OpenAI-compatible completions server that sleeps `latency` seconds per request."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # small writes go out at once (no Nagle + delayed-ACK stall)

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(latency)
            body = json.dumps(
                {
                    "object": "text_completion",
                    "choices": [{"index": 0, "text": " he went home.", "logprobs": {"top_logprobs": [TOP]}}],
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def prompts_per_second(backend: OpenAIBackend, n: int) -> float:
    """Time one generate call over n distinct prompts."""
    prompts = [f"My friend number {i} is riding a bicycle, and" for i in range(n)]
    start = time.perf_counter()
    replies = backend.generate(prompts, GenerationConfig(), PAIRS)
    elapsed = time.perf_counter() - start
    assert all(r.error is None and r.word_probs is not None for r in replies)
    return n / elapsed


def main() -> None:
    """Measure each concurrency side by side and print prompts/second and the ratios to concurrency 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency", type=float, default=0.1, help="seconds the server waits per request")
    parser.add_argument("--seconds", type=float, default=2.0, help="about how long each measurement lasts")
    args = parser.parse_args()
    server = make_server(args.latency)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    rates: dict[int, float] = {}
    for concurrency in (1, 4, 16):
        backend = load_model("openai:bench", base_url=url, concurrency=concurrency)
        backend.generate(["warm-up"] * concurrency, GenerationConfig())  # open the connections
        n = max(concurrency, round(args.seconds * concurrency / args.latency))
        rates[concurrency] = prompts_per_second(backend, n)
        backend.close()
    server.shutdown()
    print(f"server latency {args.latency * 1000:.0f} ms per request; ideal at concurrency 1: {1 / args.latency:.1f}/s")
    print(f"{'concurrency':>11}  {'prompts/s':>9}  {'vs c=1':>6}")
    for concurrency, rate in rates.items():
        print(f"{concurrency:>11}  {rate:>9.1f}  {rate / rates[1]:>5.2f}x")


if __name__ == "__main__":
    main()
