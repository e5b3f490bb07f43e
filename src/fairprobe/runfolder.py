"""Run folders: one writer per output folder, no folder overwritten that holds something else, and a run's
samples written, resumed and read back (RunWriter, read_samples).

A run folder holds `manifest.json`, `samples.jsonl` (appended batch by batch and forced to disk, so an interrupted
run loses nothing; a resumed run keeps its whole records and asks its failed items again) and `summary.json`
(written last, atomically). This layer knows no family: the runner passes which record class each sample is read
as, and how two records of the model's answer to the probe prompt differ.

A folder that fairprobe writes (a run, a `score` output) is locked with filelock's native lock on
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
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from fairprobe.errors import ConfigError, first_line
from fairprobe.io import atomic_write_json, fingerprint, split_lines
from fairprobe.records import Probe, Sample, Summary
from fairprobe.redact import clip, redact, redacted_command

LOCK_NAME = ".fairprobe.lock"
MANIFEST = "manifest.json"
# A failure's reason as the manifest and the final line keep it: its first line, cut to this many characters.
REASON_CHARS = 160
# Which record class a samples.jsonl object is read as (its family's, for the runner).
RecordType = Callable[[dict[str, Any]], type[Sample]]


class FolderLock:
    """An exclusive lock on a folder's `.fairprobe.lock` (filelock's native lock: flock on Unix, the kernel drops it
    when its holder dies), held until `release`.

    filelock says only that a lock is taken, not by whom, so the holder's record (process id, host, command, start
    time) is written into the lock file once it is held (filelock's `on_acquired`) and read back for the refusal.
    filelock 4.3 or later: its `on_acquired`, and a lock file a contender opens without truncating the record.
    """

    def __init__(self, folder: Path, what: str = "output folder") -> None:
        self.folder = folder
        self.path = folder / LOCK_NAME
        self.what = what
        self._lock = FileLock(
            self.path, thread_local=False, blocking=False, preserve_lock_file=True, on_acquired=_write_holder
        )

    def acquire(self) -> FolderLock:
        """Take the lock or raise a ConfigError naming the process that holds it."""
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            raise ConfigError(
                f"{self.what} {self.folder} is in use by {_holder(self.path)}: wait for it to finish or choose another --out"
            ) from None
        except OSError:  # a file system without locks (some network mounts): go on unlocked
            pass
        return self

    def release(self) -> None:
        """Drop the lock (the file stays: removing it would let two processes lock different files)."""
        self._lock.release()

    def __enter__(self) -> FolderLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _write_holder(fd: int) -> None:
    """Record this process as the holder in the lock file just taken."""
    record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "command": _command()}
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode("utf-8"), 0)


def _command() -> str:
    return clip(redacted_command(), 117)


def _holder(path: Path) -> str:
    """'process 1234 (fairprobe run ..., started 12:01:02 on host)' from the lock file, or 'another process'."""
    try:
        record = json.loads(path.read_bytes()[:4096].decode("utf-8"))
        started = time.strftime("%H:%M:%S", time.localtime(float(record["started"])))
        return f"process {int(record['pid'])} ({record.get('command') or 'fairprobe'}, started {started} on {record.get('host')})"
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError):
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


def base_record(obj: dict[str, Any]) -> type[Sample]:
    """Every record read as the base Sample (a caller that knows the families passes their record types)."""
    return Sample


def parse_sample(line: str, record_type: RecordType = base_record) -> Sample:
    """One samples.jsonl line as the record `record_type` picks for it (the runner: its family's record)."""
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a sample is a JSON object")
    return record_type(obj).model_validate(obj)


def read_samples(path: Path, record_type: RecordType = base_record) -> list[Sample]:
    """Samples of an earlier (possibly killed) run; a torn or damaged line is dropped (its batch is redone)."""
    if not path.is_file():
        return []
    out: list[Sample] = []
    for line in split_lines(path.read_bytes().decode("utf-8", errors="replace")):
        try:
            out.append(parse_sample(line, record_type))
        except (ValueError, RecursionError):
            continue
    return out


def whole_records(
    path: Path, record_type: RecordType, failed: set[tuple[str, str]] | None = None
) -> Iterator[tuple[tuple[str, str], bytes]]:
    """Each whole, readable record of a samples.jsonl as ((set, id), its line), one line in memory at a time;
    `failed` collects the keys whose last record is a failed item (a model call that failed: asked again)."""
    if not path.is_file():
        return
    with path.open("rb") as handle:
        for raw in handle:
            line = raw.decode("utf-8", errors="replace").strip()
            if not raw.endswith(b"\n") or not line:
                continue  # a torn last line (a power loss) is dropped: its batch is redone
            try:
                sample = parse_sample(line, record_type)
            except (ValueError, RecursionError):
                continue
            if failed is not None:
                (failed.add if sample.failure() else failed.discard)((sample.set, sample.id))
            yield (sample.set, sample.id), (line + "\n").encode("utf-8")


class SampleFile:
    """samples.jsonl with an index of where each (set, id) record lies: records are appended batch by batch and
    read back one at a time, so a run holds no more of them in memory than a batch (and the set's ids)."""

    def __init__(self, path: Path, record_type: RecordType = base_record) -> None:
        self.path = path
        self.record_type = record_type
        self.where: dict[tuple[str, str], tuple[int, int]] = {}

    def rewrite(self, records: Iterable[tuple[tuple[str, str], bytes]]) -> None:
        """Replace the file with these records (atomically), indexing them: a later record of a key (a failed item
        asked again) is the one the index holds."""
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        where: dict[tuple[str, str], tuple[int, int]] = {}
        with tmp.open("wb") as handle:
            for key, line in records:
                where[key] = (handle.tell(), len(line))
                handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)
        self.where = where

    def add(self, key: tuple[str, str], offset: int, length: int) -> None:
        """Index a record just appended."""
        self.where[key] = (offset, length)

    def read(self, key: tuple[str, str]) -> Sample | None:
        """The record of (set, id), read from the file, or None."""
        if key not in self.where:
            return None
        offset, length = self.where[key]
        with self.path.open("rb") as handle:
            handle.seek(offset)
            return parse_sample(handle.read(length).decode("utf-8"), self.record_type)

    def lines(self, keys: Iterable[tuple[str, str]]) -> Iterator[tuple[tuple[str, str], bytes]]:
        """The raw lines of these records, in this order."""
        with self.path.open("rb") as handle:
            for key in keys:
                if key in self.where:
                    offset, length = self.where[key]
                    handle.seek(offset)
                    yield key, handle.read(length)


class SetRecords(Sequence[Sample]):
    """A set's records in probe order, read from the run's samples file when asked (summaries, callers)."""

    def __init__(self, file: SampleFile, set_name: str, ids: list[str]) -> None:
        self.file, self.set_name, self.ids = file, set_name, ids

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.file.read((self.set_name, self.ids[index]))

    def __iter__(self) -> Iterator[Sample]:
        for _, line in self.file.lines((self.set_name, i) for i in self.ids):
            yield parse_sample(line.decode("utf-8"), self.file.record_type)


class RunWriter:
    """Owns a run directory: resumable samples.jsonl, manifest.json and summary.json."""

    def __init__(
        self,
        out: Path,
        fingerprint: str,
        settings: dict[str, Any] | None = None,
        record_type: RecordType = base_record,
    ) -> None:
        self.out = out
        self.samples_path = out / "samples.jsonl"
        self.fingerprint = fingerprint
        self.file = SampleFile(self.samples_path, record_type)
        settings = settings or {}
        check_folder(out, "run", fingerprint, settings)  # before locking: leave nothing in a foreign folder
        self.lock = FolderLock(out).acquire()
        try:
            earlier = check_folder(out, "run", fingerprint, settings)
            resumed = earlier is not None
            self.earlier: dict[str, Any] = earlier or {}
            # A folder of other settings whose run saved no answer is taken over (check_folder allows it).
            self.taken_over = not resumed and (out / "manifest.json").exists()
            # How the samples on disk were scored (a server's detected mode), and the model's answer to the fixed
            # probe when its server gave one, kept across resumes.
            self.scoring: str | None = earlier.get("scoring") if earlier else None
            self.model_answer: Any = earlier.get("model_fingerprint") if earlier else None
            if not resumed:  # mark the folder as this run's before anything else is written in it
                atomic_write_json(
                    out / "manifest.json", {"kind": "run", "fingerprint": fingerprint, "settings": settings}
                )
            # Keep only whole records: a power loss can leave a torn last line. Failed items are asked again.
            self.failed: set[tuple[str, str]] = set()
            self.file.rewrite(whole_records(self.samples_path, record_type, self.failed) if resumed else ())
            self._handle = self.samples_path.open("ab")
        except BaseException:
            self.lock.release()
            raise

    @property
    def saved(self) -> int:
        """How many records are on disk."""
        return len(self.file.where)

    def check_scoring(self, mode: str) -> None:
        """Refuse to resume samples scored one way ("exact", "topk", "local") with a backend that scores another
        (a server that echoed prompt logprobs before and gives only top-k now): one set would hold both."""
        if self.saved and self.scoring is not None and self.scoring != mode:
            raise ConfigError(
                f"the samples in {self.out} were scored {self.scoring!r}, this model scores {mode!r}: resuming "
                "would mix the two in one set; give an endpoint that scores as before, or another --out"
            )
        self.scoring = mode

    def resume_hint(self) -> str:
        """How many samples are saved where, and how to go on."""
        return f"{self.saved} samples saved in {self.out}: run the same command again to resume"

    def check_model(
        self, found: dict[str, Any] | None, differ: Callable[[dict[str, Any], dict[str, Any]], str | None]
    ) -> None:
        """Refuse to resume samples whose server answered the fixed probe otherwise than it does now (a model or
        tokenizer swapped under the same name, models/fingerprint.py): the run would mix two models.
        `differ(before, now)` says how two records of the answer differ (None: alike)."""
        before = self.model_answer
        if self.saved and found is not None and isinstance(before, dict):
            try:
                why = differ(before, found)
            except (KeyError, TypeError, ValueError):
                why = "the manifest's record of the model's answer is damaged"
            if why is not None:
                raise ConfigError(
                    f"the samples in {self.out} came from another model than the server serves now: {why}; "
                    "resuming would mix two models in one run: serve the model as before, or give another --out"
                )
        if found is not None:  # the first record stays (no drift within tolerance adds up), new parts join it
            self.model_answer = {**found, **before} if isinstance(before, dict) else found

    def answered(self, set_name: str, probe: Probe) -> bool:
        """Whether a probe's sample is saved and its model calls came back (a failed item is asked again)."""
        key = (set_name, probe.id)
        return key in self.file.where and key not in self.failed

    def append(self, samples: Iterable[Sample]) -> None:
        """Append samples not yet answered and force them there before going on: a sample is written once, a failed
        item again when it is asked again (its new record replaces the old one)."""
        for s in samples:
            key = (s.set, s.id)
            if key in self.file.where and key not in self.failed:
                continue
            line = (redact(s.model_dump_json()) + "\n").encode("utf-8")
            self.file.add(key, self._handle.tell(), len(line))
            self._handle.write(line)
            (self.failed.add if s.failure() else self.failed.discard)(key)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def failures(self, keys: Iterable[tuple[str, str]]) -> dict[str, int]:
        """Why the failed items among these keys failed: each reason (its first line) with how many items."""
        reasons: dict[str, int] = {}
        for key in keys:
            if key in self.failed:
                sample = self.file.read(key)
                reason = first_line((sample.failure() if sample else None) or "unreadable record")[:REASON_CHARS]
                reasons[reason] = reasons.get(reason, 0) + 1
        return reasons

    def records(self, set_name: str, ids: list[str]) -> SetRecords:
        """A set's saved records, in the order of `ids`, read from disk when asked."""
        return SetRecords(self.file, set_name, ids)

    def finish(self, order: list[tuple[str, str]], summary: Summary) -> None:
        """Rewrite samples in canonical order (streamed from the file), then write the summary atomically."""
        self._handle.close()
        self.file.rewrite(self.file.lines(order))
        atomic_write_json(self.out / "summary.json", summary.to_json_obj())

    def close(self) -> None:
        """Close the samples file and give the folder up (on success, error or interrupt)."""
        if not self._handle.closed:
            self._handle.close()
        self.lock.release()
