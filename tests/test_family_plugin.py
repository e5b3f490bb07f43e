"""A probe family is one folder: a family from tests/fixtures/families/reply_length (outside the package),
registered through the public API or the `fairprobe.families` entry point, runs on the embedded model and shows
up, with its value, in the console table, summary.json, report.html, the Markdown export and `fairprobe check`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

from conftest import fixture_family
from fairprobe import cli
from fairprobe.families import register_family
from fairprobe.formatting import format_number
from test_cli_failures import fairprobe

FIXTURES = Path(__file__).parent / "fixtures" / "families"


@pytest.fixture(scope="module")
def reply_length() -> Iterator[ModuleType]:
    """The fixture family, registered through the public API (removed afterwards)."""
    with fixture_family("reply_length", "short-questions") as imported:
        yield imported


@pytest.fixture(scope="module")
def brevity_run(reply_length: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One run of the family's suite on the embedded model (-o reaches the family's typed options)."""
    out = tmp_path_factory.mktemp("brevity") / "run"
    args = ["run", "--suite", "brevity", "--out", str(out), "-o", "reply_length.max_words=3", "--device", "cpu"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    return out, result.output


@pytest.mark.slow
def test_a_family_from_outside_the_package_shows_in_every_output(
    brevity_run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    out, console = brevity_run
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 6
    # The family's detector and options: words counted from the reply, long = more than max_words=3 words.
    assert all(s["words"] == len(s["reply"].split()) and s["long"] == (s["words"] > 3) for s in samples)
    share = sum(s["long"] for s in samples) / 6
    metric = json.loads((out / "summary.json").read_text())["results"]["short-questions"]["metrics"]["long_reply_share"]
    assert metric["value"] == pytest.approx(share)
    assert metric["ci95"][0] <= share <= metric["ci95"][1]

    assert "long_reply_share" in console and f"{share:.3f}" in console  # the console table
    html = (out / "report.html").read_text(encoding="utf-8")
    assert f"The model ran long on {100 * share:.0f}% of short questions." in html  # the family's reading
    assert "long_reply_share" in html and "share of short questions answered at length" in html

    code, markdown, _ = fairprobe(capsys, "report", str(out), "--format", "md")
    assert code == 0
    row = next(
        line for line in markdown.splitlines() if "| long_reply_share |" in line and "| short-questions |" in line
    )
    assert f"| {format_number(share)} |" in row

    code, text, _ = fairprobe(capsys, "check", str(out), "--max", "long_reply_share=1")
    assert code == 0 and "check passed: 1 check(s) held" in text
    code, text, _ = fairprobe(capsys, "check", str(out), "--max", "long_reply_share=0")
    assert code == 1 and "FAIL short-questions long_reply_share: upper 95% bound" in text


def test_an_unknown_family_option_is_one_line(reply_length: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = fairprobe(capsys, "run", "--suite", "brevity", "-o", "reply_length.colour=red")
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1] == "error: unknown brevity option 'reply_length.colour'"
    code, _, err = fairprobe(capsys, "run", "--suite", "brevity", "-o", "max_words=many")
    assert code == 2 and "brevity option max_words='many'" in err.strip().splitlines()[-1]


def test_a_family_registers_through_its_entry_point(tmp_path: Path) -> None:
    # An installed distribution's entry point, as `[project.entry-points."fairprobe.families"]` writes it.
    dist = tmp_path / "reply_length_fixture-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: reply-length-fixture\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[fairprobe.families]\nreply_length = reply_length:FAMILY\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(FIXTURES)])}
    done = subprocess.run(
        [sys.executable, "-m", "fairprobe.cli", "probes", "list"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if "short-questions" in line)
    assert "brevity" in line and "six one-word questions" in line


def test_a_family_name_is_registered_once(reply_length: ModuleType) -> None:
    from fairprobe.errors import ConfigError

    with pytest.raises(ConfigError, match="probe family 'reply_length' is registered twice"):
        register_family(reply_length.FAMILY)
