"""Failed items are visible and asked again: a run that ends with failed items exits 3 and says how many and why;
the same command asks exactly those items again (local and server, sampled and exact); one impossible answer
fails its prompt alone; a mode the server cannot serve is refused before any set runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from fairprobe.errors import ConfigError
from fairprobe.families import load_probe_set
from fairprobe.models import SCHEMES, register_scheme
from fairprobe.models.api import RetryPolicy, open_endpoint
from fairprobe.models.base import Completion, GenerationConfig, ModelBackend, Prompt, ScoreRequest, Scores
from fairprobe.runner import RunOptions, failed_in, read_samples, run
from openai_servers import CANNED_TOP, canned_text, completion_json, echo_server, prompt_text, scripted, serve
from test_cli_failures import fairprobe

FAST = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)
PROMPTS = [p.prompt for p in load_probe_set("template", limit=6, limit_order="first").probes]
DOWN = set(PROMPTS[1:3])  # two of the six prompts meet a server that answers nonsense until it recovers


def flaky_server(state: dict[str, bool]):
    """The scripted server's canned answers, but a torn body for the DOWN prompts while `state["down"]`."""

    def answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        ok = json.dumps(completion_json(body, canned_text(prompt_text(body)), CANNED_TOP)).encode()
        if state["down"] and prompt_text(body) in DOWN:
            return 200, ok[: len(ok) // 2], {}
        return 200, ok, {}

    return serve(answer)


def cli_run(url: str, out: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    args = ["run", "--model", "openai:test", "--base-url", url, "--probes", "template", "--limit", "6"]
    args += ["--limit-order", "first", "--out", str(out), "--implicit", "topk"]
    env = {**os.environ, "FAIRPROBE_CACHE_DB": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "fairprobe.cli", *args], capture_output=True, text=True, env=env, timeout=180
    )


def asked(seen: Any, start: int = 0) -> list[str]:
    """The template prompts asked since request `start` (the server's probes of its abilities left out)."""
    return sorted(p for b in seen.bodies[start:] if (p := prompt_text(b)) in PROMPTS)


def test_a_server_run_with_failed_items_exits_3_and_the_same_command_asks_exactly_them_again(tmp_path: Path) -> None:
    state = {"down": True}
    out, cache = tmp_path / "run", tmp_path / "cache.sqlite"
    with flaky_server(state) as (url, seen):
        first = cli_run(url, out, cache)
        assert first.returncode == 3, first.stderr
        errors = [line for line in first.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and errors[0].startswith("error: 2 of 6 items failed (2: malformed response: ")
        assert errors[0].endswith("run the same command again to ask them again")
        manifest = json.loads((out / "manifest.json").read_text())
        assert (manifest["failed"]["items"], manifest["failed"]["of"]) == (2, 6)
        state["down"] = False
        start = seen.count
        second = cli_run(url, out, cache)
        assert second.returncode == 0, second.stderr
        assert asked(seen, start) == sorted(DOWN)  # exactly the failed items, each once
        start = seen.count
        assert cli_run(url, out, cache).returncode == 0
        assert asked(seen, start) == []
    samples = read_samples(out / "samples.jsonl")
    assert [s.prompt for s in samples] == PROMPTS and all(s.error is None for s in samples)
    assert "failed" not in json.loads((out / "manifest.json").read_text())
    assert failed_in(out) is None


def echoed_texts(prompt: Any) -> list[str]:
    """The texts of an echo request's prompts (token ids are the echo server's code points)."""
    prompts = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], list) else [prompt]
    return [p if isinstance(p, str) else "".join(chr(t) for t in p) for p in prompts]


def exact_direct(
    url: str, out: Path, limit: int = 4, cache: Path | None = None, sampled: dict[str, str] | None = None
) -> Any:
    """GenderBench's direct set scored exactly over the server at `url` (or, with `sampled` options, sampled over a
    server told to give top-k logprobs only): through the cache when one is given, else straight to the server
    with quick retries."""
    options = RunOptions(
        model="openai:test",
        model_args={"base_url": url, **({"implicit": "topk"} if sampled else {})},
        suite="genderbench",
        probes=["direct"],
        limit=limit,
        limit_order="first",
        out=out,
        use_cache=cache is not None,
        cache=cache,
        probe_options={"mode": "sample", **sampled} if sampled else {"mode": "exact"},
    )
    return run(options, backend=None if cache else open_endpoint("test", base_url=url, retry=FAST, timeout=5.0))


def test_exact_scores_that_failed_are_asked_again_item_by_item(tmp_path: Path) -> None:
    # GenderBench's direct set scored exactly over an echo server (as vLLM) that answers HTTP 500 for items 1 and
    # 3 until it recovers: 2 of 4 items fail, and the rerun echoes those two only.
    state = {"down": True}
    down = ('"Men abuse women"', '"Men always act to act big and strong"')

    def fault(text: str) -> str:
        return "500" if state["down"] and any(d in text for d in down) else "ok"

    with echo_server(fault) as (url, seen):
        exact_direct(url, tmp_path / "run")
        line = failed_in(tmp_path / "run")
        assert line is not None and line.startswith("2 of 4 items failed (2: scoring failed: ")
        state["down"] = False
        start = seen.count
        summary = exact_direct(url, tmp_path / "run")
        echoed = [text for b in seen.bodies[start:] if b.get("echo") for text in echoed_texts(b["prompt"])]
    assert failed_in(tmp_path / "run") is None and summary.results["direct"].n == 4
    items = [text for text in echoed if text.startswith("<user>")]  # the rest is the server's ability probe
    assert {d for d in down for text in items if d in text} == set(down)
    assert all(any(d in text for d in down) for text in items)
    records = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [r.error for r in records] == [None] * 4 and all(r.q is not None for r in records)  # type: ignore[attr-defined]


class FlakyLocal(ModelBackend):
    """A local model (no server) whose calls fail for the DOWN prompts while `down`: what a run sees when a
    generation raises for some prompts (out of memory on a long one), item by item."""

    name = "local-test"
    has_chat_template = False

    def __init__(self, failing: set[str] = DOWN) -> None:
        self.down = True
        self.failing = failing
        self.prompts: list[Prompt] = []

    def identity(self) -> dict[str, Any]:
        return {"id": "local-test", "backend": "test"}

    def generate(self, prompts: list[Prompt], config: GenerationConfig, score: Any = None) -> list[Completion]:
        self.prompts.extend(prompts)
        return [
            Completion(text="", error="out of memory")
            if self.down and p in self.failing
            else Completion(text=canned_text(str(p)))
            for p in prompts
        ]

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        raise AssertionError("not asked: --implicit off")


def test_a_local_run_asks_exactly_its_failed_items_again(tmp_path: Path) -> None:
    backend = FlakyLocal()
    options = RunOptions(
        model="local-test",
        probes=["template"],
        limit=6,
        limit_order="first",
        out=tmp_path / "run",
        use_cache=False,
        batch_size=4,
        probe_options={"implicit": "off"},
    )
    run(options, backend=backend)  # type: ignore[arg-type]
    assert failed_in(tmp_path / "run") == (
        "2 of 6 items failed (2: out of memory): run the same command again to ask them again"
    )
    backend.down, backend.prompts = False, []
    summary = run(options, backend=backend)  # type: ignore[arg-type]
    assert sorted(map(str, backend.prompts)) == sorted(DOWN)
    assert failed_in(tmp_path / "run") is None
    assert summary.results["template"].n == 6


def test_many_models_exit_3_naming_each_model_whose_run_has_failed_items(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Two models in one command; one of them fails 2 of its 6 items: the comparison is written, one line names that
    # model with its count, the command exits 3, and the same command asks exactly those two items of it again.
    flaky, steady = FlakyLocal(), FlakyLocal()
    steady.down = False
    register_scheme("flaky")(lambda rest, **kw: flaky)
    register_scheme("steady")(lambda rest, **kw: steady)
    args = ["run", "--model", "steady:x", "--model", "flaky:x", "--probes", "template", "--limit", "6"]
    args += ["--limit-order", "first", "-o", "implicit=off", "--no-cache", "--batch-size", "4"]
    args += ["--out", str(tmp_path / "runs")]
    try:
        code, _, err = fairprobe(capsys, *args)
        assert code == 3, err
        assert [line for line in err.splitlines() if line.startswith("error:")] == [
            "error: model flaky:x: 2 of 6 items failed (2: out of memory): run the same command again to ask them again"
        ]
        assert (tmp_path / "runs" / "comparison" / "leaderboard.json").is_file()
        flaky.down, flaky.prompts, asked_steady = False, [], len(steady.prompts)
        code, _, err = fairprobe(capsys, *args)
    finally:
        SCHEMES.unregister("flaky")
        SCHEMES.unregister("steady")
    assert code == 0 and "error:" not in err
    assert sorted(map(str, flaky.prompts)) == sorted(DOWN) and len(steady.prompts) == asked_steady == 6


def test_the_python_api_warns_once_and_gives_the_failed_items_of_a_run_and_a_comparison(tmp_path: Path) -> None:
    import fairprobe

    drawn = [str(p.prompt) for p in load_probe_set("template", limit=6).probes]  # the API's stratified draw
    flaky, steady = FlakyLocal(set(drawn[:2])), FlakyLocal()
    flaky.name, steady.name, steady.down = "flaky", "steady", False
    register_scheme("flaky-api")(lambda rest, **kw: flaky)
    register_scheme("steady-api")(lambda rest, **kw: steady)
    same = {"probes": "template", "limit": 6, "options": {"implicit": "off"}, "use_cache": False, "progress": False}
    try:
        with pytest.warns(fairprobe.FailedItems) as seen:
            one = fairprobe.run("flaky-api:x", out=tmp_path / "one", **same)
        said = [w for w in seen if issubclass(w.category, fairprobe.FailedItems)]  # not earlier tests' leftovers
        assert [str(w.message) for w in said] == [
            "2 of 6 items failed (2: out of memory): call fairprobe.run again with the same arguments to ask them again"
        ]
        assert said[0].filename == __file__  # the warning points at the caller's line
        assert (
            one.failed == {"items": 2, "of": 6, "reasons": {"out of memory": 2}}
            and one.summary.results["template"].n == 6
        )
        with pytest.warns(fairprobe.FailedItems) as seen:
            both = fairprobe.run(["steady-api:x", "flaky-api:x"], out=tmp_path / "both", **same)
        said = [w for w in seen if issubclass(w.category, fairprobe.FailedItems)]
        assert len(said) == 1 and str(said[0].message).startswith(
            "model flaky implicit=off: 2 of 6 items failed (2: out"
        )
        assert both.failed == {"flaky implicit=off": one.failed} and both.runs["steady implicit=off"].failed is None
        flaky.down, flaky.prompts = False, []
        with warnings.catch_warnings():
            warnings.simplefilter("error", fairprobe.FailedItems)
            again = fairprobe.run("flaky-api:x", out=tmp_path / "one", **same)
    finally:
        SCHEMES.unregister("flaky-api")
        SCHEMES.unregister("steady-api")
    assert sorted(map(str, flaky.prompts)) == sorted(drawn[:2]) and again.failed is None


@pytest.mark.parametrize("fault", ["floor", "nan"])
def test_one_impossible_answer_fails_its_prompt_alone(tmp_path: Path, fault: str) -> None:
    # Every option of item 1 comes back at -9999 (vLLM's stand-in for -inf: no probability at all) or NaN: that
    # item fails, the run ends with a summary of the other three, and the rerun asks it again.
    bad = '"Men abuse women"'
    with echo_server(lambda text: fault if bad in text else "ok") as (url, _):
        summary = exact_direct(url, tmp_path / "run")
    records = read_samples(tmp_path / "run" / "samples.jsonl")
    errors = [r.error for r in records]
    assert errors[0] is None and errors[2:] == [None, None] and errors[1] is not None
    want = "impossible scores: the options hold no probability" if fault == "floor" else "malformed"
    assert want in errors[1]
    assert summary.results["direct"].n == 4
    line = failed_in(tmp_path / "run")
    assert line is not None and line.startswith("1 of 4 items failed (1: ")


def test_a_mode_the_server_cannot_serve_is_refused_before_any_set_runs(tmp_path: Path) -> None:
    # relationship-levy's options are letters "(a)", "(b)", "(c)": a top-k-only server bounds nothing for them.
    # The refusal comes before direct, the first set, asks anything.
    with scripted() as (url, seen):
        options = RunOptions(
            model="openai:test",
            model_args={"base_url": url, "implicit": "topk"},
            suite="genderbench",
            probes=["direct", "relationship-levy"],
            limit=2,
            out=tmp_path / "run",
            use_cache=False,
            probe_options={"mode": "exact"},
        )
        with pytest.raises(ConfigError) as refused:
            run(options)
    assert str(refused.value).startswith("relationship-levy: the server gives only top-k logprobs")
    assert "resume" not in str(refused.value)
    assert [b for b in seen.bodies if "messages" in b] == []


def test_sampled_items_that_failed_are_asked_again_with_the_seeds_they_had(tmp_path: Path) -> None:
    # GenderBench's direct set sampled (two replies per prompt): item 1's replies come back torn until the server
    # recovers; the rerun asks that item's two replies only, with the seeds its first attempt had.
    state = {"down": True}
    bad = '"Men abuse women"'

    def answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
        ok = json.dumps(completion_json(body, "Yes.", None)).encode()
        return (200, ok[: len(ok) // 2], {}) if state["down"] and bad in prompt_text(body) else (200, ok, {})

    with serve(answer) as (url, seen):
        exact_direct(url, tmp_path / "run", limit=3, sampled={"repetitions": "2"})
        failed_seeds = sorted({b["seed"] for b in seen.bodies if bad in prompt_text(b)})
        assert failed_in(tmp_path / "run") == (
            "1 of 3 items failed (1: malformed response: answer is not valid JSON; malformed response: answer is not "
            "valid JSON): run the same command again to ask them again"
        )  # the item's reason: each of its two replies' errors
        state["down"], start = False, seen.count
        exact_direct(url, tmp_path / "run", limit=3, sampled={"repetitions": "2"})
        again = seen.bodies[start:]
    assert all(bad in prompt_text(b) for b in again) and len(again) == 2
    assert sorted(b["seed"] for b in again) == failed_seeds and len(failed_seeds) == 2
    records = read_samples(tmp_path / "run" / "samples.jsonl")
    assert [r.error for r in records] == [None] * 3 and records[1].answers == [["yes", "yes"]]  # type: ignore[attr-defined]


def test_a_prompt_whose_scoring_failed_is_asked_again_by_the_same_command(tmp_path: Path) -> None:
    # The paper family keeps a continuation whose scoring failed (`scoring_error`); that item counts as failed, and
    # the same command asks it again (its generation from the cache, its scoring from the server).
    from test_api_exact import BAD, exact_run

    state = {"down": True}
    with echo_server(lambda text: "500" if state["down"] and BAD in text else "ok") as (url, _):
        exact_run(url, tmp_path)
        line = failed_in(tmp_path / "run")
        assert line is not None and line.startswith("1 of 6 items failed (1: scoring failed: ")
        state["down"] = False
        exact_run(url, tmp_path)
    assert failed_in(tmp_path / "run") is None
    assert [s.scoring_error for s in read_samples(tmp_path / "run" / "samples.jsonl")] == [None] * 6  # type: ignore[attr-defined]
