"""CPU threads for torch on a machine that others share: as many as the CPUs this process can really use
and that other processes leave free, re-checked before each batch; OpenMP threads sleep instead of spinning.

On 2 cores with another CPU-bound process, torch with two spinning OpenMP threads ran ten times slower
than with one: the threads wait for each other at every barrier while one of them is descheduled.
So the count is chosen from
- the CPUs the process may run on (its affinity mask) and its cgroup's CPU quota (containers, CI), and
- how busy those CPUs were since the last look (per-CPU counters of /proc/stat, less this process's own use),
and $FAIRPROBE_THREADS (or $OMP_NUM_THREADS) fixes it instead. On a machine already busy when fairprobe is
imported, `OMP_WAIT_POLICY=PASSIVE` is set (unless given) before torch is, so idle OpenMP threads yield their CPU.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

# The shortest interval over which CPU counters say something.
MIN_INTERVAL = 0.15


def others_running(samples: int = 3, pause: float = 0.002, loadavg: Path = Path("/proc/loadavg")) -> int:
    """Other processes running right now: the fewest over a few quick looks at the kernel's count of runnable
    tasks (less this one), so a passing shell command is not counted and a CPU-bound competitor, in every look, is."""
    counts = []
    for i in range(samples):
        try:
            counts.append(int(loadavg.read_text().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            return 0
        if i + 1 < samples:
            time.sleep(pause)
    return max(0, min(counts))


def quiet_openmp(busy: bool | None = None) -> None:
    """On a busy machine make OpenMP threads sleep when they wait (set before torch loads its OpenMP runtime).

    On an idle one the runtime's default (spin briefly, then sleep) is kept: sleeping at every wait made 160
    template prompts 15% slower there. A machine that turns busy later gets fewer torch threads (`ThreadChooser`),
    down to one, and one thread never waits for another. `busy` is whether another process runs now (looked up
    when not given).
    """
    if "OMP_WAIT_POLICY" in os.environ:
        return
    if busy if busy is not None else others_running() >= 1:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def usable_cpus() -> int:
    """CPUs this process can really use: its affinity mask, capped by its cgroup's CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota()
    return max(1, min(cpus, quota)) if quota else max(1, cpus)


def cgroup_cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """The CPU quota of this process's cgroup (v2 `cpu.max` or v1 `cpu.cfs_quota_us`), rounded up; None if unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return max(1, math.ceil(int(quota) / int(period)))
        return None
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return max(1, math.ceil(quota_us / period_us)) if quota_us > 0 else None
    except (OSError, ValueError, ZeroDivisionError):
        return None


def cpu_ticks(cpus: set[int] | None, stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(busy, total) clock ticks summed over the given CPUs (all when None); None where /proc/stat is missing."""
    try:
        lines = stat.read_text().split("\n")
    except OSError:
        return None
    busy = total = 0
    for line in lines:
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or name == "cpu" or not name[3:].isdigit():
            continue
        if cpus is not None and int(name[3:]) not in cpus:
            continue
        values = [int(v) for v in rest.split()[:8]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        busy += sum(values) - idle
        total += sum(values)
    return (busy, total) if total else None


def fixed_threads() -> int | None:
    """$FAIRPROBE_THREADS, else $OMP_NUM_THREADS, when set to a positive whole number."""
    for name in ("FAIRPROBE_THREADS", "OMP_NUM_THREADS"):
        raw = os.environ.get(name, "").strip()
        if raw.isdigit() and int(raw) > 0:
            return int(raw)
    return None


@dataclass
class ThreadChooser:
    """Chooses torch's thread count from the CPUs usable now; `choose()` before each batch."""

    cpus: int = field(default_factory=usable_cpus)
    _mask: set[int] | None = None
    _last: tuple[float, float, tuple[int, int] | None] | None = None
    _estimate: float = 0.0

    def __post_init__(self) -> None:
        try:
            self._mask = set(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self._mask = None

    def _look(self) -> tuple[float, float, tuple[int, int] | None]:
        return time.monotonic(), time.process_time(), cpu_ticks(self._mask)

    def others_busy(self, sample: float = 0.2) -> float:
        """CPUs (of ours) that other processes kept busy since the last look (sampling `sample` s the first time)."""
        if self._last is None:
            self._last = self._look()
            time.sleep(sample)
        (wall0, own0, ticks0), now = self._last, self._look()
        wall1, own1, ticks1 = now
        if ticks0 is None or ticks1 is None or wall1 - wall0 < MIN_INTERVAL or ticks1[1] <= ticks0[1]:
            return self._estimate  # too soon to tell (counters tick every 10 ms): keep the last estimate
        self._last = now
        mask_cpus = len(self._mask) if self._mask else self.cpus
        busy_cpus = (ticks1[0] - ticks0[0]) / (ticks1[1] - ticks0[1]) * mask_cpus
        own_cpus = (own1 - own0) / (wall1 - wall0)
        self._estimate = max(0.0, busy_cpus - own_cpus)
        return self._estimate

    def choose(self) -> int:
        """Threads to use now: the fixed count if set, else the usable CPUs others leave free (at least 1)."""
        fixed = fixed_threads()
        if fixed is not None:
            return fixed
        free = self.cpus - self.others_busy()
        return max(1, min(self.cpus, math.floor(free + 0.25)))


def apply_threads(chooser: ThreadChooser) -> int:
    """Set torch's intra-op threads from the chooser (only when it changes); returns the count."""
    import torch

    threads = chooser.choose()
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
