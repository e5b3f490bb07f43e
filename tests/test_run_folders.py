"""One writer per run folder, foreign folders refused (naming what differs), a damaged cache survived,
and a CI gate that fails closed."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import exact_scores, fake_loglikelihood
from fairprobe.cache import Cache
from fairprobe.errors import ConfigError, DataError
from fairprobe.models import Completion, GenerationConfig, ModelBackend
from fairprobe.models.cached import CachedBackend
from fairprobe.records import MetricValue, SetResult, Summary
from fairprobe.report.check import check_summary
from fairprobe.runfolder import LOCK_NAME, FolderLock, differences
from fairprobe.runner import RunOptions, read_samples, run
from fairprobe.scoring import score_responses


class FixedBackend(ModelBackend):
    """A fake model: the same gendered reply and probabilities for every prompt; counts prompts asked."""

    name = "fixed"
    has_chat_template = False

    def __init__(self) -> None:
        self.asked = 0

    def identity(self) -> dict[str, Any]:
        return {"id": "fixed"}

    def generate(self, prompts, config, score=None):
        self.asked += len(prompts)
        scores = [None if score is None else exact_scores([0.01] * len(score[i])) for i in range(len(prompts))]
        return [Completion(text=" she left.", scores=scored) for scored in scores]

    def loglikelihood(self, requests):
        self.asked += len(requests)
        return fake_loglikelihood(requests)


def options(out: Path, **kw: Any) -> RunOptions:
    return RunOptions(**{"probes": ["template"], "limit": 4, "out": out, "use_cache": False, **kw})


# --- one writer per folder -------------------------------------------------------------------------


HOLD = """
import sys, time
from pathlib import Path
from fairprobe.runfolder import FolderLock
lock = FolderLock(Path(sys.argv[1])).acquire()
print("locked", flush=True)
time.sleep(60)
"""


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(ConfigError, match=f"in use by process {holder.pid} "):
            run(options(out), backend=FixedBackend())
    finally:
        holder.kill()
        holder.wait()
    # The holder was killed: its lock is stale and taken over at once, and the run goes through.
    backend = FixedBackend()
    run(options(out), backend=backend)
    assert backend.asked == 4  # each prompt: its continuation, the words' scores read from the same call
    record = json.loads((out / LOCK_NAME).read_text())
    assert record["pid"] == os.getpid()


def test_a_stale_lock_file_from_a_killed_run_is_taken_over(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / LOCK_NAME).write_text(json.dumps({"pid": 999_999, "host": "h", "started": time.time()}))
    run(options(out), backend=FixedBackend())
    assert (out / "summary.json").is_file()


def test_a_lock_is_released_after_a_failed_run(tmp_path: Path) -> None:
    class Broken(FixedBackend):
        def generate(self, prompts, config, score=None):
            raise DataError("the model fell over")

    with pytest.raises(DataError):
        run(options(tmp_path / "run"), backend=Broken())
    with FolderLock(tmp_path / "run"):  # free again
        pass


# --- foreign folders -------------------------------------------------------------------------------


def test_a_folder_with_other_settings_names_each_difference_with_both_values(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(RunOptions(probes=["template"], out=out, use_cache=False, limit=8), backend=FixedBackend())
    with pytest.raises(ConfigError) as info:
        run(
            RunOptions(probes=["template", "friend-statements"], out=out, use_cache=False, limit=16, seed=3),
            backend=FixedBackend(),
        )
    message = str(info.value)
    assert "limit: 16 now, 8 in the folder" in message
    assert "probes: template,friend-statements now, template in the folder" in message
    assert "seed: 3 now, 0 in the folder" in message
    assert "temperature" not in message and "choose another --out or delete it" in message


def test_differences_show_none_and_long_lists() -> None:
    assert differences({"limit": 16, "probes": None}, {"limit": None, "probes": ["a"]}) == (
        "limit: 16 now, none in the folder; probes: none now, a in the folder"
    )
    words = differences({"words": [["she", "he"]] * 3}, {"words": [["she", "he"]] * 2})
    assert words == "words: 3 items now, 2 items in the folder"
    assert differences({"a": 1}, None) == "its manifest does not record them"


def test_a_run_folder_whose_manifest_was_deleted_is_refused_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(options(out), backend=FixedBackend())
    (out / "manifest.json").unlink()
    before = (out / "samples.jsonl").read_bytes()
    with pytest.raises(ConfigError, match=r"holds files but no fairprobe manifest\.json"):
        run(options(out), backend=FixedBackend())
    assert (out / "samples.jsonl").read_bytes() == before


@pytest.mark.parametrize("manifest", ["[]", "{}", "not json", '{"fingerprint": 3}'])
def test_a_manifest_that_is_not_one_is_refused(tmp_path: Path, manifest: str) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text(manifest)
    with pytest.raises(ConfigError, match="not a fairprobe manifest"):
        run(options(out), backend=FixedBackend())
    assert (out / "manifest.json").read_text() == manifest


def test_score_and_run_outputs_never_overwrite_each_other(tmp_path: Path) -> None:
    responses = tmp_path / "r.jsonl"
    responses.write_text('{"id": "0", "response": "The nurse."}\n')
    scored = tmp_path / "scored"
    score_responses("professional-bias", responses, out=scored)
    score_responses("professional-bias", responses, out=scored)  # scoring again into its own folder is fine
    with pytest.raises(ConfigError, match="holds a `fairprobe score` output, not a run"):
        run(options(scored), backend=FixedBackend())
    ran = tmp_path / "ran"
    run(options(ran), backend=FixedBackend())
    with pytest.raises(ConfigError, match="holds a `fairprobe run` output, not a score"):
        score_responses("professional-bias", responses, out=ran)


def test_a_killed_run_before_its_first_sample_resumes(tmp_path: Path) -> None:
    out = tmp_path / "run"

    class KilledAtLoad(FixedBackend):
        def generate(self, prompts, config, score=None):
            raise KeyboardInterrupt

    with pytest.raises(Exception, match="interrupted"):
        run(options(out), backend=KilledAtLoad())
    run(options(out), backend=FixedBackend())  # the folder it left is recognised as this run's
    assert len(read_samples(out / "samples.jsonl")) == 4


# --- the cache ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        '{"text": 3}',
        '"just a string"',
        "[1, 2]",
        "{not json",
        '{"text": "x", "scores": {"continuations": [[-0.1, 1, null, "exact"]]}}',
        '{"text": "x", "scores": {"continuations": [[0.5, 1, null, "exact"]], "error": null}}',
        '{"text": "x", "scores": [1]}',
    ],
)
def test_a_damaged_cache_entry_is_dropped_and_asked_again(tmp_path: Path, value: str) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    inner = FixedBackend()
    backend = CachedBackend(inner, cache)
    pairs = [(" she", " he")]
    backend.generate(["p"], GenerationConfig(), pairs)
    key = backend.keys(["p"], GenerationConfig(), pairs)[0]
    with sqlite3.connect(cache.path) as conn:
        conn.execute("UPDATE entries SET value = ? WHERE key = ?", (value, key))
    again = CachedBackend(FixedBackend(), Cache(cache.path))
    [completion] = again.generate(["p"], GenerationConfig(), pairs)
    assert completion.text == " she left." and again.misses == 1
    third = CachedBackend(FixedBackend(), Cache(cache.path))
    third.generate(["p"], GenerationConfig(), pairs)
    assert third.hits == 1  # the fresh answer replaced the damaged entry


def test_a_damaged_cache_database_is_a_one_line_error_saying_how_to_clear_it(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    cache = Cache(path)
    cache.put_many([(f"k{i}", {"text": "x" * 500}) for i in range(200)], "generation", "m")
    cache.close()
    data = bytearray(path.read_bytes())
    data[4096 * 2 : 4096 * 4] = b"\xa5" * (4096 * 2)  # overwrite two pages in the middle
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError) as info:
        c = Cache(path)
        c.get_many([f"k{i}" for i in range(200)])
        c.stats()
    message = str(info.value)
    assert "is damaged or unreadable" in message and "--no-cache" in message and "\n" not in message
    path.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(ConfigError, match="is damaged or unreadable"):
        Cache(path)


class ReadOnlyCache(Cache):
    """The cache opened read-only, as on a read-only file system."""

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, isolation_level=None)
            self._local.conn = conn
        return conn


def test_a_cache_that_cannot_be_written_warns_and_keeps_every_answer(tmp_path: Path) -> None:
    path = tmp_path / "c.sqlite"
    Cache(path)  # create it
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="cannot be written"):
        summary = run(options(out), backend=CachedBackend(FixedBackend(), ReadOnlyCache(path)))
    assert len(read_samples(out / "samples.jsonl")) == 4
    assert summary.results["template"].metrics["gas"].value == 1.0


# --- the CI gate ----------------------------------------------------------------------------------


def summary_with(metric: MetricValue, name: str = "gas") -> Summary:
    return Summary(
        fairprobe_version="0.1.0",
        model="m",
        results={"template": SetResult(n=10, source="s", metrics={name: metric})},
    )


@pytest.mark.parametrize(
    ("metric", "problem"),
    [
        (MetricValue(value=0.1, ci95=(0.0, math.nan)), "upper bound is nan"),
        (MetricValue(value=math.nan, ci95=(0.0, 0.2)), "value is nan"),
        (MetricValue(value=0.5, ci95=(0.9, 0.1)), "interval is inverted [0.900, 0.100]"),
        (MetricValue(value=0.95, ci95=(0.1, 0.2)), "value 0.950 lies outside its interval"),
        (MetricValue(value=0.5, ci95=(-0.5, 1.5)), "lower bound -0.500 is outside the metric's range [0, 1]"),
        (MetricValue(value=0.1, ci95=(0.0, math.inf)), "upper bound is inf"),
        (MetricValue(value=0.1, ci95=(0.0, None)), "interval has only one bound"),
    ],
)
def test_the_gate_fails_closed_naming_set_and_metric(metric: MetricValue, problem: str) -> None:
    with pytest.raises(DataError) as info:
        check_summary(summary_with(metric), {"gas": 0.5})
    assert f"template/gas: {problem}" in str(info.value)


def test_the_gate_still_passes_valid_numbers_and_fails_closed_on_na() -> None:
    assert check_summary(summary_with(MetricValue(value=0.1, ci95=(0.05, 0.2))), {"gas": 0.5}).ok
    result = check_summary(summary_with(MetricValue(value=None)), {"gas": 0.5})
    assert not result.ok and result.failures == ["FAIL template gas: cannot be judged: n/a on this data"]
    assert check_summary(summary_with(MetricValue(value=-0.3, ci95=(-0.5, -0.1)), "log_add"), {"log_add": 0}).ok


def test_check_on_a_nan_summary_exits_2(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    summary = summary_with(MetricValue(value=0.1, ci95=(0.0, 0.2))).to_json_obj()
    summary["results"]["template"]["metrics"]["gas"]["ci95"][1] = float("nan")
    (folder / "summary.json").write_text(json.dumps(summary))  # writes NaN, as a damaged file may hold
    proc = subprocess.run(
        [sys.executable, "-m", "fairprobe.cli", "check", str(folder), "--max", "gas=0.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().startswith("error: summary cannot be checked") and "template/gas" in proc.stderr
    assert "passed" not in proc.stdout


def test_a_full_disk_mid_run_is_one_error_and_the_run_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from fairprobe.runner import RunWriter

    out = tmp_path / "run"
    real_append = RunWriter.append
    calls = {"n": 0}

    def append_until_full(self: RunWriter, samples: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_append(self, samples)

    monkeypatch.setattr(RunWriter, "append", append_until_full)
    with pytest.raises(DataError, match=r"No space left on device; 2 samples saved in .*run the same command again"):
        run(options(out, batch_size=2), backend=FixedBackend())
    monkeypatch.setattr(RunWriter, "append", real_append)
    backend = FixedBackend()
    run(options(out, batch_size=2), backend=backend)
    assert backend.asked == 2 and len(read_samples(out / "samples.jsonl")) == 4  # the 2 prompts not saved


def test_a_disk_that_fills_while_the_summary_is_written_names_the_file_and_what_is_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 32: "error: No space left on device (free some space ...)" named neither the file nor the samples saved.
    import errno
    import os

    out = tmp_path / "run"
    real_fsync = os.fsync

    def full_at_the_summary(fd: int) -> None:
        if os.readlink(f"/proc/self/fd/{fd}").split("/")[-1].startswith(".summary.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_at_the_summary)
    with pytest.raises(DataError) as full:
        run(options(out, batch_size=2), backend=FixedBackend())
    assert str(full.value) == (
        f"cannot write {out / 'summary.json'}: No space left on device; 4 samples saved in {out}: "
        "run the same command again to resume"
    )
    monkeypatch.setattr(os, "fsync", real_fsync)
    backend = FixedBackend()
    run(options(out, batch_size=2), backend=backend)
    assert backend.asked == 0 and (out / "summary.json").is_file()
