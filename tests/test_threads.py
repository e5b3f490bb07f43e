"""Thread choice on a shared machine: usable CPUs, other processes' load, passive OpenMP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairprobe.threads import ThreadChooser, cgroup_cpu_quota, cpu_ticks, fixed_threads, usable_cpus

STAT = """cpu  100 0 100 800 0 0 0 0 0 0
cpu0 50 0 50 400 0 0 0 0 0 0
cpu1 50 0 50 400 0 0 0 0 0 0
intr 1
"""


def test_cgroup_quota_v2_and_v1(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_quota(tmp_path) == 2
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_quota(tmp_path) is None
    (tmp_path / "cpu.max").unlink()
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("50000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_quota(tmp_path) == 1
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_quota(tmp_path) is None


def test_cpu_ticks_count_only_the_given_cpus(tmp_path: Path) -> None:
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    assert cpu_ticks(None, stat) == (200, 1000)
    assert cpu_ticks({1}, stat) == (100, 500)
    assert cpu_ticks(None, tmp_path / "absent") is None


def test_fixed_threads_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRPROBE_THREADS", "3")
    assert fixed_threads() == 3 and ThreadChooser(cpus=2).choose() == 3
    monkeypatch.setenv("FAIRPROBE_THREADS", "many")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert fixed_threads() == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert fixed_threads() is None


@pytest.mark.parametrize(("others", "expected"), [(0.0, 2), (0.2, 2), (0.6, 1), (1.0, 1), (3.0, 1)])
def test_threads_leave_the_cpus_others_use(monkeypatch: pytest.MonkeyPatch, others: float, expected: int) -> None:
    monkeypatch.delenv("FAIRPROBE_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    chooser = ThreadChooser(cpus=2)
    monkeypatch.setattr(chooser, "others_busy", lambda sample=0.2: others)
    assert chooser.choose() == expected


def test_a_competing_process_is_seen() -> None:
    chooser = ThreadChooser()
    if cpu_ticks(None) is None:
        pytest.skip("no /proc/stat on this system")
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = chooser.others_busy(sample=1.0)
    finally:
        spin.kill()
        spin.wait()
    assert busy >= 0.5  # at least half a CPU of ours is taken by the competitor (plus whatever else runs)
    assert 1 <= usable_cpus() <= (os.cpu_count() or 1)


def test_importing_fairprobe_makes_openmp_passive() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    out = subprocess.run(
        [sys.executable, "-c", "import fairprobe, os; print(os.environ['OMP_WAIT_POLICY'])"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert out.stdout.strip() == "PASSIVE"
