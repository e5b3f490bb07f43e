"""Atomic file writes, JSONL reading with line-numbered errors, and the user cache directory."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fairprobe.errors import ConfigError, DataError
from fairprobe.redact import redact

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


def parse_pairs(items: list[str] | None, what: str, form: str = "key=value", last: bool = False) -> dict[str, str]:
    """`KEY=VALUE` items as a dict (split at the first `=`, or the last with `last`); a malformed one is a ConfigError."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.rpartition("=") if last else item.partition("=")
        if not sep or not key.strip() or (last and not value):
            raise ConfigError(f"{what} must be {form}, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def parse_value(text: str) -> Any:
    """A `-M` value as JSON when it reads as JSON (1, 0.5, true, null, "x", [..]), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def tree_size(path: Path) -> int:
    """Bytes of a file or of every file below a folder (symlinks not followed)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of bytes (probe-set sources, cache keys)."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in chunks (model weights, adapters)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fingerprint(obj: Any, length: int = 16) -> str:
    """The first `length` hex digits of the sha256 of an object's sorted JSON: recognises settings across runs."""
    return sha256_bytes(json.dumps(obj, sort_keys=True).encode())[:length]


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
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        if exc.filename is None:  # a failed write names no file: name the one being written
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """Write text (UTF-8) atomically, with every secret redacted (see fairprobe.redact)."""
    atomic_write_bytes(path, redact(text).encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON atomically, sorted keys and indented, so equal objects give equal bytes."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def require_regular_file(path: Path, what: str = "file") -> None:
    """Refuse up front anything but a regular file (a FIFO or device would block or never end)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise DataError(f"{what} not found: {path}") from None
    except OSError as exc:
        raise DataError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(mode):
        raise DataError(f"{what} is a folder, not a file: {path}")
    if not stat.S_ISREG(mode):
        raise DataError(f"{what} is not a regular file (a pipe, socket or device): {path}")


def split_lines(text: str) -> list[str]:
    """Lines of a file split on "\\n" only (a trailing "\\r" dropped), never on U+2028, U+2029 or U+0085."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_text(path: Path, what: str = "file", allow_empty: bool = False) -> str:
    """Read a UTF-8 text file (a BOM is accepted): a missing, special, unreadable or empty file is a DataError."""
    require_regular_file(path, what)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(f"cannot read {what} {path}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise DataError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if not allow_empty and not text.strip():
        raise DataError(f"{what} is empty: {path}")
    return text


def text_lines(path: Path, what: str = "file") -> Iterator[str]:
    """A UTF-8 text file's lines as `split_lines` cuts them (a BOM accepted), read one at a time, so a large file
    never sits in memory whole; a missing, special, unreadable, non-UTF-8 or blank file is a DataError."""
    require_regular_file(path, what)
    offset, blank = 0, True
    try:
        with path.open("rb") as handle:
            for raw in handle:  # binary files split at b"\n" only
                try:
                    line = raw.decode("utf-8-sig" if offset == 0 else "utf-8")
                except UnicodeDecodeError as exc:
                    raise DataError(f"cannot read {what} {path}: not UTF-8 text (byte {offset + exc.start})") from None
                offset += len(raw)
                line = line.removesuffix("\n").removesuffix("\r")
                blank = blank and not line.strip()
                yield line
    except OSError as exc:
        raise DataError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if blank:
        raise DataError(f"{what} is empty: {path}")


def iter_jsonl(path: Path, what: str = "JSONL file") -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, object) for each non-blank line, reading one line at a time; a malformed line raises
    DataError naming it."""
    for lineno, line in enumerate(text_lines(path, what), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise DataError(f"malformed JSON in {path} line {lineno}: {msg}") from None
        if not isinstance(obj, dict):
            raise DataError(f"malformed record in {path} line {lineno}: expected a JSON object")
        yield lineno, obj
