"""User-facing errors: one line that says what went wrong and where."""

from __future__ import annotations

import errno
import sqlite3
import sys


class FairprobeError(Exception):
    """An error caused by bad input or environment; the CLI prints it as one line, no traceback."""


class DataError(FairprobeError):
    """A data file is missing, empty, malformed or fails its checksum."""


class DataNotGiven(DataError):
    """A probe set reads data the user must give (no public copy can be fetched) and none was given: a run of its
    whole suite skips the set with this one line; naming the set (`--probes`) makes it an error."""


class ModelError(FairprobeError):
    """A model spec is unknown or a model cannot be loaded or reached."""


class ConfigError(FairprobeError):
    """An option value is out of range or inconsistent."""


class SmallLimitWarning(UserWarning):
    """A --limit below what a set's marked metrics need: the run gives values but no marks (a category of its own,
    so a caller that limits on purpose, such as a test, can filter it)."""


class RunInterrupted(Exception):
    """Ctrl-C during a run: samples so far are saved and the same command resumes."""

    def __init__(self, out: object, done: int) -> None:
        super().__init__(f"interrupted: {done} samples saved in {out}; run the same command again to resume")
        self.out = out
        self.done = done


def first_line(text: str) -> str:
    """The first non-blank line of a message, stripped ('' when there is none): error messages stay one line."""
    lines = [line.strip() for line in str(text).strip().split("\n") if line.strip()]
    return lines[0] if lines else ""


def _os_message(exc: OSError) -> str:
    """An OS error as 'what: where' (read-only file system, disk full, permission, a FIFO ...)."""
    what = exc.strerror or first_line(str(exc)) or type(exc).__name__
    where = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    hint = ""
    if exc.errno == errno.ENOSPC:
        hint = " (free some space: what was already computed is saved, and the same command resumes)"
    elif exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        hint = " (choose a writable --out or cache path)"
    return f"{what}: {where}{hint}" if where else f"{what}{hint}"


def describe_failure(exc: BaseException) -> str | None:
    """The one line the CLI prints for a failure a user can cause, or None when it is not one of those.

    Knows fairprobe's own errors, pydantic validation, OS and SQLite errors, HTTP errors (httpx) and
    torch errors (out of memory, device and dtype problems); a library is consulted only if already imported.
    """
    if isinstance(exc, FairprobeError):
        return first_line(str(exc))
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "option"
        return f"{where}: {first.get('msg')}"
    if isinstance(exc, OSError):
        return _os_message(exc)
    if isinstance(exc, sqlite3.Error):
        return (
            f"cache database error: {first_line(str(exc))} (clear it with `fairprobe cache clear`, or delete the file)"
        )
    if isinstance(exc, MemoryError):
        return "out of memory: use a smaller --batch-size or --limit, or shorter prompts"
    httpx = sys.modules.get("httpx")
    if httpx is not None and isinstance(exc, httpx.HTTPError | httpx.InvalidURL):
        return f"HTTP error: {first_line(str(exc)) or type(exc).__name__}"
    if type(exc).__module__.split(".")[0] == "torch" or (
        isinstance(exc, RuntimeError) and "torch" in sys.modules and _from_torch(exc)
    ):
        return f"torch error: {first_line(str(exc)) or type(exc).__name__} (try --device cpu, --dtype float32 or a smaller --batch-size)"
    return None


def _from_torch(exc: BaseException) -> bool:
    """True when the exception passed through torch's (or transformers') Python code."""
    tb = exc.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
        if "/torch/" in path or "/transformers/" in path:
            return True
        tb = tb.tb_next
    return False
