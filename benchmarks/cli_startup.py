"""Start-up time of `fairprobe --help` and `fairprobe version`, side by side with a bare Python and with the runner,
and how soon a command with a bad option is refused.

Each command runs `--repeats` times in a fresh interpreter (the way a user types it); the median wall time is
reported with the heavy modules each one imported. Reference rows in the same run: a bare `python -c pass`
(the floor) and `import fairprobe.runner` (what every command used to import: torch, transformers, scipy).
Target: `--help` and `version` under 0.4 s on an idle 2-core machine, and neither imports torch, scipy,
transformers, numpy or the runner (pydantic is listed too: typer itself imports it to run a command).
Refused commands (an unknown set, a non-finite learning rate, an unfinished adapter) load no torch, transformers,
scipy or matplotlib: those load when a model, a metric or a figure is needed.

    python benchmarks/cli_startup.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 0.4
HEAVY = ("torch", "scipy", "transformers", "numpy", "fairprobe.runner", "pydantic", "httpx", "matplotlib")

# Runs a CLI in-process after timing nothing else, then lists which heavy modules it loaded.
CLI = """
import sys
sys.argv = ["fairprobe", *{args!r}]
from fairprobe.cli import main
try:
    main()
except SystemExit:
    pass
heavy = [m for m in {heavy!r} if m in sys.modules]
sys.stderr.write("HEAVY:" + ",".join(heavy) + "\\n")
"""


def timed(code: str, repeats: int) -> tuple[float, str]:
    """Median wall time of `python -c code` over fresh interpreters, and the heavy modules reported."""
    times, heavy = [], ""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for _ in range(repeats):
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        times.append(time.perf_counter() - start)
        heavy = next((line[6:] for line in proc.stderr.splitlines() if line.startswith("HEAVY:")), "")
    return statistics.median(times), heavy


def refused(tmp: Path) -> list[tuple[str, list[str]]]:
    """Commands that stop at a bad input, each with its label: an unknown set, a learning rate of inf, and a
    comparison naming an adapter folder whose tuning never finished (a checkpoint, no manifest)."""
    (tmp / "unfinished" / "checkpoint").mkdir(parents=True)
    (tmp / "unfinished" / "checkpoint" / "trainer_state.pt").write_bytes(b"x")
    never = str(tmp / "never")
    return [
        ("run --probes no-such-set", ["run", "--probes", "no-such-set", "--out", never]),
        ("tune --lr inf", ["tune", "--lr", "inf", "--out", never]),
        ("compare --adapter UNFINISHED", ["compare", "--adapter", str(tmp / "unfinished"), "--out", never]),
    ]


def main() -> None:
    """Print one row per command and the ratios to the floor and to the runner import."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    load = os.getloadavg()
    print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min)")
    floor, _ = timed("pass", args.repeats)
    runner, _ = timed("import fairprobe.runner", args.repeats)
    rows = [("python -c pass (floor)", floor, "-"), ("import fairprobe.runner (old start-up)", runner, "-")]
    for argv in (["--help"], ["version"]):
        seconds, heavy = timed(CLI.format(args=argv, heavy=HEAVY), args.repeats)
        rows.append((f"fairprobe {' '.join(argv)}", seconds, heavy or "none"))
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in refused(Path(tmp)):
            seconds, heavy = timed(CLI.format(args=argv, heavy=HEAVY), args.repeats)
            rows.append((f"refused: {label}", seconds, heavy or "none"))
    print(f"{'command':<40} {'median s':>9} {'x floor':>8} {'x runner':>9}  heavy modules imported")
    for name, seconds, heavy in rows:
        print(f"{name:<40} {seconds:>9.3f} {seconds / floor:>8.2f} {seconds / runner:>9.2f}  {heavy}")
    worst = max(s for name, s, _ in rows if name in ("fairprobe --help", "fairprobe version"))
    verdict = "within" if worst < TARGET_S else "ABOVE"
    print(f"slowest of --help/version: {worst:.3f} s, {verdict} the {TARGET_S} s target (median of {args.repeats})")


if __name__ == "__main__":
    main()
