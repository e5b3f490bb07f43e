"""The one runner: resolves model, probe sets and suite, asks the model in batches, writes the run directory.

A run directory holds `manifest.json`, `samples.jsonl` (appended batch by batch, so an interrupted
run loses nothing and the same command resumes it) and `summary.json` (written last, atomically).
"""

from __future__ import annotations

import json
import os
import warnings
import zlib
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fairprobe import __version__
from fairprobe.cache import Cache
from fairprobe.catalog import PROBE_SETS, RUN_FOLDER_WRITERS
from fairprobe.errors import ConfigError, DataError, FairprobeError, RunInterrupted
from fairprobe.families import Family, family_of_set, load_probe_set
from fairprobe.families.base import Request
from fairprobe.io import atomic_write_json, atomic_write_text, split_lines
from fairprobe.models import GenerationConfig, ModelBackend, load_model
from fairprobe.models.base import Completion
from fairprobe.models.cached import CachedBackend
from fairprobe.options import RunOptions
from fairprobe.progress import Progress, SilentProgress
from fairprobe.records import Probe, ProbeSet, Sample, SetResult, Summary
from fairprobe.redact import redact
from fairprobe.runfolder import FolderLock, check_folder

__all__ = ["RunOptions", "run", "run_set", "run_with_samples"]


def batches_of(probes: list[Probe], size: int) -> list[list[Probe]]:
    """Probes grouped for batching: similar prompt lengths together (less padding), order fixed."""
    order = sorted(range(len(probes)), key=lambda i: (len(probes[i].prompt), i))
    ordered = [probes[i] for i in order]
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def check_out_dir(out: Path) -> None:
    """The output folder must be a folder (or absent)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder is a file: {out}")


def family_of(set_name: str) -> Family:
    """The family of a probe set of this run (load_sets has checked that every set has one)."""
    family = family_of_set(set_name)
    if family is None:
        raise DataError(f"probe set {set_name!r} belongs to no registered probe family")
    return family


def parse_sample(line: str) -> Sample:
    """One samples.jsonl line as its family's record (the base record when its family is not registered)."""
    obj = json.loads(line)
    if not isinstance(obj, dict):
        raise ValueError("a sample is a JSON object")
    family = family_of_set(str(obj.get("set", "")))
    return (family.record if family else Sample).model_validate(obj)


def read_samples(path: Path) -> list[Sample]:
    """Samples of an earlier (possibly killed) run; a torn or damaged line is dropped (its batch is redone)."""
    if not path.is_file():
        return []
    out: list[Sample] = []
    for line in split_lines(path.read_bytes().decode("utf-8", errors="replace")):
        try:
            out.append(parse_sample(line))
        except (ValueError, RecursionError):
            continue
    return out


class RunWriter:
    """Owns a run directory: resumable samples.jsonl, manifest.json and summary.json."""

    def __init__(self, out: Path, fingerprint: str, settings: dict[str, Any] | None = None) -> None:
        self.out = out
        self.samples_path = out / "samples.jsonl"
        self.fingerprint = fingerprint
        self.previous: dict[tuple[str, str], Sample] = {}
        settings = settings or {}
        check_folder(out, "run", fingerprint, settings)  # before locking: leave nothing in a foreign folder
        self.lock = FolderLock(out).acquire()
        try:
            if check_folder(out, "run", fingerprint, settings) is not None:
                self.previous = {(s.set, s.id): s for s in read_samples(self.samples_path)}
            else:  # mark the folder as this run's before anything else is written in it
                atomic_write_json(
                    out / "manifest.json", {"kind": "run", "fingerprint": fingerprint, "settings": settings}
                )
            # Keep only whole records: a power loss can leave a torn last line.
            atomic_write_text(self.samples_path, "".join(s.model_dump_json() + "\n" for s in self.previous.values()))
            self._handle = self.samples_path.open("a", encoding="utf-8")
        except BaseException:
            self.lock.release()
            raise

    def done(self, set_name: str, batch: list[Probe]) -> list[Sample] | None:
        """The saved samples of a batch if every one of them is there (a batch is redone whole otherwise)."""
        found = [self.previous.get((set_name, p.id)) for p in batch]
        return None if any(s is None for s in found) else found  # type: ignore[return-value]

    def append(self, samples: Iterable[Sample]) -> None:
        """Append samples not yet on disk and force them there before going on (no sample is written twice)."""
        for s in samples:
            if (s.set, s.id) in self.previous:
                continue
            self._handle.write(redact(s.model_dump_json()) + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def finish(self, ordered: list[Sample], summary: Summary) -> None:
        """Rewrite samples in canonical order, then write the summary atomically."""
        self._handle.close()
        atomic_write_text(self.samples_path, "".join(s.model_dump_json() + "\n" for s in ordered))
        atomic_write_json(self.out / "summary.json", summary.to_json_obj())

    def close(self) -> None:
        """Close the samples file and give the folder up (on success, error or interrupt)."""
        if not self._handle.closed:
            self._handle.close()
        self.lock.release()


def load_sets(options: RunOptions) -> list[ProbeSet]:
    """Load every probe set of the run before any model work, so bad data fails fast."""
    sets = []
    for name in options.probe_names():
        family = family_of_set(name)
        if family is not None and name not in PROBE_SETS and family.suite != options.suite:
            raise ConfigError(f"probe set {name!r} is a statement file: it runs in the {family.suite} suite only")
        if name in PROBE_SETS and PROBE_SETS.get(name).suite != options.suite:
            raise ConfigError(
                f"probe set {name!r} belongs to suite {PROBE_SETS.get(name).suite!r}, not {options.suite!r}"
            )
        sets.append(
            load_probe_set(
                name,
                data_dir=options.data_dir,
                limit=options.limit,
                limit_order=options.limit_order,
                **options.probe_options,
            )
        )
    if not sets:
        raise DataError(f"suite {options.suite!r} has no probe sets to run")
    return sets


def batch_seed(seed: int, set_name: str, index: int) -> int:
    """A sampling seed per batch, so a resumed run draws the same as an uninterrupted one."""
    return (seed * 1_000_003 + zlib.crc32(set_name.encode()) + index) % (2**31)


def run_set(
    backend: ModelBackend,
    family: Family,
    ps: ProbeSet,
    options: RunOptions,
    writer: RunWriter | None = None,
    progress: Progress | None = None,
) -> list[Sample]:
    """Ask the model every probe of one set (skipping batches already saved) and return its samples."""
    progress = progress or SilentProgress()
    gen = family.generation(options)
    family_options = family.parse_options(options.probe_options, ps.name)
    wants_probs = family.needs_word_probs and options.implicit != "off"
    pairs = [tuple(p) for p in options.attribute_words().pairs] if wants_probs else None
    by_id: dict[str, Sample] = {}
    progress.start(ps.name, len(ps.probes))
    for index, batch in enumerate(batches_of(ps.probes, options.batch_size)):
        saved = writer.done(ps.name, batch) if writer else None
        if saved is not None:
            by_id.update({s.id: s for s in saved})
            progress.advance(len(batch))
            continue
        requests = [(probe, r) for probe in batch for r in family.requests(ps, probe, options, family_options)]
        config = gen.model_copy(update={"seed": batch_seed(options.seed, ps.name, index)})
        replies = ask(backend, [r for _, r in requests], config, pairs)  # type: ignore[arg-type]
        grouped: dict[str, dict[str, Any]] = {}
        for (probe, request), reply in zip(requests, replies, strict=True):
            grouped.setdefault(probe.id, {})[request.key] = reply
        samples = []
        for probe in batch:
            sample = family.sample(ps, probe, grouped[probe.id], options, family_options)
            sample.batch = index
            samples.append(sample)
        if writer:
            writer.append(samples)
        by_id.update({s.id: s for s in samples})
        progress.advance(len(batch))
    return [by_id[p.id] for p in ps.probes]


def ask(
    backend: ModelBackend, requests: list[Request], config: GenerationConfig, pairs: list[tuple[str, str]] | None
) -> list[Completion]:
    """Replies to a batch's requests, in order: one backend call per distinct (length, scored words).

    A request that names its own `words` has those scored instead of the run's pairs (when the run reads
    probabilities at all) and may ask fewer new tokens; the others share one call as before.
    """
    calls: dict[tuple[int | None, tuple | None], list[int]] = {}
    for i, r in enumerate(requests):
        calls.setdefault((r.max_new_tokens, r.words), []).append(i)
    out: list[Completion | None] = [None] * len(requests)
    for (length, words), indices in calls.items():
        cfg = config if length is None else config.model_copy(update={"max_new_tokens": length})
        scored = pairs if words is None or pairs is None else [tuple(p) for p in words]
        for i, reply in zip(indices, backend.generate([requests[i].prompt for i in indices], cfg, scored), strict=True):  # type: ignore[arg-type]
            out[i] = reply
    return out  # type: ignore[return-value]


def build_manifest(options: RunOptions, backend: ModelBackend, sets: list[ProbeSet], started: str) -> dict[str, Any]:
    """The manifest of design.md: version, model, decoding, seed, sources and sha256s, times."""
    return {
        "fairprobe_version": __version__,
        "kind": "run",
        "fingerprint": options.fingerprint(),
        "settings": options.settings(),
        "suite": options.suite,
        "model": backend.identity(),
        "decoding": family_of(sets[0].name).generation(options).model_dump(),
        "seed": options.seed,
        "instruction": options.instruction,
        "attribute_words": {
            "source": str(options.words_file or "fairprobe default"),
            "pairs": len(options.attribute_words().pairs),
        },
        "probe_sets": {ps.name: probe_set_record(ps) for ps in sets},
        "options": options.model_dump(mode="json", exclude={"generation"}),
        "started": started,
    }


def probe_set_record(ps: ProbeSet) -> dict[str, Any]:
    """A set's manifest entry: source, sha256, n, and how a --limit drew its prompts."""
    record: dict[str, Any] = {"source": ps.source, "sha256": ps.sha256, "n": len(ps.probes)}
    if ps.drawn is not None:
        record["drawn"] = ps.drawn.model_dump(mode="json")
    return record


def implicit_manifest(backend: ModelBackend, results: dict[str, SetResult]) -> dict[str, Any] | None:
    """How GLD/ADD's probabilities were read: the endpoint's detected abilities and, per set, mode and top-k used."""
    detected = getattr(getattr(backend, "inner", backend), "implicit_info", None)
    per_set = {name: r.implicit for name, r in results.items() if r.implicit is not None}
    if detected is None and not per_set:
        return None
    return {**(detected() if detected else {}), "sets": per_set}


def write_report(out: Path) -> None:
    """The registered extra files of a finished run (report.html); a failure only warns, since the run's own
    files are already written."""
    for name in RUN_FOLDER_WRITERS.names():
        try:
            RUN_FOLDER_WRITERS.get(name)(out)
        except Exception as exc:
            warnings.warn(f"{name} not written in {out}: {exc}", stacklevel=2)


def load_backend(options: RunOptions, adapter: str | None = None) -> ModelBackend:
    """The model a run's options name (with `adapter` instead of options.adapter when given), behind the cache."""
    endpoint: dict[str, Any] = {"base_url": options.base_url, "concurrency": options.concurrency}
    if options.model.startswith("openai:"):
        endpoint.update(implicit=options.implicit, top_logprobs=options.top_logprobs)
    flags = {"device": options.device, "dtype": options.dtype, "batch_size": options.batch_size}
    flags.update(adapter=adapter or options.adapter, **{k: v for k, v in endpoint.items() if v is not None})
    backend = load_model(options.model, **{**flags, **options.model_args})
    if options.use_cache:
        backend = CachedBackend(backend, Cache(options.cache), options.model_args)
    return backend


def run_with_samples(
    options: RunOptions,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
    family: Family | None = None,
) -> tuple[Summary, dict[str, list[Sample]]]:
    """Run a suite and write the run directory; returns the summary and each set's samples.

    `family` replaces each set's own family (the sweep runs sampled settings without word probabilities).
    """
    progress = progress or SilentProgress()
    out = options.output_dir()
    check_out_dir(out)
    sets = load_sets(options)
    writer = RunWriter(out, options.fingerprint(), options.settings())
    try:
        if backend is None:
            progress.note(f"loading model {options.model}")
            backend = load_backend(options)
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        manifest = build_manifest(options, backend, sets, started)
        atomic_write_json(out / "manifest.json", manifest)
        for notice in getattr(getattr(backend, "inner", backend), "notices", []):
            progress.note(notice)
        results: dict[str, SetResult] = {}
        per_set: dict[str, list[Sample]] = {}
        for ps in sets:
            own = family or family_of(ps.name)
            try:
                per_set[ps.name] = run_set(backend, own, ps, options, writer, progress)
            except (FairprobeError, OSError) as exc:
                writer.close()
                done = len(read_samples(writer.samples_path))
                resume = f"{done} samples saved in {out}: run the same command again to resume"
                if isinstance(exc, OSError):  # a full disk, a file system gone read-only
                    where = exc.filename or writer.samples_path
                    raise DataError(f"cannot write {where}: {exc.strerror or exc}; {resume}") from exc
                raise type(exc)(f"{exc}; {resume}") from exc
            results[ps.name] = own.summarize(ps, per_set[ps.name], options)
            results[ps.name].drawn = ps.drawn
        if isinstance(backend, CachedBackend):
            progress.note(f"cache: {backend.hits} answers reused, {backend.misses} asked the model")
        summary = Summary(fairprobe_version=__version__, model=backend.name, results=results)
        writer.finish([s for samples in per_set.values() for s in samples], summary)
        manifest["implicit"] = implicit_manifest(backend, results)
        manifest["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        atomic_write_json(out / "manifest.json", manifest)
        write_report(out)
        return summary, per_set
    except KeyboardInterrupt:
        writer.close()
        raise RunInterrupted(out, len(read_samples(writer.samples_path))) from None
    finally:
        writer.close()


def run(
    options: RunOptions | None = None,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
    **kwargs: Any,
) -> Summary:
    """Run a suite on a model and write the run directory; returns the summary the CLI prints.

    `fairprobe.run(model="smollm2-135m-instruct", probes=["template"], limit=10)` works too.
    """
    return run_with_samples(options or RunOptions(**kwargs), backend, progress)[0]
