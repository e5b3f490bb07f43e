"""One writer per output folder, and no folder overwritten that holds something else.

A folder that fairprobe writes (a run, a `score` output) is locked with an advisory lock on
`.fairprobe.lock`, which names the holder (process id, host, command, start time). The kernel drops the
lock when its holder dies, so a lock left by a killed run is taken over at once and safely (no pid guessing,
no race). A second process gets a one-line refusal naming the holder.

A folder is written only when it is absent, empty, or holds a manifest of the same kind whose settings
fingerprint matches; anything else (another run's settings, a `score` output, a run whose manifest was
deleted, a manifest that is not one, unrelated files) is refused, and a refused run names each setting that
differs with both values. A run folder that holds no answer yet (its run failed before the first) is taken over
by a run of other settings: nothing in it was computed.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

from fairprobe.errors import ConfigError
from fairprobe.io import fingerprint
from fairprobe.redact import clip, redacted_command

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; one writer per folder is then the user's care
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".fairprobe.lock"
MANIFEST = "manifest.json"


class FolderLock:
    """An exclusive advisory lock on a folder's `.fairprobe.lock`, held until `release` (or process death)."""

    def __init__(self, folder: Path, what: str = "output folder") -> None:
        self.folder = folder
        self.path = folder / LOCK_NAME
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> FolderLock:
        """Take the lock or raise a ConfigError naming the process that holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                os.close(fd)
                raise ConfigError(
                    f"{self.what} {self.folder} is in use by {holder}: wait for it to finish or choose another --out"
                ) from None
            except OSError:  # a file system without locks (some network mounts): go on unlocked
                pass
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": _command()}
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would let two processes lock different files)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _command() -> str:
    return clip(redacted_command(), 117)


def _holder(fd: int) -> str:
    """'process 1234 (fairprobe run ..., started 12:01:02 on host)' from the lock file, or 'another process'."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        started = time.strftime("%H:%M:%S", time.localtime(float(record["started"])))
        return f"process {int(record['pid'])} ({record.get('command') or 'fairprobe'}, started {started} on {record.get('host')})"
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return "another process"


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The folder's manifest.json as a dict; None when absent; a ConfigError when it is not a fairprobe manifest."""
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        return None
    try:
        if not path.is_file():
            raise ValueError
        obj = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (OSError, ValueError, RecursionError):
        obj = None
    if not isinstance(obj, dict) or not isinstance(obj.get("fingerprint"), str):
        raise ConfigError(
            f"{folder} holds a {MANIFEST} that is not a fairprobe manifest: choose another --out or delete the folder"
        )
    return obj


def check_folder(folder: Path, kind: str, fingerprint: str, settings: dict[str, Any]) -> dict[str, Any] | None:
    """Allow writing `folder` for a `kind` ("run" or "score") with these settings; returns its manifest if any.

    Refuses (ConfigError) a file, a folder of another kind or settings, or one with files but no manifest.
    """
    if folder.exists() and not folder.is_dir():
        raise ConfigError(f"output folder is a file: {folder}")
    if not folder.exists():
        return None
    manifest = read_manifest(folder)
    if manifest is None:
        others = sorted(p.name for p in folder.iterdir() if p.name != LOCK_NAME)
        if others:
            shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
            raise ConfigError(
                f"output folder {folder} holds files but no fairprobe {MANIFEST} ({shown}): "
                "it is not refilled; choose another --out or delete it"
            )
        return None
    found_kind = manifest.get("kind", "run")
    if found_kind != kind:
        raise ConfigError(
            f"output folder {folder} holds a `fairprobe {found_kind}` output, not a {kind}: choose another --out or delete it"
        )
    if kind == "run" and manifest["fingerprint"] != fingerprint:
        if nothing_computed(folder):
            return None
        raise ConfigError(
            f"output folder {folder} holds a run with other settings ({differences(settings, _old_settings(manifest))}); "
            "choose another --out or delete it"
        )
    return manifest


def nothing_computed(folder: Path) -> bool:
    """Whether a run folder holds no answer (a run that failed before its first one, e.g. without a key): a run
    with other settings may then take it over, as there is nothing to keep."""
    samples = folder / "samples.jsonl"
    return not (folder / "summary.json").exists() and (not samples.exists() or samples.stat().st_size == 0)


def _old_settings(manifest: dict[str, Any]) -> dict[str, Any] | None:
    """The settings a manifest records (older manifests: its options and decoding)."""
    settings = manifest.get("settings")
    if isinstance(settings, dict):
        return settings
    options = manifest.get("options")
    if isinstance(options, dict):
        return {**options, "generation": manifest.get("decoding")}
    return None


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as {'a.b': value}."""
    if not isinstance(obj, dict):
        return {prefix: obj}
    out: dict[str, Any] = {}
    for key, value in obj.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def show_value(value: Any) -> str:
    """A setting's value as a user would type it: none for null, comma-separated lists, long lists counted."""
    if value is None:
        return "none"
    if isinstance(value, list):
        if len(value) > 6 or any(isinstance(v, list | dict) for v in value):
            return f"{len(value)} items"
        return ",".join(str(v) for v in value) or "none"
    return clip(json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value), 57)


def differences(new: dict[str, Any], old: dict[str, Any] | None) -> str:
    """'limit: 16 now, none in the folder; probes: template now, none in the folder' for each differing setting."""
    if old is None:
        return "its manifest does not record them"
    now, then = flatten(new), flatten(old)
    parts = []
    for key in sorted(set(now) | set(then)):
        if key in now and key in then and now[key] == then[key]:
            continue
        a = show_value(now[key]) if key in now else "absent"
        b = show_value(then[key]) if key in then else "absent"
        if a == b:
            a, b = f"{a} ({_digest(now.get(key))})", f"{b} ({_digest(then.get(key))})"
        parts.append(f"{key.replace('_', '-')}: {a} now, {b} in the folder")
    return "; ".join(parts) if parts else "the same recorded settings, from another fairprobe version"


def _digest(value: Any) -> str:
    return fingerprint(value, 8)
