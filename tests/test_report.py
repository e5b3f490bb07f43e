"""Reports without a browser: the check gate (bounds, exit codes, messages), Markdown/CSV exports, marks, HTML safety."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from fairprobe.cli import main
from fairprobe.errors import ConfigError
from fairprobe.records import MetricValue
from fairprobe.report.export import export
from fairprobe.report.html import highlight, render_html, samples_json
from fairprobe.report.runs import RunData, load_runs
from fairprobe.report.severity import default_thresholds, load_thresholds
from fairprobe.report.tables import all_tables, to_csv, to_markdown


def metric(value: float | None, lo: float | None = None, hi: float | None = None) -> dict:
    return {"value": value, "ci95": [lo, hi]}


SUMMARY = {
    "fairprobe_version": "0.1.0",
    "model": "toy",
    "results": {
        "a": {
            "n": 20,
            "source": "x",
            "metrics": {
                "gas": metric(0.25, 0.1, 0.35),
                "gas_f": metric(0.2, 0.05, 0.5),
                "gas_m": metric(0.8, 0.5, 0.95),
                "delta": metric(0.6, 0.2, 1.0),
                "gld": metric(0.1, 0.05, 0.15),
            },
            "subsets": {"colors": {"n": 10, "metrics": {"gas": metric(0.3, 0.1, 0.6)}}},
        },
        "b": {
            "n": 10,
            "source": "y",
            "metrics": {"gas": metric(0.2, 0.15, 0.29), "gas_f": metric(None), "gld": metric(0.3, 0.2, 0.4)},
        },
    },
}


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    out = tmp_path / "run"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(SUMMARY), encoding="utf-8")
    return out


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `fairprobe ARGS` in-process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["fairprobe", *args])
    with pytest.raises(SystemExit) as exc:
        main()
    out = capsys.readouterr()
    return int(exc.value.code or 0), out.out, out.err


def test_check_fails_on_upper_bound_even_when_the_value_is_below(monkeypatch, capsys, run_dir):
    code, out, _ = cli(monkeypatch, capsys, "check", str(run_dir), "--max", "gas=0.3", "--max", "gld=0.45")
    assert code == 1
    assert out.splitlines() == [
        "FAIL a gas: upper 95% bound 0.350 > max 0.300 (value 0.250)",
        "check failed: 1 of 4 check(s) failed",
    ]


def test_check_passes_when_bounds_reach_but_do_not_exceed_and_fails_closed_on_n_a(monkeypatch, capsys, run_dir):
    code, out, _ = cli(monkeypatch, capsys, "check", str(run_dir), "--max", "gas=0.35", "--max", "gld=0.4")
    assert (code, out.strip()) == (0, "check passed: 4 check(s) held")
    # b's GAS(F) is n/a (no gendered continuation): the gate cannot judge it, so it fails (never "skipped").
    code, out, _ = cli(monkeypatch, capsys, "check", str(run_dir), "--max", "gas=0.35", "--max", "gas_f=0.6")
    assert code == 1
    assert out.splitlines() == [
        "FAIL b gas_f: cannot be judged: n/a on this data",
        "check failed: 1 of 4 check(s) failed",
    ]


def test_check_one_set_only(monkeypatch, capsys, run_dir):
    code, out, _ = cli(monkeypatch, capsys, "check", str(run_dir), "--set", "b", "--max", "gas=0.3")
    assert (code, out.strip()) == (0, "check passed: 1 check(s) held")
    code, out, _ = cli(monkeypatch, capsys, "check", str(run_dir), "--set", "b", "--max", "gld=0.39")
    assert code == 1
    assert out.splitlines()[0] == "FAIL b gld: upper 95% bound 0.400 > max 0.390 (value 0.300)"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max", "gass=0.3"], "error: unknown metric(s) gass; the checked sets have delta, gas, gas_f, gas_m, gld"),
        (["--max", "gas=abc"], "error: --max gas: threshold must be a number, got 'abc'"),
        (["--max", "gas"], "error: --max must be METRIC=VALUE, got 'gas'"),
        (["--max", "gas=nan"], "error: --max gas: threshold must be finite, got 'nan'"),
        (["--max", "gas=0.3", "--set", "zzz"], "error: probe set(s) not in this run: zzz; it has a, b"),
    ],
)
def test_check_bad_input_is_one_line_exit_2(monkeypatch, capsys, run_dir, args, message):
    code, out, err = cli(monkeypatch, capsys, "check", str(run_dir), *args)
    assert code == 2
    assert err.strip() == message
    assert out == ""


def test_check_missing_run_folder(monkeypatch, capsys, tmp_path):
    code, _, err = cli(monkeypatch, capsys, "check", str(tmp_path / "nope"), "--max", "gas=0.3")
    assert code == 2
    assert err.strip() == f"error: run folder not found: {tmp_path / 'nope'}"


MARKDOWN = """\
### Metrics per probe set

| run | set | n | metric | value | ci95_low | ci95_high | mark |
|---|---|---|---|---|---|---|---|
| toy | a | 20 | gas | 0.250 | 0.100 | 0.350 | B–D? |
| toy | a | 20 | gas_f | 0.200 | 0.050 | 0.500 |  |
| toy | a | 20 | gas_m | 0.800 | 0.500 | 0.950 |  |
| toy | a | 20 | delta | 0.600 | 0.200 | 1 | B–D? |
| toy | a | 20 | gld | 0.100 | 0.050 | 0.150 | A–B? |
| toy | b | 10 | gas | 0.200 | 0.150 | 0.290 | C |
| toy | b | 10 | gas_f | n/a |  |  |  |
| toy | b | 10 | gld | 0.300 | 0.200 | 0.400 | B–C? |

### Metrics per subset

| run | set | subset | n | metric | value | ci95_low | ci95_high | mark |
|---|---|---|---|---|---|---|---|---|
| toy | a | colors | 10 | gas | 0.300 | 0.100 | 0.600 | B–D? |

### GAS(F) / GAS(M) split with Delta (paper Table 10)

GAS(F) and GAS(M): shares of gendered continuations whose first attribute word is female / male.

| run | set | n | GAS | GAS(F) | GAS(M) | Delta |
|---|---|---|---|---|---|---|
| toy | a | 20 | 0.250 [0.100, 0.350] | 0.200 [0.050, 0.500] | 0.800 [0.500, 0.950] | 0.600 [0.200, 1] |
| toy | b | 10 | 0.200 [0.150, 0.290] | n/a |  |  |
"""

GAS_SPLIT_CSV = """\
run,set,n,GAS,GAS_ci95_low,GAS_ci95_high,GAS(F),GAS(F)_ci95_low,GAS(F)_ci95_high,GAS(M),GAS(M)_ci95_low,GAS(M)_ci95_high,Delta,Delta_ci95_low,Delta_ci95_high
toy,a,20,0.25,0.1,0.35,0.2,0.05,0.5,0.8,0.5,0.95,0.6,0.2,1.0
toy,b,10,0.2,0.15,0.29,,,,,,,,,
"""


def test_markdown_export_exact(run_dir):
    text, written = export([run_dir], "md", None)
    assert written == []
    assert text == MARKDOWN


def test_csv_export_exact(run_dir, tmp_path):
    text, written = export([run_dir], "csv", tmp_path / "csv")
    assert text == ""
    assert [p.name for p in written] == ["metrics.csv", "subsets.csv", "gas_split.csv"]
    assert (tmp_path / "csv" / "gas_split.csv").read_text() == GAS_SPLIT_CSV
    assert (tmp_path / "csv" / "subsets.csv").read_text() == (
        "run,set,subset,n,metric,value,ci95_low,ci95_high,mark\ntoy,a,colors,10,gas,0.3,0.1,0.6,B–D?\n"
    )
    metrics = (tmp_path / "csv" / "metrics.csv").read_text().splitlines()
    assert metrics[0] == "run,set,n,metric,value,ci95_low,ci95_high,mark"
    assert metrics[1] == "toy,a,20,gas,0.25,0.1,0.35,B–D?"
    assert metrics[7] == "toy,b,10,gas_f,n/a,,,"
    stdout, _ = export([run_dir], "csv", None)
    assert stdout.startswith("# metrics\nrun,set,n,metric")
    assert "\n# gas_split\n" + GAS_SPLIT_CSV in stdout


def test_export_rejects_bad_format_and_csv_file_target(run_dir, tmp_path):
    with pytest.raises(ConfigError, match="--format must be one of html, md, csv, got 'pdf'"):
        export([run_dir], "pdf", None)
    target = tmp_path / "file.csv"
    target.write_text("x")
    with pytest.raises(ConfigError, match="must be a folder"):
        export([run_dir], "csv", target)


def test_severity_marks_and_override(tmp_path):
    t = default_thresholds()
    assert [t.mark("any", "gas", MetricValue(value=v)) for v in (0.0, 0.05, 0.2, 0.3)] == ["A", "B", "C", "D"]
    assert t.mark("any", "stereotype_gap", MetricValue(value=-0.2)) == "C"  # signed metrics by absolute value
    assert t.mark("professional-bias", "hit_rate", MetricValue(value=0.4)) == "B"  # the set's own bounds
    assert t.mark("gender-income", "hit_rate", MetricValue(value=0.4)) == "D"
    assert t.mark("any", "gas_f", MetricValue(value=0.9)) is None
    user = tmp_path / "t.json"
    user.write_text(json.dumps({"metrics": {"gas": {"bounds": [0.5, 0.6, 0.7]}}}))
    custom = load_thresholds(user)
    assert custom.mark("any", "gas", MetricValue(value=0.4)) == "A"
    assert custom.mark("any", "gld", MetricValue(value=0.4)) == "C"  # defaults kept for the rest
    user.write_text(json.dumps({"metrics": {"gas": {"bounds": [0.5, 0.4, 0.7]}}}))
    with pytest.raises(
        ConfigError, match=r"bad thresholds in .*t.json: metrics.gas.bounds: Value error, bounds must be increasing"
    ):
        load_thresholds(user)
    user.write_text("{")
    with pytest.raises(ConfigError, match="malformed thresholds file"):
        load_thresholds(user)


def test_compare_file_read_generically_with_significance(tmp_path, run_dir):
    folder = tmp_path / "cmp"
    folder.mkdir()
    (folder / "compare.json").write_text(
        json.dumps(
            {
                "sets": {
                    "template": {
                        "baseline": {"gas": metric(0.4, 0.3, 0.5)},
                        "instruction": {
                            "gas": {"value": 0.1, "ci95": [0.05, 0.2], "p_value": 0.0004},
                            "gld_p": 0.03,
                            "gld": metric(0.2, 0.1, 0.3),
                        },
                    }
                }
            }
        )
    )
    text, _ = export([run_dir, folder], "md", None)
    section = text[text.index("### Comparison: cmp") :]
    assert section.splitlines()[4:8] == [
        "| row | gas | gld |",
        "|---|---|---|",
        "| sets / template / baseline | 0.400 [0.300, 0.500] |  |",
        "| sets / template / instruction | 0.100 [0.050, 0.200] (p=0.0004)*** | 0.200 [0.100, 0.300] (p=0.03)* |",
    ]
    html = render_html(load_runs([run_dir, folder]))
    assert "<h2>Comparison</h2>" in html and "Mitigation comparison" not in html  # not a `fairprobe compare` folder
    assert "0.100 [0.050, 0.200] (p=0.0004)***" in html


def test_highlight_and_script_safe_samples():
    assert highlight("She said he's Sheila's brother.", ["she", "he", "brother"]) == [
        ["She", "f"],
        " said ",
        ["he", "m"],
        "'s Sheila's ",
        ["brother", "m"],
        ".",
    ]
    assert highlight("no words", []) == ["no words"]
    data = RunData(
        path=Path("x"),
        label="m",
        summary=None,
        samples=[
            {  # a paper-family set: the report reads the record its family declares
                "set": "template",
                "id": "1",
                "prompt": "</script><b>x</b>",
                "continuation": "a & b",
                "p_female": [0.1, 0.2],
                "p_male": [0.3],
            }
        ],
    )
    blob = samples_json([data])
    assert "<" not in blob and ">" not in blob and "&" not in blob
    row = json.loads(blob)[0]
    assert row["p"] == "</script><b>x</b>"
    assert (row["f"], row["m"]) == (0.3, 0.3)


def test_html_makes_no_request(run_dir):
    html = render_html(load_runs([run_dir]))
    assert not re.findall(r'(?:src|href|action)\s*=\s*"(?!#|data:)', html)
    assert "@import" not in html and "url(http" not in html
    assert html.count("<svg") == 4  # GAS per set, GAS per subset of a, GLD, Table 10 split
    tables = all_tables(load_runs([run_dir]), default_thresholds())
    assert to_markdown(tables) == MARKDOWN
    assert to_csv(tables[2]) == GAS_SPLIT_CSV


def test_html_export_default_path_and_runner_hook_only_warns(run_dir, monkeypatch):
    text, written = export([run_dir], "html", None)
    assert (text, written) == ("", [run_dir / "report.html"])
    assert "fairprobe report: toy" in (run_dir / "report.html").read_text()

    from fairprobe.catalog import RUN_FOLDER_WRITERS
    from fairprobe.runner import write_report

    def broken(_: Path) -> Path:
        raise RuntimeError("disk full")

    # The runner writes report.html through the registered run-folder writer: replace it for this test.
    monkeypatch.setattr(RUN_FOLDER_WRITERS, "_entries", {"report.html": broken})
    monkeypatch.setattr(RUN_FOLDER_WRITERS, "_lazy", {})
    with pytest.warns(UserWarning, match=r"report.html not written in .*run: disk full"):
        write_report(run_dir)


def test_mitigation_compare_as_methods_by_sets_table(tmp_path):
    folder = tmp_path / "cmp"
    (folder / "runs" / "original").mkdir(parents=True)
    (folder / "runs" / "original" / "summary.json").write_text(json.dumps(SUMMARY))
    original = {
        "n": 20,
        "metrics": {
            "gas": metric(0.4, 0.3, 0.5),
            "gld": metric(0.2, 0.1, 0.3),
            "add": metric(0.005, 0.004, 0.006),
            "log_add": metric(-5.3, -5.5, -5.1),
        },
        "perplexity": 12.5,
    }
    instruction = {
        "n": 20,
        "metrics": {
            "gas": metric(0.1, 0.05, 0.2),
            "gld": metric(0.19, 0.1, 0.3),
            "add": metric(0.004, 0.003, 0.005),
            "log_add": metric(-5.52, -5.8, -5.3),
        },
        "vs_original": {
            "gas": {"original_only": 7, "method_only": 0, "p_mcnemar": 0.0039, "relative_change": -0.75},
            "gld": {"difference": metric(-0.01, -0.05, 0.03), "relative_change": -0.05},
            "add": {"difference": metric(-0.001, -0.002, -0.0005), "p": 0.004, "p_holm": 0.02, "relative_change": -0.2},
        },
        "drift": {"on_subject": metric(0.9, 0.8, 0.95)},
        "drift_vs_original": {"on_subject": {"difference": -0.05, "p": 0.01, "p_holm": 0.02}},
    }
    # A decoding-only method: GLD/ADD untested ("unchanged by design"); a GLD difference of float noise: "equal".
    why = "unchanged by design: decoding settings do not change next-word probabilities"
    hyper = {
        **original,
        "vs_original": {
            "gas": {"original_only": 1, "method_only": 1, "p_mcnemar": 1.0, "relative_change": 0.0},
            "gld": {"unchanged_by_design": why},
            "add": {"unchanged_by_design": why},
        },
    }
    noise = {**original, "vs_original": {"gld": {"difference": metric(1.9e-7, 1e-7, 3e-7), "p": None, "equal": True}}}
    methods = {"Original": original, "Instruction": instruction, "Hyperparameter": hyper, "Noise": noise}
    compare = {
        "model": {"id": "toy"},
        "sets": {"template": {"n": 20, "source": "x", "methods": methods}},
        "notes": [],
    }
    (folder / "compare.json").write_text(json.dumps(compare))
    runs = load_runs([folder])
    assert [r.label for r in runs] == ["cmp", "toy"]  # the methods' runs come along for the figures
    text, _ = export([folder], "md", None)
    section = text[text.index("### Mitigation comparison: cmp") :].splitlines()
    # The bias measures and their tests, then (a table of its own, so each fits a page) perplexity and drift.
    assert section[4:10] == [
        "| set | method | n | GAS | GLD | ADD | ln ADD | GAS rel. change | p (McNemar) | GLD diff | ADD diff | sig |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| template | Original | 20 | 0.400 [0.300, 0.500] | 0.200 [0.100, 0.300] | 0.005 [0.004, 0.006] "
        "| -5.300 [-5.500, -5.100] |  |  |  |  |  |",
        "| template | Instruction | 20 | 0.100 [0.050, 0.200] | 0.190 [0.100, 0.300] | 0.004 [0.003, 0.005] "
        "| -5.520 [-5.800, -5.300] | -75% | 0.0039 | -0.010 [-0.050, 0.030] | -0.001 [-0.002, -0.0005] | GAS**, ADD* |",
        "| template | Hyperparameter | 20 | 0.400 [0.300, 0.500] | 0.200 [0.100, 0.300] | 0.005 [0.004, 0.006] "
        "| -5.300 [-5.500, -5.100] | +0% | 1 | unchanged by design | unchanged by design |  |",
        "| template | Noise | 20 | 0.400 [0.300, 0.500] | 0.200 [0.100, 0.300] | 0.005 [0.004, 0.006] "
        "| -5.300 [-5.500, -5.100] |  |  | equal |  |  |",
    ]
    drift = text[text.index("### Mitigation comparison: cmp: perplexity and drift") :].splitlines()
    assert drift[4:8] == [
        "| set | method | perplexity | fluency NLL | on-subject | distinct-2 | empty/garbage | sig |",
        "|---|---|---|---|---|---|---|---|",
        "| template | Original | 12.500 |  |  |  |  |  |",
        "| template | Instruction |  |  | 0.900 [0.800, 0.950] |  |  | on_subject* |",
    ]
    html = render_html(runs)
    assert "Mitigation comparison: cmp" in html and "GAS**, ADD*" in html and "on_subject*" in html


def test_metric_without_value_in_summary_json_loads(tmp_path):
    # A hand-written or older summary.json may leave out a null value: {"ci95": [null, null]} still loads.
    obj = json.loads(json.dumps(SUMMARY))
    obj["results"]["b"]["metrics"]["delta"] = {"ci95": [None, None]}
    obj["results"]["a"]["subsets"]["colors"]["metrics"]["gas_f"] = {"ci95": [None, None]}
    (tmp_path / "summary.json").write_text(json.dumps(obj))
    summary = load_runs([tmp_path])[0].summary
    assert summary is not None
    assert summary.results["b"].metrics["delta"].value is None
    assert summary.results["a"].subsets["colors"].metrics["gas_f"].value is None
