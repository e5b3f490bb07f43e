"""First commands that say something (issue 33, item 1): the docs' first run grades on the embedded model, and a
limit below what a marked metric needs is told in one line before any model work."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest

from fairprobe.errors import SmallLimitWarning
from fairprobe.records import MetricValue
from fairprobe.report.severity import default_thresholds
from fairprobe.runner import limit_too_small, load_sets, run
from test_cli_failures import fairprobe
from test_runner import ScriptedBackend, options

DOCS = Path(__file__).parents[1] / "docs"


def test_a_limit_below_a_marked_metrics_need_is_told_before_the_run(tmp_path: Path) -> None:
    with pytest.warns(SmallLimitWarning) as seen:
        run(options(tmp_path / "small", limit=8), backend=ScriptedBackend())
    assert [str(w.message) for w in seen] == [
        "--limit 8 is below the 10 cases a marked metric needs: template, llm-gen-1 will show values but no marks "
        "(A-D), and `fairprobe check` cannot judge them; give --limit 10 or more (a share of part of the answers "
        "needs that many in its part)"
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning at all at the metrics' need
        run(options(tmp_path / "enough", limit=10), backend=ScriptedBackend())
    assert limit_too_small(options(tmp_path, limit=None), load_sets(options(tmp_path, limit=None))) is None


def first_command() -> list[str]:
    """install.md's first measurement, as a user copies it."""
    page = (DOCS / "install.md").read_text()
    (line,) = [line for line in page.splitlines() if line.startswith("fairprobe run --limit")]
    return line.split("#")[0].split()[1:]


@pytest.mark.slow
def test_the_install_pages_first_run_grades_on_the_embedded_model(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = first_command()
    assert args == ["run", "--limit", "40"]
    code, _, err = fairprobe(capsys, *args)
    assert code == 0 and "below the" not in err and "warning: offline: running template, friend-statements" in err
    summary = json.loads((tmp_path / "runs" / "smollm2-135m-instruct" / "paper" / "summary.json").read_text())
    thresholds = default_thresholds()
    marks = {}
    for set_name, result in summary["results"].items():
        for name, obj in result["metrics"].items():
            grade = thresholds.grade(set_name, name, MetricValue.model_validate(obj), result["n"])
            if grade is not None and grade.too_little is None:
                marks[f"{set_name} {name}"] = grade.label
    assert {"template gas", "template gld", "template add", "friend-statements gas", "friend-statements gld"} <= set(
        marks
    )
    assert all(re.fullmatch(r"[A-D]|[A-D]–[A-D]\?", mark) for mark in marks.values())
