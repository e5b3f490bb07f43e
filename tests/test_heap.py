"""Freed memory goes back to the system (fairprobe.models.heap): the heap's free pages are released, a decode step
wrapped by `releasing` releases them every so many calls and is otherwise the same step, and a module's forwards
release them within `released_after_forwards`."""

from __future__ import annotations

import os

import pytest
import torch

from fairprobe.models import heap

PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes() -> int:
    """This process's resident memory now."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * PAGE


@pytest.mark.skipif(heap.MALLOC_TRIM is None or not os.path.exists("/proc/self/statm"), reason="glibc on Linux")
def test_freed_heap_memory_goes_back_to_the_system() -> None:
    blocks = [bytearray(1000) for _ in range(100_000)]  # 100 MB in malloc's heap, blocks below its mmap threshold
    pinned = bytearray(1000)  # allocated after them, so the heap's top is in use and free() cannot shrink it
    held = resident_bytes()
    del blocks
    freed = resident_bytes()
    assert held - freed < 30e6  # free() keeps the pages in the heap
    assert heap.release_freed()
    assert freed - resident_bytes() > 60e6
    assert len(pinned) == 1000


def test_a_releasing_step_releases_every_so_many_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[int] = []
    monkeypatch.setattr(heap, "MALLOC_TRIM", released.append)
    step = heap.releasing(lambda a, b=0: a + b, every=3)
    assert [step(k, b=10) for k in range(7)] == [10, 11, 12, 13, 14, 15, 16]
    assert released == [0, 0]  # after the 3rd and the 6th call, each asking to keep nothing free (`pad` 0)
    monkeypatch.setattr(heap, "MALLOC_TRIM", None)
    assert not heap.release_freed()
    assert heap.releasing(lambda: "same")() == "same"


def test_forwards_release_the_heap_only_within_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    released: list[int] = []
    monkeypatch.setattr(heap, "MALLOC_TRIM", released.append)
    linear = torch.nn.Linear(2, 1)
    with heap.released_after_forwards(linear):
        linear(torch.ones(1, 2))
        linear(torch.ones(3, 2))
    assert released == [0, 0]
    linear(torch.ones(1, 2))
    assert released == [0, 0] and not linear._forward_hooks
