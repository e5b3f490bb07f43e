"""Thread choice on a shared machine: usable CPUs, other processes' load, passive OpenMP."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fairprobe.threads import (
    ThreadChooser,
    cgroup_cpu_quota,
    cpu_ticks,
    fixed_threads,
    others_running,
    quiet_openmp,
    usable_cpus,
)

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


def test_openmp_sleeps_when_waiting_only_on_a_busy_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    quiet_openmp(busy=False)
    assert "OMP_WAIT_POLICY" not in os.environ  # idle: the runtime's default, no cost at every wait
    quiet_openmp(busy=True)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    quiet_openmp(busy=True)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"  # a user's own choice stands


def test_importing_fairprobe_sets_the_policy_before_torch() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import fairprobe, os, sys; print(os.environ.get('OMP_WAIT_POLICY', '-'), 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    policy, torch_loaded = out.stdout.split()
    assert torch_loaded == "False"  # so the policy, when set, reaches torch's OpenMP runtime
    assert policy in ("PASSIVE", "-")  # which one depends on what else runs at that moment (see the tests above)


def test_others_running_reads_the_kernels_runnable_count(tmp_path: Path) -> None:
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("0.40 1.12 1.44 3/345 12345\n")
    assert others_running(loadavg=loadavg) == 2  # three runnable, this process one of them
    loadavg.write_text("0.00 0.00 0.00 1/99 7\n")
    assert others_running(loadavg=loadavg) == 0
    assert others_running(loadavg=tmp_path / "absent") == 0


def test_a_competing_process_is_seen_running() -> None:
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        assert others_running() >= 1
    finally:
        spin.kill()
        spin.wait()
