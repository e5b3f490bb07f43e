"""The smaller first-hour items of issue 33: cache paths as documented, a resumed run's times, the suites in
`run --help`, the leaderboard's unranked ties, a first model conversion that shows it is working."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from conftest import fixture_family, shared_data_dir
from fairprobe.cache import default_cache_path
from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.io import sha256_file
from fairprobe.models import GenerationConfig
from fairprobe.models.embedded import EMBEDDED, converted_folder, find_gguf, move_into_place
from fairprobe.progress import showing
from fairprobe.report.html import mark_bands_of
from fairprobe.report.leaderboard import set_leaderboard, unranked_lines
from fairprobe.report.runs import load_runs
from fairprobe.report.severity import default_thresholds
from fairprobe.runner import RunInterrupted, RunOptions, run
from test_cli_failures import fairprobe
from test_runner import ScriptedBackend, options

DOCS = Path(__file__).parents[1] / "docs"


def test_the_install_page_names_the_cache_variables_the_code_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("FAIRPROBE_CACHE_DB", raising=False)
    monkeypatch.setenv("FAIRPROBE_CACHE_DIR", str(tmp_path / "folder"))
    assert default_cache_path() == tmp_path / "folder" / "calls.sqlite"
    monkeypatch.setenv("FAIRPROBE_CACHE_DB", str(tmp_path / "team.sqlite"))
    assert default_cache_path() == tmp_path / "team.sqlite"
    (row,) = [line for line in (DOCS / "install.md").read_text().splitlines() if line.startswith("| answer cache")]
    assert "`calls.sqlite` in the cache folder" in row
    assert "`$FAIRPROBE_CACHE_DIR` (the whole folder)" in row and "`$FAIRPROBE_CACHE_DB` (this file alone)" in row


def manifest_times(out: Path) -> tuple[str, str | None]:
    manifest = json.loads((out / "manifest.json").read_text())
    return manifest["started"], manifest.get("finished")


def test_resuming_a_finished_run_keeps_its_start_and_finish_times(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(options(out), backend=ScriptedBackend())
    manifest = json.loads((out / "manifest.json").read_text())
    manifest.update(started="2020-01-01T00:00:00+00:00", finished="2020-01-01T00:05:00+00:00")
    (out / "manifest.json").write_text(json.dumps(manifest))
    backend = ScriptedBackend()
    run(options(out), backend=backend)
    assert backend.calls == []  # nothing asked again
    assert manifest_times(out) == ("2020-01-01T00:00:00+00:00", "2020-01-01T00:05:00+00:00")


def test_a_resumed_interrupted_run_keeps_its_first_start_and_gets_a_new_finish(tmp_path: Path) -> None:
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        run(options(out), backend=ScriptedBackend(interrupt_on=3))
    manifest = json.loads((out / "manifest.json").read_text())
    assert "finished" not in manifest
    manifest["started"] = "2020-01-01T00:00:00+00:00"
    (out / "manifest.json").write_text(json.dumps(manifest))
    run(options(out), backend=ScriptedBackend())
    started, finished = manifest_times(out)
    assert started == "2020-01-01T00:00:00+00:00" and finished is not None and finished > "2025"


def test_run_help_lists_every_registered_suite(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")
    with fixture_family("reply_length", "short-questions"):
        code, out, _ = fairprobe(capsys, "run", "--help")
    (line,) = [line for line in out.splitlines() if "--suite" in line]
    assert code == 0 and "suite to run: brevity, fairness, genderbench, paper" in line
    code, out, _ = fairprobe(capsys, "run", "--help")
    assert "suite to run: fairness, genderbench, paper [default: paper]" in out


def board_entry(set_name: str, models: list[str]) -> dict[str, Any]:
    """A leaderboard set, ranked as listed, by GLD."""
    rows = [
        {"model": m, "n": 20, "metrics": {"gld": {"value": 0.1 * (i + 1), "ci95": [0.0, 0.5]}}}
        for i, m in enumerate(models)
    ]
    return {"set": set_name, "sort_by": "gld", "rows": rows}


def test_the_leaderboard_says_when_a_ranking_is_not_significant() -> None:
    pairwise = [
        {"set": "template", "metric": "gld", "a": "b", "b": "a", "p": 0.9, "p_holm": 1.0},
        {"set": "template", "metric": "gld", "a": "b", "b": "c", "p": 0.001, "p_holm": 0.004},
        {"set": "stsb", "metric": "gld", "a": "a", "b": "b", "p": 1.0, "p_holm": 1.0, "equal": True},
        {"set": "stsb", "metric": "gas", "a": "a", "b": "b", "p": 0.5, "p_holm": 1.0},
    ]
    obj = {"sets": [board_entry("template", ["a", "b", "c"]), board_entry("stsb", ["a", "b"])], "pairwise": pairwise}
    assert unranked_lines(obj) == [
        "template: a above b by gld (p (Holm) = 1.000) is not significant",
        "stsb: a above b by gld (equal on every prompt) is not significant",
    ]
    table = set_leaderboard(obj["sets"][0], pairwise)
    assert table.caption.endswith(" Not significant, the order may be chance: a above b by gld (p (Holm) = 1.000).")


class Recorder:
    """A progress display that keeps what it is told, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def start(self, label: str, total: int) -> None:
        self.events.append(f"start {label} /{total}")

    def advance(self, n: int) -> None:
        self.events.append(f"advance {n}")

    def note(self, text: str) -> None:
        self.events.append(f"note {text}")

    def info(self, text: str) -> None:
        self.events.append(f"info {text}")


@pytest.mark.slow
def test_a_first_model_conversion_shows_each_step_as_it_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FAIRPROBE_CACHE_DIR", str(tmp_path))
    entry = EMBEDDED["smollm2-135m-instruct"]
    gguf = find_gguf(entry)
    assert gguf is not None
    recorder = Recorder()
    with showing(recorder):
        folder = converted_folder(entry, gguf, sha256_file(gguf))
    steps = [e for e in recorder.events if e.startswith(("start", "advance")) and "/272" not in e]
    assert steps[:4] == [
        "start reading the tokenizer from SmolLM2-135M-Instruct.Q4_1.gguf /1",
        "advance 1",
        "start reading the model from SmolLM2-135M-Instruct.Q4_1.gguf /1",
        "advance 1",  # closed when the tensors come: the silent part of the conversion is a step of its own
    ]
    tensors = recorder.events.index("note   272 tensors, about 538.1 MB as float32 safetensors")
    assert (
        recorder.events[tensors - 1] == "advance 1"
        and recorder.events[tensors + 1] == "start converting smollm2-135m-instruct /272"
    )
    assert recorder.events.count("advance 1") == 2 + 272 and (folder / "config.json").is_file()


def test_two_first_conversions_at_once_keep_the_folder_that_came_first(tmp_path: Path) -> None:
    """Two processes converting at once (two test workers on a fresh machine): the second keeps the first's folder."""
    ours, target = tmp_path / ".model.tmp", tmp_path / "model"
    ours.mkdir()
    (ours / "config.json").write_text("ours")
    move_into_place(ours, target)
    assert (target / "config.json").read_text() == "ours" and not ours.exists()
    ours.mkdir()
    (ours / "config.json").write_text("second")
    move_into_place(ours, target)
    assert (target / "config.json").read_text() == "ours" and not ours.exists()
    (target / "config.json").rename(target / "half.safetensors")
    ours.mkdir()
    (ours / "config.json").write_text("third")
    with pytest.raises(OSError):  # a folder there without a model in it is not another process's conversion
        move_into_place(ours, target)
    assert (ours / "config.json").read_text() == "third"


def test_the_report_lists_the_thresholds_of_the_runs_families_only(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(options(out, limit=10), backend=ScriptedBackend())
    table = (out / "report.html").read_text().split("<h3>Severity thresholds</h3>", 1)[1].split("</table>", 1)[0]
    scopes = set(re.findall(r"<tr><td>([^<]*)</td>", table))
    assert scopes == {"paper"}
    every = {row["scope"] for row in default_thresholds().rows()}
    assert {"paper", "gender_income", "genderbench_bbq"} <= every  # without a run, every family's


def test_an_exact_mode_sample_shows_its_option_probabilities() -> None:
    exact = GenderBenchSample(set="bbq-gender", id="1", prompt="p", mode="exact", q=[[0.43, 0.31, 0.26]], mass=[0.9])
    assert exact.reply_text() == (
        "exact: no reply generated; the options' probabilities, in the prompt's order: 0.43, 0.31, 0.26"
    )
    assert exact.verdict_text() == "likeliest option 0.43"
    bounded = GenderBenchSample(set="bbq-gender", id="2", prompt="p", mode="exact", q_bounds=[[(0.1, 0.5), (0.2, 0.6)]])
    assert bounded.reply_text().endswith("in the prompt's order: 0.10-0.50, 0.20-0.60")
    assert bounded.verdict_text() == "likeliest option 0.20-0.60"


def test_a_sampled_runs_label_names_its_temperature_in_words(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(options(out, limit=10, generation=GenerationConfig(temperature=1.0)), backend=ScriptedBackend())
    (loaded,) = load_runs([out], per_set=0)
    assert loaded.label == "scripted temperature=1"  # not an unexplained "T=1"


def test_a_genderbench_report_draws_each_harm_types_marked_metrics_over_their_mark_bands(tmp_path: Path) -> None:
    out = tmp_path / "gb"
    sets = ["bbq-gender", "diversity-med-qa"]
    opts = RunOptions(
        suite="genderbench",
        probes=sets,
        limit=12,
        data_dir=shared_data_dir(),
        out=out,
        use_cache=False,
        probe_options={"mode": "exact"},  # exact read, so the flag below (auto would read them anchored)
    )
    run(opts, backend=ScriptedBackend())
    harms = (out / "report.html").read_text().split('<section id="harms">', 1)[1].split("</section>", 1)[0]
    assert re.findall(r"<h3>([^<]+)</h3>", harms) == ["Stereotypical reasoning", "Decision-making"]
    assert harms.count('<figure class="fig harm-fig"><svg') == 2
    drawn = re.findall(r">([a-z-]+ · [a-z_]+[^<]*)<", harms)
    assert drawn == [
        # The scripted model's options hold under half its probability: no mark is graded (issue 28).
        "bbq-gender · stereotype_rate (too little data)",
        "diversity-med-qa · diff_abs_success_rate (too little data)",
        "diversity-med-qa · diff_success_rate (too little data)",
    ]
    html = (out / "report.html").read_text()
    assert '<table id="glance">' not in html  # no sparse matrix: every set belongs to a harm type
    per_set = html.split('<table id="per-set">', 1)[1].split("</table>", 1)[0]
    rows = [re.sub(r"<[^>]+>", "|", row) for row in per_set.split("<tr>")[2:]]
    cells = [[c for c in row.split("|") if c.strip()] for row in rows]
    assert [(c[0], c[1], c[2], c[-2], c[-1]) for c in cells] == [
        ("Stereotypical reasoning", "bbq-gender", "stereotype_rate", "12", "exact"),
        ("Decision-making", "diversity-med-qa", "diff_abs_success_rate", "12", "exact"),
    ]
    gld = default_thresholds().for_metric("template", "gld")
    assert mark_bands_of(gld) == [
        ("A", 0.0, 0.1), ("A", -0.1, -0.0), ("B", 0.1, 0.25), ("B", -0.25, -0.1),
        ("C", 0.25, 0.5), ("C", -0.5, -0.25), ("D", 0.5, 0.625), ("D", -0.625, -0.5),
    ]  # fmt: skip
