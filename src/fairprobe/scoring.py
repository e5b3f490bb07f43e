"""Score replies produced elsewhere (logs, a closed model's outputs) with a suite's detectors, no model loaded.

Responses file: JSON Lines, one object per probe, keyed by the probe's `id` (as `fairprobe probes show
NAME` prints it) and one field per model call of that probe:
- single-prompt sets (professional-bias, paper sets): `{"id": "0", "response": "The nurse."}`;
- pair sets (gender-income): `{"id": "0", "original": "No", "flipped": "Yes"}`.
Lines that are not JSON objects, lack `id` or a reply field, hold a non-string reply, name an unknown
probe id or repeat one are reported with their line numbers and skipped; the summary's
`scoring` block counts them. Probes without a reply are left out (n counts scored probes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fairprobe import __version__
from fairprobe.catalog import PROBE_SETS
from fairprobe.errors import DataError
from fairprobe.families import family_of_set
from fairprobe.families.base import Replies, Request, Scoring, load_bound_set
from fairprobe.io import atomic_write_json, atomic_write_text, fingerprint, read_text, split_lines
from fairprobe.models.base import Completion
from fairprobe.options import RunOptions
from fairprobe.plan import RunPlan
from fairprobe.records import ProbeSet, Sample, Summary, message_dicts
from fairprobe.runfolder import FolderLock, check_folder
from fairprobe.runner import write_report


@dataclass
class ScoreReport:
    """What `score_responses` did: the summary, the skipped lines (line number, why) and counts."""

    summary: Summary
    samples: list[Sample]
    skipped: list[tuple[int, str]] = field(default_factory=list)
    missing: int = 0


def write_score_folder(out: Path, report: ScoreReport, responses: Path, probes: str, fingerprint: str) -> None:
    """manifest.json (kind "score"), samples.jsonl and summary.json (with a `scoring` block), under the folder's lock."""
    summary, samples, skipped = report.summary, report.samples, report.skipped
    obj = summary.to_json_obj()
    obj["scoring"] = {
        "responses": str(responses),
        "scored": len(samples),
        "malformed_lines": len(skipped),
        "skipped": [{"line": n, "reason": why} for n, why in skipped],
        "probes_without_reply": report.missing,
    }
    with FolderLock(out):
        check_folder(out, "score", "", {})
        manifest = {
            "kind": "score",
            "fingerprint": fingerprint,
            "probes": probes,
            "responses": str(responses),
        }
        atomic_write_json(out / "manifest.json", {**manifest, "fairprobe_version": __version__})
        atomic_write_text(out / "samples.jsonl", "".join(s.model_dump_json() + "\n" for s in samples))
        atomic_write_json(out / "summary.json", obj)


def parse_responses(
    text: str, keys: dict[str, list[str]], probes: str, optional: dict[str, list[str]] | None = None
) -> tuple[dict[str, dict[str, str]], list[tuple[int, str]]]:
    """Replies by probe id (one string per model call of the probe) and the skipped lines (number, why).

    `optional` keys (e.g. a control question's reply) are kept where a line has them as strings.
    """
    skipped: list[tuple[int, str]] = []
    replies: dict[str, dict[str, str]] = {}
    for lineno, line in enumerate(split_lines(text), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            skipped.append((lineno, f"not JSON ({exc.msg})"))
            continue
        except RecursionError:
            skipped.append((lineno, "not JSON (nested too deeply)"))
            continue
        if not isinstance(obj, dict) or "id" not in obj:
            skipped.append((lineno, "not an object with an 'id' field"))
            continue
        pid = str(obj["id"])
        if pid not in keys:
            skipped.append((lineno, f"unknown probe id {pid!r} for {probes}"))
            continue
        if pid in replies:
            skipped.append((lineno, f"probe id {pid!r} repeated"))
            continue
        wanted = keys[pid]
        if len(wanted) == 1 and wanted[0] not in obj and "response" in obj:
            obj[wanted[0]] = obj["response"]
        absent = [k for k in wanted if not isinstance(obj.get(k), str)]
        if absent:
            skipped.append((lineno, f"needs string field(s) {', '.join(absent)}"))
            continue
        extra = [k for k in (optional or {}).get(pid, []) if isinstance(obj.get(k), str)]
        replies[pid] = {k: obj[k] for k in [*wanted, *extra]}
    return replies, skipped


def probes_with_requests(ps: ProbeSet, probe_options: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Each probe of a set (as JSON) with `requests`: the prompt of every model call whose reply `score` reads, by
    the key it reads it under (chat prompts as role/content messages)."""
    family = family_of_set(ps.name)
    if family is None:
        raise DataError(f"probe set {ps.name!r} belongs to no registered probe family")
    plan = RunPlan.build(
        RunOptions(model="responses", suite=family.suite, probes=[ps.name], probe_options=probe_options)
    )
    bound = plan.bound(ps.name)
    for probe in ps.probes:
        asked = [r for r in family.requests(ps, probe, plan.context, bound.options) if isinstance(r, Request)]
        prompts = {r.key: r.prompt if isinstance(r.prompt, str) else message_dicts(r.prompt) for r in asked}
        yield {**probe.model_dump(mode="json"), "requests": prompts}


def score_responses(
    probes: str,
    responses: Path,
    data_dir: Path | None = None,
    out: Path | None = None,
    probe_options: dict[str, str] | None = None,
    model: str = "responses",
) -> ScoreReport:
    """Score a responses JSONL file against one probe set; writes summary.json and samples.jsonl to `out`."""
    family = family_of_set(probes)
    if probes not in PROBE_SETS or family is None:
        raise DataError(f"unknown probe set {probes!r}: choose from {', '.join(sorted(PROBE_SETS))}")
    if out is not None:
        check_folder(out, "score", "", {})
    plan = RunPlan.build(
        RunOptions(
            model=model, suite=family.suite, probes=[probes], data_dir=data_dir, probe_options=probe_options or {}
        )
    )
    family_options, context = plan.bound(probes).options, plan.context
    ps = load_bound_set(probes, family, family_options, data_dir)
    asked = {p.id: family.requests(ps, p, context, family_options) for p in ps.probes}
    if any(isinstance(r, Scoring) and not r.optional for rs in asked.values() for r in rs):
        raise DataError(f"probe set {probes!r} is measured by a model's log-probabilities: `score` reads replies only")
    keys = {pid: [r.key for r in rs if isinstance(r, Request) and not r.optional] for pid, rs in asked.items()}
    optional = {pid: [r.key for r in rs if isinstance(r, Request) and r.optional] for pid, rs in asked.items()}
    replies, skipped = parse_responses(read_text(responses, "responses file"), keys, probes, optional)
    if not replies:
        raise DataError(f"no usable responses in {responses} ({len(skipped)} malformed lines)")
    samples = [
        family.sample(
            ps, p, Replies({k: Completion(text=v) for k, v in replies[p.id].items()}), context, family_options
        )
        for p in ps.probes
        if p.id in replies
    ]
    result = family.summarize(ps, samples, context, family_options)
    summary = Summary(fairprobe_version=__version__, model=model, results={ps.name: result})
    report = ScoreReport(summary, samples, skipped, missing=len(ps.probes) - len(samples))
    if out is not None:
        write_score_folder(out, report, responses, probes, fingerprint(plan.run_settings()))
        write_report(out)
    return report
