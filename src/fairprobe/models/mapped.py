"""Weights read from a mapped file, given back to the page cache while a pool of passes does not read them.

transformers loads a safetensors file of the model's own dtype by mapping it (a private mapping), so the plain
weights are the file's pages, resident once a forward has read them. On CPU, decode steps read oneDNN's packed copy
instead, and a pool whose passes read no probabilities runs its prompt passes on the packed copy too
(`HFBackend._generate_pool`): then nothing reads the plain weights but a few rows of the embedding. Such a pool
gives their pages back first (`madvise(MADV_DONTNEED)`); they stay in the system's page cache, and the next forward
that reads them maps them again from there (minor faults, no disk read). The memory they held is the room that
pool's keys and values may take besides the budget (`HFBackend._budget`).

A private mapping's page that something wrote holds the only copy of what was written, and MADV_DONTNEED would
put the file's bytes back in its place; a mapping with any such page (smaps' "Anonymous") is never given back.
Where there is no /proc (not Linux) or no madvise, nothing is mapped and nothing is given back.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from fairprobe.models.heap import c_function

MADV_DONTNEED = 4
PROC = Path("/proc/self")
MADVISE = c_function("madvise", (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int))
MAPPING = re.compile(r"([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ (\d+)")  # start-end perms offset device inode


def mapping_of(line: str) -> tuple[int, int, bool] | None:
    """(start, end, whether it maps a file: an inode that is not 0) of the mapping a line of /proc/self/maps, or a
    header line of smaps, names; None for any other line."""
    head = MAPPING.match(line)
    return (int(head[1], 16), int(head[2], 16), head[3] != "0") if head else None


def file_mappings() -> list[tuple[int, int]]:
    """(start, end) of this process's mappings of files, from /proc/self/maps; none where it cannot be read."""
    try:
        lines = (PROC / "maps").read_text().splitlines()
    except OSError:
        return []
    return [(start, end) for start, end, of_file in filter(None, map(mapping_of, lines)) if of_file]


def mapping_sizes(spans: Iterable[tuple[int, int]], field: str) -> dict[int, int]:
    """The kB of smaps' `field` ("Anonymous": pages written; "Rss": resident) of each file mapping that starts at
    one of `spans`' starts."""
    starts = {start for start, _ in spans}
    try:
        text = (PROC / "smaps").read_text()
    except OSError:
        return {}
    found: dict[int, int] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            if current in starts:
                found[current] = int(line.split()[1])
        elif (head := mapping_of(line)) is not None:
            current = head[0] if head[2] else None
    return found


@dataclass(frozen=True)
class MappedWeights:
    """The file mappings that hold a model's parameters (`spans`) and the bytes of parameters in them (`size`)."""

    spans: tuple[tuple[int, int], ...]
    size: int

    @classmethod
    def of(cls, model: torch.nn.Module) -> MappedWeights:
        """The mapped parameters of `model` (CPU tensors whose data lie in a file mapping; tied ones counted once);
        none where madvise is missing."""
        if MADVISE is None:
            return cls((), 0)
        mappings, held, seen = file_mappings(), set(), set()
        size = 0
        for param in model.parameters():
            address = param.data_ptr()
            if param.device.type != "cpu" or address in seen:
                continue
            span = next(((a, b) for a, b in mappings if a <= address < b), None)
            if span is not None:
                seen.add(address)
                held.add(span)
                size += param.numel() * param.element_size()
        return cls(tuple(sorted(held)), size)

    def release(self) -> int:
        """Give back the pages of every mapping that holds nothing written; the bytes of mappings given back."""
        if not self.spans or MADVISE is None:
            return 0
        written = mapping_sizes(self.spans, "Anonymous")
        given = 0
        for start, end in self.spans:
            if written.get(start) == 0 and MADVISE(start, end - start, MADV_DONTNEED) == 0:
                given += end - start
        return given
