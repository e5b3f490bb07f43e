"""A multiple-choice family from outside the package (tests/fixtures/families/bbq_lite): three options per item,
scored by `loglikelihood`, on the embedded model and through the real vLLM of the test suite, and in every output
(console, summary.json, report.html, `fairprobe check`); local and vLLM option log-probabilities agree within 1e-4,
chat prompts included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import fixture_family
from fairprobe import cli
from fairprobe.formatting import format_number
from fairprobe.models import ScoreRequest
from fairprobe.runner import RunOptions, read_samples, run
from test_cli_failures import fairprobe

FIXTURES = Path(__file__).parent / "fixtures" / "families"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bbq_lite() -> Iterator[ModuleType]:
    """The fixture family, registered through the public API (removed afterwards)."""
    with fixture_family("bbq_lite", "bbq-lite") as imported:
        yield imported


def option_logprobs(folder: Path) -> np.ndarray:
    """log P(option | prompt) of every item of a run, (items, 3)."""
    return np.log(np.array([s.p_options for s in read_samples(folder / "samples.jsonl")]))


def test_a_choice_family_runs_on_the_embedded_model_and_shows_in_every_output(
    bbq_lite: ModuleType, embedded_backend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    args = ["run", "--suite", "bbq", "--out", str(out), "--device", "cpu", "--dtype", "float32", "--no-cache"]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    samples = read_samples(out / "samples.jsonl")
    assert len(samples) == 12 and all(s.options == ["(a)", "(b)", "(c)"] for s in samples)
    # The options' probabilities are the model's loglikelihood of each option string after the chat prompt.
    ps = bbq_lite.load_bbq_lite()
    options = bbq_lite.ChoiceOptions()
    direct = embedded_backend.loglikelihood(
        [ScoreRequest(bbq_lite.prompt_of(p, options), bbq_lite.LETTERS) for p in ps.probes]
    )
    np.testing.assert_allclose(option_logprobs(out), np.stack([s.logprobs() for s in direct]), atol=1e-4)
    # The metric by hand from the saved probabilities: the stereotyped option's share of the two people's mass.
    p = np.array([s.p_options for s in samples])
    stereo = p[np.arange(12), [s.stereotyped for s in samples]]
    share = float(np.mean(stereo / (p[:, 0] + p[:, 1])))
    summary = json.loads((out / "summary.json").read_text())["results"]["bbq-lite"]
    metric = summary["metrics"]["stereotype_share"]
    assert metric["value"] == pytest.approx(share) and metric["ci95"][0] <= share <= metric["ci95"][1]
    assert summary["metrics"]["option_mass"]["value"] == pytest.approx(float(p.sum(axis=1).mean()))
    assert set(summary["subsets"]) == {"female-stereotype", "male-stereotype"}

    # The console table (a long metric name is broken at its underscore, so the header is no wider than a value).
    header = next(i for i, line in enumerate(result.output.splitlines()) if "stereotype_" in line)
    assert "share" in result.output.splitlines()[header + 1] and f"{share:.3f}" in result.output
    html = (out / "report.html").read_text(encoding="utf-8")
    reading = f"choice went to the stereotyped one {100 * share:.0f}% of the time."  # (the apostrophe is escaped)
    assert reading in html and "share of the choice between the two people" in html

    code, markdown, _ = fairprobe(capsys, "report", str(out), "--format", "md")
    row = next(line for line in markdown.splitlines() if "| stereotype_share |" in line and "| bbq-lite |" in line)
    assert code == 0 and f"| {format_number(share)} |" in row
    code, text, _ = fairprobe(capsys, "check", str(out), "--max", "stereotype_share=1")
    assert code == 0 and "check passed" in text
    code, text, _ = fairprobe(capsys, "check", str(out), "--max", "stereotype_share=0")
    assert code == 1 and "FAIL bbq-lite stereotype_share: upper 95% bound" in text
    # Replies from a file cannot be scored: the family is measured by log-probabilities only.
    (tmp_path / "replies.jsonl").write_text('{"id": "0", "response": "(a)"}\n')
    code, _, err = fairprobe(capsys, "score", "--probes", "bbq-lite", "--responses", str(tmp_path / "replies.jsonl"))
    assert code == 2 and "measured by a model's log-probabilities" in err.strip().splitlines()[-1]


@pytest.mark.parametrize("prompt", ["chat", "text"])
def test_a_choice_family_through_vllm_agrees_with_the_local_model(
    bbq_lite: ModuleType, vllm_server, embedded_backend, tmp_path: Path, prompt: str
) -> None:
    common = {"suite": "bbq", "use_cache": False, "probe_options": {"bbq_lite.prompt": prompt}}
    api = {"model": f"openai:{vllm_server.model}", "model_args": {"base_url": vllm_server.url}}
    remote = run(RunOptions(out=tmp_path / "api", **api, **common))
    local = run(RunOptions(out=tmp_path / "local", **common), backend=embedded_backend)
    np.testing.assert_allclose(option_logprobs(tmp_path / "api"), option_logprobs(tmp_path / "local"), atol=1e-4)
    samples = read_samples(tmp_path / "api" / "samples.jsonl")
    assert all(s.error is None and s.greedy is not None for s in samples)
    for name in ("stereotype_share", "unknown_share", "option_mass"):
        got = remote.results["bbq-lite"].metrics[name].value
        assert got == pytest.approx(local.results["bbq-lite"].metrics[name].value, abs=1e-4)
