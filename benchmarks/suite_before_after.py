"""The same `fairprobe run` on the code of a git revision and on this checkout, side by side: issue 31's time target
(the GenderBench suite's wall time under half of the code's before the engine, with the replies unchanged).

The revision's `src/` is taken from this repository (`git archive`) into a temporary folder. Each round runs the
command once with that code and once with this checkout's, one after the other, in a child process each (the
same interpreter and packages, `PYTHONPATH` naming the code, `--no-cache --device cpu`, `FAIRPROBE_THREADS` torch
threads). The child's own wall time, user and system CPU and peak resident memory (its rusage from `wait4`) are
printed per run, then each round's after/before ratios, then whether every run's replies are the first run's and
how far its exact readings' option probabilities are from the first run's.
The default command is the like-for-like pair of docs/performance.md: two sampled GenderBench sets whose work is
the same on both codes. `--probes all -o mode=exact` makes the whole suite the same work on both (the old code read
every closed-answer set exactly; the engine's `auto` now samples where the options hold little of the model's
probability). `-M key=value` sets a model option on this checkout's runs alone: the code before has no memory
budget, so `-M memory=16GB` compares it with the engine's budget unbounded.

    python benchmarks/suite_before_after.py                       # 9b5dc9f against this checkout, two rounds
    python benchmarks/suite_before_after.py --rounds 1 --probes business-vocabulary --limit 10
    python benchmarks/suite_before_after.py --rounds 1 --probes all -o mode=exact   # the whole suite, same work
    python benchmarks/suite_before_after.py --rounds 1 --probes all -o mode=exact -M memory=16GB  # budget unbounded
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import numpy as np

from fairprobe.io import iter_jsonl

ROOT = Path(__file__).resolve().parents[1]
BEFORE_ENGINE = "9b5dc9f"  # the last commit before issue 31's engine


@dataclass(frozen=True)
class Timed:
    """One child run: its wall, user and system CPU seconds, its peak resident bytes, its replies and its exact
    readings' option probabilities."""

    wall: float
    user: float
    system: float
    peak: int
    replies: dict[str, str]
    probabilities: dict[str, np.ndarray]


def source_of(revision: str, into: Path) -> Path:
    """The revision's `src/` folder, extracted under `into` from this repository; exits with one line when git does
    not know the revision."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", revision, "src"], capture_output=True, check=False
    )
    if archive.returncode != 0:
        sys.exit(f"git cannot archive revision {revision!r} of {ROOT}: {archive.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def records_of(samples: Path) -> dict[str, dict[str, Any]]:
    """A run's samples.jsonl records by set and sample id (fairprobe's own reader: lines split on newlines alone,
    since replies may hold U+2028)."""
    return {f"{record['set']}/{record['id']}": record for _, record in iter_jsonl(samples, "samples file")}


def replies_of(records: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Each record's replies as JSON text, compared exactly."""
    return {key: json.dumps(record.get("replies")) for key, record in records.items()}


def probabilities_of(records: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """Each exact reading's option probabilities: its shares of the options (`q`, a row per prompt) times the
    probability the options hold (`mass`)."""
    return {
        key: np.asarray(record["q"], dtype=float) * np.asarray(record["mass"], dtype=float)[:, None]
        for key, record in records.items()
        if record.get("q") is not None and record.get("mass") is not None
    }


def largest_difference(first: dict[str, np.ndarray], run: dict[str, np.ndarray]) -> float:
    """The largest difference of an option's probability between two runs' exact readings (inf where a reading is
    missing or shaped otherwise)."""
    gaps = [
        float(np.max(np.abs(run[key] - p), initial=0.0)) if key in run and run[key].shape == p.shape else np.inf
        for key, p in first.items()
    ]
    return max(gaps, default=0.0)


def child_env(src: Path, threads: int) -> dict[str, str]:
    """The environment a run's child gets: its code first on the path, fixed threads, offline."""
    return {**os.environ, "PYTHONPATH": str(src), "FAIRPROBE_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}


def check_imports(src: Path, env: dict[str, str]) -> None:
    """Exit with one line unless a child with `env` imports fairprobe from `src` (not from an installed copy)."""
    found = subprocess.run(
        [sys.executable, "-c", "import fairprobe; print(fairprobe.__file__)"], env=env, capture_output=True, text=True
    )
    if found.returncode != 0 or not Path(found.stdout.strip()).is_relative_to(src):
        sys.exit(f"a child with PYTHONPATH={src} imports fairprobe from {found.stdout.strip() or found.stderr.strip()}")


def measured(argv: list[str], env: dict[str, str], log: Path) -> tuple[int, float, Any]:
    """Run `argv` with its output to `log`: its exit status, wall seconds and its own rusage (`wait4`: this child's
    peak and CPU alone, where RUSAGE_CHILDREN would keep the largest peak of every child so far). Linux carries the
    spawning process's resident high-water mark into the child's peak across exec, so the peak read is at least this
    process's own: tens of MB here, where the runs peak at GBs."""
    with log.open("w") as sink:
        start = time.perf_counter()
        child = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return child.returncode, wall, usage


def timed_run(src: Path, command: list[str], out: Path, threads: int) -> Timed:
    """Run `fairprobe run <command> --out out` on the code in `src` and measure it; exits with one line when the
    run fails (its output's last line named)."""
    env = child_env(src, threads)
    check_imports(src, env)
    log = out.with_suffix(".log")
    argv = [sys.executable, "-m", "fairprobe", "run", *command, "--no-cache", "--device", "cpu", "--out", str(out)]
    status, wall, usage = measured(argv, env, log)
    if status != 0:
        last = (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
        sys.exit(f"the run on {src} exited with status {status}: {last}")
    records = records_of(out / "samples.jsonl")
    peak = usage.ru_maxrss * 1024
    return Timed(wall, usage.ru_utime, usage.ru_stime, peak, replies_of(records), probabilities_of(records))


def report(runs: list[tuple[str, Timed]]) -> None:
    """Print each run, each round's after/before ratios and whether every run's replies are the first run's."""
    print(f"{'run':<12} {'wall s':>8} {'user s':>8} {'system s':>9} {'peak RSS GB':>12}")
    for name, run in runs:
        print(f"{name:<12} {run.wall:8.2f} {run.user:8.2f} {run.system:9.2f} {run.peak / 1e9:12.3f}")
    for (_, before), (name, after) in zip(runs[::2], runs[1::2], strict=True):
        print(
            f"{name.replace('after', 'round')}: after/before wall {after.wall / before.wall:.3f}, "
            f"user CPU {after.user / before.user:.3f}"
        )
    first = runs[0][1].replies
    same = [sum(run.replies.get(key) == text for key, text in first.items()) for _, run in runs]
    print(f"replies the same as the first run's: {', '.join(f'{n}/{len(first)}' for n in same)}")
    readings = runs[0][1].probabilities
    if readings:
        gaps = [largest_difference(readings, run.probabilities) for _, run in runs[1:]]
        print(
            f"exact readings: {len(readings)}; largest difference of an option's probability from the first run's: "
            f"{', '.join(f'{gap:.2e}' for gap in gaps)}"
        )


def load() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def flagged(flag: str, values: list[str]) -> list[str]:
    """`flag` before each of `values`: ["-o", "a=1", "-o", "b=2"]."""
    return [part for value in values for part in (flag, value)]


def commands(args: argparse.Namespace) -> dict[str, list[str]]:
    """The `fairprobe run` arguments of each code: the same command, and this checkout's model options (`-M`) after
    it alone (the code before the engine has no memory budget to set)."""
    probes = [] if args.probes == "all" else ["--probes", args.probes]
    command = ["--suite", args.suite, *probes, "--limit", str(args.limit), *flagged("-o", args.option)]
    return {"before": command, "after": command + flagged("-M", args.model_option)}


def main() -> None:
    """Run the command on both codes, alternating, and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", default=BEFORE_ENGINE, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--suite", default="genderbench")
    parser.add_argument("--probes", default="business-vocabulary,hiring-an", help="the sets, or 'all' of the suite")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of each run (FAIRPROBE_THREADS)")
    parser.add_argument("-o", "--option", action="append", default=[], help="a set option key=value for both runs")
    parser.add_argument(
        "-M", "--model-option", action="append", default=[], help="a model option key=value for this checkout's runs"
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, not {args.rounds}")
    argv = commands(args)
    before = f"{args.before} (without -M)" if args.model_option else args.before
    print(f"fairprobe run {' '.join(argv['after'])}: {before} against this checkout; load average {load()}")
    with TemporaryDirectory() as scratch:
        codes = {"before": source_of(args.before, Path(scratch) / "before"), "after": ROOT / "src"}
        runs = []
        for round_ in range(1, args.rounds + 1):
            for name, src in codes.items():
                out = Path(scratch) / f"{name}{round_}"
                runs.append((f"{name} {round_}", timed_run(src, argv[name], out, args.threads)))
                print(f"{runs[-1][0]}: {runs[-1][1].wall:.2f} s", flush=True)
    report(runs)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
