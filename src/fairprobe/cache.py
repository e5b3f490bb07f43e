"""Content-addressed SQLite store of paid-for model calls: generations, word probabilities, judge verdicts.

Keys are sha256 digests of a JSON object (model identity, decoding parameters, exact prompt, word pairs),
so rerunning a suite, adding a probe set or re-scoring with another detector asks the model nothing twice.
The database lives in fairprobe's cache folder (`$FAIRPROBE_CACHE_DB` or `--cache PATH` move it);
WAL mode and one connection per thread make it safe for concurrent requests and concurrent runs.
A cache the disk cannot hold (full, read-only, gone) never stops a run: it warns once and the run goes on
uncached; only a database sqlite cannot read is an error.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairprobe.errors import ConfigError
from fairprobe.io import cache_dir, sha256_bytes, tree_size
from fairprobe.redact import redact

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    value TEXT NOT NULL,
    created REAL NOT NULL
)
"""


# SQLite's primary result codes that blame the disk, not the database: I/O error, read-only, full, cannot open.
_DISK_CODES = {10, 8, 13, 14}
# Paths already warned about in this process: a run with several models (or passes) warns once per cache.
_WARNED: set[str] = set()


def disk_problem(exc: Exception) -> bool:
    """Whether an error opening or using the cache comes from the disk (full, read-only) rather than a damaged file."""
    if isinstance(exc, OSError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _DISK_CODES


def warn_once(path: Path, text: str) -> None:
    """One warning per cache path and process."""
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        warnings.warn(text, stacklevel=4)


# File systems that other machines write too: SQLite's WAL needs memory shared by every writer, so there
# the cache uses the rollback journal and the file system's locks instead.
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs"}
    | {f"fuse.{name}" for name in ("sshfs", "glusterfs", "cephfs", "rclone", "s3fs", "gcsfuse", "juicefs")}
)


def filesystem_type(path: Path, mounts: str | None = None) -> str | None:
    """The type of the file system holding `path`, from /proc/mounts (None where that cannot be read)."""
    if mounts is None:
        try:
            mounts = Path("/proc/mounts").read_text(encoding="utf-8")
        except OSError:
            return None
    target, best, kind = str(path.resolve()), "", None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, fields[2]
    return kind


def journal_mode(folder: Path, mounts: str | None = None) -> str:
    """WAL on a local disk; the rollback journal on a network file system (one shared by a team's machines)."""
    kind = filesystem_type(folder, mounts) or ""
    return "DELETE" if kind in NETWORK_FILESYSTEMS else "WAL"


def default_cache_path() -> Path:
    """$FAIRPROBE_CACHE_DB, else calls.sqlite in fairprobe's cache folder."""
    env = os.environ.get("FAIRPROBE_CACHE_DB")
    return Path(env) if env else cache_dir() / "calls.sqlite"


def cache_key(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj` (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return sha256_bytes(text.encode("utf-8"))


@dataclass(frozen=True)
class CacheStats:
    """What `fairprobe cache stats` prints."""

    path: Path
    entries: int
    size_bytes: int
    by_kind: dict[str, int]
    by_model: dict[str, int]
    by_model_kind: dict[str, dict[str, int]]
    model_bytes: dict[str, int]


# What fairprobe keeps in its cache folder besides the answers; `cache clear --models` drops the rebuilt ones.
STORED = {
    "models": "converted model (safetensors from GGUF; rebuilt on next use)",
    "gguf": "GGUF assembled from package parts (rebuilt on next use)",
    "data": "downloaded probe-set files (pinned, sha256-checked)",
    "digests": "model-folder file digests (recomputed on next use)",
}
REBUILT = ("models", "gguf", "digests")


@dataclass(frozen=True)
class StoredItem:
    """One thing in fairprobe's cache folder: what it is, where, how many bytes."""

    what: str
    path: Path
    size: int


def stored_items(root: Path | None = None) -> list[StoredItem]:
    """Everything fairprobe keeps in its cache folder besides the answer database: one row per converted model,
    assembled GGUF and download source, one for the digests."""
    root = root or cache_dir()
    items = []
    for name, what in STORED.items():
        folder = root / name
        if not folder.is_dir():
            continue
        parts = [folder] if name == "digests" else sorted(p for p in folder.iterdir() if not p.name.startswith("."))
        items.extend(StoredItem(what, part, tree_size(part)) for part in parts)
    return items


def clear_rebuilt(root: Path | None = None) -> list[StoredItem]:
    """Delete what fairprobe rebuilds on next use (converted models, assembled GGUF, digests); returns what went."""
    root = root or cache_dir()
    gone = [item for item in stored_items(root) if item.path.relative_to(root).parts[0] in REBUILT]
    for name in REBUILT:
        shutil.rmtree(root / name, ignore_errors=True)
    return gone


class Cache:
    """A key -> JSON value store; `kind` (generation, judge, ...) and `model` only label entries for stats."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        if self.path.exists() and self.path.is_dir():
            raise ConfigError(f"cache path is a folder, not a file: {self.path}")
        if self.path.exists() and not self.path.is_file():
            raise ConfigError(f"cache path is not a regular file (a pipe, socket or device): {self.path}")
        self._local = threading.local()
        self.write_error: str | None = None
        self.unavailable: str | None = None
        self.journal = "WAL"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.journal = journal_mode(self.path.parent)
            self._connect()
        except (OSError, sqlite3.Error) as exc:
            self._disk_failed(exc)

    def _disk_failed(self, exc: Exception) -> None:
        """Go on without the cache after a disk failure (one warning); any other failure is the damaged-file error."""
        if not disk_problem(exc):
            raise self._damaged(exc) from None  # type: ignore[arg-type]
        self.unavailable = str(getattr(exc, "strerror", None) or exc)
        warn_once(
            self.path,
            f"cache {self.path} cannot be used ({self.unavailable}): the run goes on without it, "
            f"answers are kept in the run folder but not cached",
        )

    def _damaged(self, exc: sqlite3.Error) -> ConfigError:
        """The one-line error for a database sqlite cannot read, with how to get past it."""
        return ConfigError(
            f"cache database {self.path} is damaged or unreadable ({exc}): delete it (and any {self.path.name}-wal, "
            f"{self.path.name}-shm beside it), or run with --no-cache or --cache OTHER_FILE"
        )

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = self._open_for_writing()
            except sqlite3.DatabaseError as exc:
                if not disk_problem(exc):
                    raise self._damaged(exc) from None
                if not self.path.is_file():
                    raise
                conn = self._open_read_only(exc)
            self._local.conn = conn
        return conn

    def _open_for_writing(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            conn.execute(f"PRAGMA journal_mode={self.journal}")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    def _open_read_only(self, why: sqlite3.Error) -> sqlite3.Connection:
        """An existing cache the disk will not let us write (read-only, full): its answers are still reused.

        A WAL database on a read-only file system cannot make its shared-memory file, so the last try opens it as
        immutable (nothing can write it there either)."""
        for query in ("mode=ro", "mode=ro&immutable=1"):
            uri = f"{self.path.resolve().as_uri()}?{query}"
            conn = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
            try:
                conn.execute("SELECT COUNT(*) FROM entries WHERE key = ''").fetchone()
            except sqlite3.Error:
                conn.close()
                continue
            self._write_failed(why)
            return conn
        raise why

    def close(self) -> None:
        """Close this thread's connection (its WAL is folded into the database file)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """The stored values of those keys that are present; an entry that is not JSON is dropped (asked again)."""
        if self.unavailable is not None:
            return {}
        found: dict[str, Any] = {}
        damaged: list[str] = []
        try:
            conn = self._connect()
            for start in range(0, len(keys), 500):
                chunk = keys[start : start + 500]
                marks = ",".join("?" * len(chunk))
                for key, value in conn.execute(f"SELECT key, value FROM entries WHERE key IN ({marks})", chunk):
                    try:
                        found[key] = json.loads(value)
                    except (TypeError, ValueError, RecursionError):
                        damaged.append(key)
        except sqlite3.Error as exc:
            self._disk_failed(exc)
            return {}
        self.discard(damaged)
        return found

    def discard(self, keys: list[str]) -> None:
        """Delete entries that cannot be used (damaged or of the wrong shape), so they are asked again."""
        if not keys or self.unavailable is not None or self.write_error is not None:
            return
        try:
            self._connect().executemany("DELETE FROM entries WHERE key = ?", [(k,) for k in keys])
        except sqlite3.Error as exc:
            self._write_failed(exc)

    def get(self, key: str) -> Any | None:
        """The stored value of one key, or None."""
        return self.get_many([key]).get(key)

    def put_many(self, items: list[tuple[str, Any]], kind: str, model: str) -> None:
        """Store (key, JSON-able value) pairs in one transaction."""
        if not items or self.unavailable is not None or self.write_error is not None:
            return
        now = time.time()
        rows = [(k, kind, redact(model), redact(json.dumps(v, ensure_ascii=False)), now) for k, v in items]
        try:
            conn = self._connect()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            self._write_failed(exc)

    def _write_failed(self, exc: sqlite3.Error) -> None:
        """A write that fails (read-only file, full disk) only warns once: the run keeps its answers in samples.jsonl."""
        if self.write_error is None:
            self.write_error = str(exc)
            warn_once(
                self.path,
                f"cache {self.path} cannot be written ({exc}): answers are kept in the run folder but not cached",
            )

    def put(self, key: str, value: Any, kind: str, model: str) -> None:
        """Store one value (e.g. a judge verdict)."""
        self.put_many([(key, value)], kind, model)

    def _usable(self) -> sqlite3.Connection:
        """The connection for `cache stats` / `cache clear`, which cannot go on without the database."""
        if self.unavailable is not None:
            raise ConfigError(f"cache {self.path} cannot be opened: {self.unavailable}")
        return self._connect()

    def stats(self) -> CacheStats:
        """Entry counts by kind and model, and the database size."""
        conn = self._usable()
        try:
            by_kind = dict(conn.execute("SELECT kind, COUNT(*) FROM entries GROUP BY kind ORDER BY kind").fetchall())
            rows = conn.execute(
                "SELECT model, kind, COUNT(*), SUM(LENGTH(key) + LENGTH(value)) FROM entries "
                "GROUP BY model, kind ORDER BY model, kind"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None
        by_model_kind: dict[str, dict[str, int]] = {}
        model_bytes: dict[str, int] = {}
        for model, kind, count, size in rows:
            by_model_kind.setdefault(model, {})[kind] = count
            model_bytes[model] = model_bytes.get(model, 0) + int(size or 0)
        by_model = {model: sum(kinds.values()) for model, kinds in by_model_kind.items()}
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return CacheStats(self.path, sum(by_kind.values()), size, by_kind, by_model, by_model_kind, model_bytes)

    def clear(self, model: str | None = None) -> int:
        """Delete every entry (or one model's); returns how many were deleted."""
        conn = self._usable()
        try:
            if model is None:
                deleted = conn.execute("DELETE FROM entries").rowcount
            else:
                deleted = conn.execute("DELETE FROM entries WHERE model = ?", (model,)).rowcount
            conn.execute("VACUUM")
        except sqlite3.DatabaseError as exc:
            raise self._damaged(exc) from None
        return int(deleted)
