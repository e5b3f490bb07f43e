"""Atomic file writes, JSONL reading with line-numbered errors, and the user cache directory."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fairprobe.errors import DataError

_UMASK = os.umask(0)
os.umask(_UMASK)


def cache_dir(*parts: str) -> Path:
    """Return (and create) fairprobe's cache folder: $FAIRPROBE_CACHE_DIR, else $XDG_CACHE_HOME/fairprobe."""
    root = os.environ.get("FAIRPROBE_CACHE_DIR")
    if root:
        base = Path(root)
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fairprobe"
    path = base.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write a file so that readers see either the old content or the whole new one, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600 files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write text (UTF-8) atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically, sorted keys and indented, so equal objects give equal bytes."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def read_text(path: Path, what: str = "file") -> str:
    """Read a UTF-8 text file, turning a missing, unreadable or empty file into a DataError."""
    if not path.exists():
        raise DataError(f"{what} not found: {path}")
    if path.is_dir():
        raise DataError(f"{what} is a folder, not a file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {what} {path}: {exc}") from exc
    if not text.strip():
        raise DataError(f"{what} is empty: {path}")
    return text


def iter_jsonl(path: Path, what: str = "JSONL file") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line; a malformed line raises DataError naming it."""
    for lineno, line in enumerate(read_text(path, what).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"malformed JSON in {path} line {lineno}: {exc.msg}") from exc
        if not isinstance(obj, dict):
            raise DataError(f"malformed record in {path} line {lineno}: expected a JSON object")
        yield lineno, obj
