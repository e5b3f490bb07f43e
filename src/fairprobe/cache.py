"""Content-addressed SQLite store of paid-for model calls: generations, word probabilities, judge verdicts.

Keys are sha256 digests of a JSON object (model identity, decoding parameters, exact prompt, word pairs),
so rerunning a suite, adding a probe set or re-scoring with another detector asks the model nothing twice.
The database lives in fairprobe's cache folder (`$FAIRPROBE_CACHE_DB` or `--cache PATH` move it);
WAL mode and one connection per thread make it safe for concurrent requests and concurrent runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fairprobe.errors import ConfigError
from fairprobe.io import cache_dir
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


def default_cache_path() -> Path:
    """$FAIRPROBE_CACHE_DB, else calls.sqlite in fairprobe's cache folder."""
    env = os.environ.get("FAIRPROBE_CACHE_DB")
    return Path(env) if env else cache_dir() / "calls.sqlite"


def cache_key(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj` (sorted keys, no whitespace)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CacheStats:
    """What `fairprobe cache stats` prints."""

    path: Path
    entries: int
    size_bytes: int
    by_kind: dict[str, int]
    by_model: dict[str, int]


class Cache:
    """A key -> JSON value store; `kind` (generation, judge, ...) and `model` only label entries for stats."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else default_cache_path()
        if self.path.exists() and self.path.is_dir():
            raise ConfigError(f"cache path is a folder, not a file: {self.path}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            try:
                conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute(_SCHEMA)
            except sqlite3.DatabaseError as exc:
                raise ConfigError(f"cannot open cache database {self.path}: {exc}") from None
            self._local.conn = conn
        return conn

    def get_many(self, keys: list[str]) -> dict[str, Any]:
        """The stored values of those keys that are present."""
        conn = self._connect()
        found: dict[str, Any] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for key, value in conn.execute(f"SELECT key, value FROM entries WHERE key IN ({marks})", chunk):
                found[key] = json.loads(value)
        return found

    def get(self, key: str) -> Any | None:
        """The stored value of one key, or None."""
        return self.get_many([key]).get(key)

    def put_many(self, items: list[tuple[str, Any]], kind: str, model: str) -> None:
        """Store (key, JSON-able value) pairs in one transaction."""
        if not items:
            return
        now = time.time()
        rows = [(k, kind, redact(model), redact(json.dumps(v, ensure_ascii=False)), now) for k, v in items]
        conn = self._connect()
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?)", rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def put(self, key: str, value: Any, kind: str, model: str) -> None:
        """Store one value (e.g. a judge verdict)."""
        self.put_many([(key, value)], kind, model)

    def stats(self) -> CacheStats:
        """Entry counts by kind and model, and the database size."""
        conn = self._connect()
        by_kind = dict(conn.execute("SELECT kind, COUNT(*) FROM entries GROUP BY kind ORDER BY kind").fetchall())
        by_model = dict(conn.execute("SELECT model, COUNT(*) FROM entries GROUP BY model ORDER BY model").fetchall())
        size = sum(p.stat().st_size for p in self.path.parent.glob(self.path.name + "*") if p.is_file())
        return CacheStats(self.path, sum(by_kind.values()), size, by_kind, by_model)

    def clear(self, model: str | None = None) -> int:
        """Delete every entry (or one model's); returns how many were deleted."""
        conn = self._connect()
        if model is None:
            deleted = conn.execute("DELETE FROM entries").rowcount
        else:
            deleted = conn.execute("DELETE FROM entries WHERE model = ?", (model,)).rowcount
        conn.execute("VACUUM")
        return int(deleted)
