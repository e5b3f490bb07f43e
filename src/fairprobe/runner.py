"""The one runner: runs a run plan (`fairprobe.plan`): loads its probe sets, asks the model in batches, writes the
run directory.

A run directory holds `manifest.json`, `samples.jsonl` (appended batch by batch, so an interrupted
run loses nothing and the same command resumes it) and `summary.json` (written last, atomically).
"""

from __future__ import annotations

import errno
import json
import warnings
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fairprobe import __version__, runfolder
from fairprobe.asking import Lookahead, ask, batch_requests, batch_seeds, batches_of, followed
from fairprobe.cache import Cache
from fairprobe.catalog import PROBE_SETS, RUN_FOLDER_WRITERS
from fairprobe.errors import ConfigError, DataError, DataNotGiven, FairprobeError, RunInterrupted
from fairprobe.families import Family, family_of_set
from fairprobe.families.base import Replies, Scoring, UndeclaredMetric, load_bound_set
from fairprobe.io import atomic_write_json, fingerprint
from fairprobe.models import ModelBackend
from fairprobe.models.cached import CachedBackend
from fairprobe.models.fingerprint import fingerprint_change
from fairprobe.options import RunOptions
from fairprobe.plan import BoundSet, RunPlan, planned
from fairprobe.progress import Progress, SilentProgress, WorkClock
from fairprobe.records import ProbeSet, Sample, SetResult, Summary
from fairprobe.redact import redacted_command
from fairprobe.runfolder import RunWriter
from fairprobe.setwork import Answered, SetWatch, SetWork, model_calls, run_clock, set_work
from fairprobe.sources import Unreachable

__all__ = ["RunOptions", "RunPlan", "run", "run_set", "run_with_samples"]


def check_out_dir(out: Path) -> None:
    """The output folder must be a folder (or absent)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output folder is a file: {out}")


def record_type(obj: dict[str, Any]) -> type[Sample]:
    """A samples.jsonl object's record class: its family's (the base record when its family is not registered)."""
    family = family_of_set(str(obj.get("set", "")))
    return family.record if family else Sample


def read_samples(path: Path) -> list[Sample]:
    """Samples of an earlier (possibly killed) run as their families' records (runfolder.read_samples)."""
    return runfolder.read_samples(path, record_type)


def limit_too_small(given: RunPlan | RunOptions, sets: list[ProbeSet]) -> str | None:
    """One line, before any model work, when --limit leaves a set fewer cases than its marked metrics need: those
    values will show, but no mark (A-D), and `fairprobe check` cannot judge them. None when the limit suffices."""
    plan = planned(given)
    options = plan.options
    if options.limit is None:
        return None
    short: dict[int, list[str]] = {}
    for ps in sets:
        family = plan.bound(ps.name).family
        marked = [m.min_n for m in family.declared() if m.bounds or m.marks]
        if marked and len(ps.probes) < max(marked):
            short.setdefault(max(marked), []).append(ps.name)
    if not short:
        return None
    need = max(short)
    names = ", ".join(name for group in short.values() for name in group)
    return (
        f"--limit {options.limit} is below the {need} cases a marked metric needs: {names} will show values "
        f"but no marks (A-D), and `fairprobe check` cannot judge them; give --limit {need} or more (a share of "
        "part of the answers needs that many in its part)"
    )


def load_sets(given: RunPlan | RunOptions, progress: Progress | None = None) -> list[ProbeSet]:
    """Load every probe set of the run before any model work, so bad data fails fast.

    A suite run without --probes and --data-dir falls back, offline, to its sets that need no download,
    and says so in one line; a set named with --probes that cannot be downloaded is an error. A whole-suite run
    skips a set whose user-given data is missing, with one line (`DataNotGiven`); a set named with --probes fails."""
    plan = planned(given)
    options = plan.options
    sets, unreachable = [], []
    for bound in plan.sets:
        name, family = bound.name, bound.family
        if name not in PROBE_SETS and family.suite != options.suite:
            raise ConfigError(f"probe set {name!r} is a statement file: it runs in the {family.suite} suite only")
        if name in PROBE_SETS and PROBE_SETS.get(name).suite != options.suite:
            raise ConfigError(
                f"probe set {name!r} belongs to suite {PROBE_SETS.get(name).suite!r}, not {options.suite!r}"
            )
        try:
            sets.append(
                load_bound_set(name, family, bound.options, options.data_dir, options.limit, options.limit_order)
            )
        except DataNotGiven as exc:
            if options.probes:
                raise
            (progress or SilentProgress()).note(f"skipped {name}: {exc}")
        except Unreachable:
            if options.probes or options.data_dir is not None:
                raise
            unreachable.append(name)
    if unreachable and sets:
        warnings.warn(
            f"offline: running {', '.join(ps.name for ps in sets)} (no download needed); "
            f"{', '.join(unreachable)} need a download or --data-dir",
            stacklevel=2,
        )
    if not sets:
        hint = f" (offline: {', '.join(unreachable)} need a download or --data-dir)" if unreachable else ""
        raise DataError(f"suite {options.suite!r} has no probe sets to run{hint}")
    return sets


def run_set(
    backend: ModelBackend,
    bound: BoundSet,
    ps: ProbeSet,
    plan: RunPlan,
    writer: RunWriter | None = None,
    progress: Progress | None = None,
    clock: WorkClock | None = None,
    work: SetWork | None = None,
    ahead: Lookahead | None = None,
) -> Sequence[Sample]:
    """Ask the model every probe of one set (skipping batches already saved) and return its samples: read back
    from the run's samples file when there is one (a set's records are never all in memory), else as made. With
    `ahead` (the run's `Lookahead`), a batch's generations are asked together with those of the batches after it.

    Progress (setwork.SetWatch) counts the model's work (generations and the scorings that are calls of their own,
    and their tokens), `clock` the run's (`work`: the set's work when the caller counted it already); replies the
    family cannot read are counted as they come, and said once when they are most."""
    progress = progress or SilentProgress()
    family, family_options, context = bound.family, bound.options, plan.context
    gen = family.generation(context, family_options)
    answered = Answered()
    if (
        family.settle is not None
        and (settled := family.settle(ps, context, family_options, answered.asker(lambda a: ask(backend, a, gen))))
        != family_options
    ):
        family_options, work = settled, None  # counted again: the settled options ask other calls
    by_id: dict[str, Sample] = {}
    watch = SetWatch(ps, family.unit, work or set_work(family, ps, context, family_options), progress, clock)
    if ahead is not None:
        ahead.begin(ps, family_options)
    for index, whole in enumerate(batches_of(ps.probes, plan.options.batch_size)):
        batch, every, asked = batch_requests(family, ps, whole, context, family_options, writer)
        calls = model_calls(asked)
        if (skipped := model_calls(every) - calls) > 0:
            watch.skipped(skipped)
        if not batch:
            continue
        with watch.asking(calls):  # counted as asked: what `settle` answered already was asked for this set
            rest, known = answered.take(asked)
            replies = ask(backend, rest, gen, None if gen.greedy else batch_seeds(plan.seed, ps.name, rest), ahead)
            for probe_id, scores in known.items():
                replies.setdefault(probe_id, Replies({}, {})).scores.update(scores)
            if family.follow is not None:
                replies = followed(backend, family, ps, batch, replies, context, family_options)
        samples = [family.sample(ps, probe, replies[probe.id], context, family_options) for probe in batch]
        for sample in samples:
            sample.batch = index
        if writer is not None:
            writer.append(samples)
        else:
            by_id.update({s.id: s for s in samples})
        watch.answered(replies.values(), samples)
    watch.end()
    if writer is not None:
        return writer.records(ps.name, [p.id for p in ps.probes])
    return [by_id[p.id] for p in ps.probes]


def check_declared(family: Family[Any, Any], set_name: str, result: SetResult) -> SetResult:
    """A set's result, after checking that every metric it names is one the family declares."""
    named = set(result.metrics).union(*(set(sub.metrics) for sub in result.subsets.values()))
    undeclared = sorted(name for name in named if family.metric(name) is None)
    if undeclared:
        raise UndeclaredMetric(
            f"family {family.name!r} computed undeclared metric(s) on {set_name}: {', '.join(undeclared)}"
        )
    return result


def build_manifest(
    plan: RunPlan,
    backend: ModelBackend,
    sets: list[ProbeSet],
    settings: dict[str, Any],
    started: str,
    detected: str | None,
) -> dict[str, Any]:
    """The manifest of design.md, written from the plan and its `settings` (`RunPlan.run_settings`): version, model,
    decoding, seed, sources and sha256s, family options, times; `detected`: how the server said it scores (None
    locally, or when no set asks)."""
    first = plan.sets[0]
    return {
        "fairprobe_version": __version__,
        "kind": "run",
        "fingerprint": fingerprint(settings),
        "settings": settings,
        "suite": plan.options.suite,
        "model": backend.identity(),
        "decoding": first.family.generation(plan.context, first.options).model_dump(),
        "seed": plan.seed,
        "family_options": plan.family_settings(),
        "probe_sets": {ps.name: probe_set_record(ps) for ps in sets},
        "options": plan.options.recorded(detected),
        "command": redacted_command(),
        "started": started,
        "scoring": detected or "local",
    }


def asks_scores(plan: RunPlan, sets: list[ProbeSet]) -> bool:
    """Whether any set of the run scores continuations (its first probe's requests hold a Scoring): only then are
    a server's endpoints asked how they score (`--implicit off` asks no logprobs at all)."""
    for ps in sets:
        bound = plan.bound(ps.name)
        asked = bound.family.requests(ps, ps.probes[0], plan.context, bound.options) if ps.probes else []
        if any(isinstance(r, Scoring) for r in asked):
            return True
    return False


def probe_set_record(ps: ProbeSet) -> dict[str, Any]:
    """A set's manifest entry: source, sha256, n, and how a --limit drew its prompts."""
    record: dict[str, Any] = {"source": ps.source, "sha256": ps.sha256, "n": len(ps.probes)}
    if ps.drawn is not None:
        record["drawn"] = ps.drawn.model_dump(mode="json")
    return record


def implicit_manifest(backend: ModelBackend, results: dict[str, SetResult]) -> dict[str, Any] | None:
    """How GLD/ADD's probabilities were read: the endpoint's detected abilities and, per set, mode and top-k used."""
    detected = backend.scoring_info()
    per_set = {name: r.implicit for name, r in results.items() if r.implicit is not None}
    if detected is None and not per_set:
        return None
    return {**(detected or {}), "sets": per_set}


def write_report(out: Path) -> None:
    """The registered extra files of a finished run (report.html); a failure only warns, since the run's own
    files are already written."""
    for name in RUN_FOLDER_WRITERS.names():
        try:
            RUN_FOLDER_WRITERS.get(name)(out)
        except Exception as exc:
            warnings.warn(f"{name} not written in {out}: {exc}", stacklevel=2)


def load_backend(plan: RunPlan, adapter: str | None = None) -> ModelBackend:
    """The model a run's plan names (with `adapter` instead of the plan's when given), behind the cache."""
    backend = plan.model.load(adapter)
    if plan.options.use_cache:
        backend = CachedBackend(backend, Cache(plan.options.cache), plan.model.answer_args())
    return backend


def now() -> str:
    """The time now in UTC, to the second, as the manifest records it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_sets(
    backend: ModelBackend, sets: list[ProbeSet], plan: RunPlan, writer: RunWriter, progress: Progress
) -> tuple[dict[str, SetResult], dict[str, Sequence[Sample]]]:
    """Each set's answers (asked or resumed) and its summary; a failure names the samples saved and how to resume."""
    results: dict[str, SetResult] = {}
    per_set: dict[str, Sequence[Sample]] = {}
    bound = {ps.name: plan.bound(ps.name) for ps in sets}
    works = {ps.name: set_work(bound[ps.name].family, ps, plan.context, bound[ps.name].options) for ps in sets}
    clock = run_clock(list(works.values())) if len(sets) > 1 else None  # counted once, before any is asked
    ahead = Lookahead.for_run(backend, plan, sets, writer)
    for ps in sets:
        own = bound[ps.name]
        try:
            per_set[ps.name] = run_set(backend, own, ps, plan, writer, progress, clock, works[ps.name], ahead)
        except (FairprobeError, OSError) as exc:
            writer.close()
            if isinstance(exc, OSError):  # a full disk, a file system gone read-only
                raise cannot_write(exc, writer) from exc
            raise type(exc)(f"{exc}; {writer.resume_hint()}") from exc
        summarized = own.family.summarize(ps, per_set[ps.name], plan.context, own.options)
        results[ps.name] = check_declared(own.family, ps.name, summarized)
        results[ps.name].drawn = ps.drawn
        if clock is not None and clock.done < clock.total:
            progress.note(clock.line())
    return results, per_set


def run_with_samples(
    given: RunPlan | RunOptions, backend: ModelBackend | None = None, progress: Progress | None = None
) -> tuple[Summary, dict[str, Sequence[Sample]]]:
    """Run a plan (or the plan of a request) and write the run directory; returns the summary and each set's samples
    (read from samples.jsonl as they are asked for: a run's memory does not grow with its samples)."""
    progress = progress or SilentProgress()
    plan = planned(given)
    out = plan.output_dir()
    check_out_dir(out)
    sets = load_sets(plan, progress)
    plan = plan.narrowed([ps.name for ps in sets])
    settings = plan.run_settings()
    writer = RunWriter(out, fingerprint(settings), settings, record_type)
    if writer.taken_over:
        progress.note(f"{out} held a run with other settings that saved no answer: it is reused for this run")
    try:
        if backend is None:
            progress.note(f"loading model {plan.model.name}")
            backend = load_backend(plan)
        detected = backend.scoring_mode() if asks_scores(plan, sets) else None
        plan = plan.with_scoring(detected)
        writer.check_scoring(detected or "local")
        writer.check_model(backend.answer_fingerprint(), fingerprint_change)
        # A resumed run keeps its first start; a finished one resumed without new answers keeps its finish too.
        manifest = build_manifest(plan, backend, sets, settings, writer.earlier.get("started") or now(), detected)
        if writer.model_answer is not None:
            manifest["model_fingerprint"] = writer.model_answer
        atomic_write_json(out / "manifest.json", manifest)
        for notice in backend.notices:
            progress.note(notice)
        preflight(sets, plan)
        if (too_small := limit_too_small(plan, sets)) is not None:  # said once every setting has been checked
            progress.note(too_small)
        saved_before = writer.saved
        results, per_set = run_sets(backend, sets, plan, writer, progress)
        finished = writer.earlier.get("finished") if writer.saved == saved_before else None
        return finish_run(writer, manifest, backend, results, per_set, progress, finished), per_set
    except KeyboardInterrupt:
        writer.close()
        raise RunInterrupted(out, writer.saved) from None
    except OSError as exc:  # writing the summary, manifest or report of a run whose samples are saved
        if exc.errno not in DISK_ERRORS:
            raise
        writer.close()
        raise cannot_write(exc, writer) from exc
    finally:
        writer.close()


def finish_run(
    writer: RunWriter,
    manifest: dict[str, Any],
    backend: ModelBackend,
    results: dict[str, SetResult],
    per_set: dict[str, Sequence[Sample]],
    progress: Progress,
    finished: str | None = None,
) -> Summary:
    """Write a run's summary, samples in order, manifest (with the items that failed, said in one line) and report.
    `finished`: the earlier finish time of a run resumed without new answers, which it keeps."""
    if isinstance(backend, CachedBackend):
        progress.note(f"cache: {backend.hits} answers reused, {backend.misses} asked the model")
    summary = Summary(fairprobe_version=__version__, model=backend.name, results=results)
    order = [(name, i) for name, records in per_set.items() for i in records.ids]  # type: ignore[attr-defined]
    if failed := failed_record(writer.failures(order), len(order), progress):
        manifest["failed"] = failed
    writer.finish(order, summary)
    manifest["implicit"] = implicit_manifest(backend, results)
    manifest["finished"] = finished or now()
    atomic_write_json(writer.out / "manifest.json", manifest)
    write_report(writer.out)
    return summary


# The errors of a disk that cannot take what a run writes: full, over quota, read-only.
DISK_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def cannot_write(exc: OSError, writer: RunWriter) -> DataError:
    """A failed write as one line naming the file (the samples file when the OS named none) and what is saved."""
    where = exc.filename or writer.samples_path
    return DataError(f"cannot write {where}: {exc.strerror or exc}; {writer.resume_hint()}")


def preflight(sets: list[ProbeSet], plan: RunPlan) -> None:
    """Build the first probe's requests of every set before any is asked, so a setting the model cannot serve (a
    mode its server cannot score) is refused before the first set runs, not after it."""
    for ps in sets:
        bound = plan.bound(ps.name)
        if ps.probes:
            bound.family.requests(ps, ps.probes[0], plan.context, bound.options)


def failed_record(reasons: dict[str, int], total: int, progress: Progress) -> dict[str, Any] | None:
    """What the manifest records of the items whose model calls failed (None when none did), said in one line."""
    if not reasons:
        return None
    record = {"items": sum(reasons.values()), "of": total, "reasons": reasons}
    progress.note(failure_line(record))
    return record


def failure_line(failed: dict[str, Any], again: str = "run the same command again") -> str:
    """'3 of 36 items failed (3: server error 503): run the same command again to ask them again' (`again`: how
    to ask them again, the Python API's words in its warning)."""
    why = "; ".join(f"{n}: {reason}" for reason, n in failed["reasons"].items())
    return f"{failed['items']} of {failed['of']} items failed ({why}): {again} to ask them again"


def failed_in(out: Path) -> str | None:
    """The failure line of a finished run folder whose manifest records failed items, else None."""
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    failed = manifest.get("failed") if isinstance(manifest, dict) else None
    return failure_line(failed) if isinstance(failed, dict) else None


def run(
    given: RunPlan | RunOptions | None = None,
    backend: ModelBackend | None = None,
    progress: Progress | None = None,
    **kwargs: Any,
) -> Summary:
    """Run a plan (or the plan of a request) and write the run directory; returns the summary the CLI prints.

    `run(model="smollm2-135m-instruct", probes=["template"], limit=10)` works too.
    """
    return run_with_samples(given or RunOptions(**kwargs), backend, progress)[0]
