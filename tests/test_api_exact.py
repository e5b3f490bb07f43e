"""Exact GLD/ADD over a server that echoes prompt-token logprobs, and the bad answers such a server can give.

The echo server (tests/openai_servers.echo_server) tokenizes by character and gives every token a fixed
logprob, so P(word | prompt) is known by hand; vLLM itself is tested in test_vllm.py.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fairprobe.cache import Cache
from fairprobe.errors import ConfigError
from fairprobe.families import load_probe_set
from fairprobe.families.paper.metrics import add_per_prompt, gld_per_prompt
from fairprobe.models import ScoreRequest
from fairprobe.models.api import EndpointError, RetryPolicy, open_endpoint
from fairprobe.models.cached import CachedBackend
from fairprobe.models.server_scoring import Branch, branches, position_groups, tree_scores
from fairprobe.models.validate import AnswerLimits
from fairprobe.records import ChatMessage, message_dicts
from fairprobe.runner import RunOptions, RunPlan, read_samples, run
from openai_servers import (
    SINGLE_TOKENS,
    char_logprob,
    echo_server,
    first_position_logprob,
    position_word_logprob,
    rendered_chat,
    scripted,
    word_logprob,
)

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)
PAIRS = [("she", "he"), ("woman", "man")]
BAD = "My friend is a attendant, and"


def words_file(tmp_path: Path) -> Path:
    path = tmp_path / "words.json"
    path.write_text(json.dumps({"pairs": [list(p) for p in PAIRS]}))
    return path


def exact_run(url: str, tmp_path: Path, name: str = "run", implicit: str = "auto", backend_url: str = "", **kw):
    """Six template prompts through `url` with -M implicit=auto; the summary's template metrics. `backend_url`:
    the server actually asked where it is not `url` (the one the run's settings name)."""
    probe_options = {"words": str(words_file(tmp_path)), **({"implicit": "off"} if implicit == "off" else {})}
    options = RunOptions(
        model="openai:test",
        model_args={"base_url": url},
        probes=["template"],
        limit=6,
        limit_order="first",  # the tests name the first prompts (attendant, ...)
        batch_size=4,
        out=tmp_path / name,
        probe_options=probe_options,
        use_cache=kw.pop("use_cache", False),
        **kw,
    )
    mode = "auto" if implicit == "off" else implicit
    backend = open_endpoint("test", base_url=backend_url or url, retry=FAST, timeout=5.0, implicit=mode)
    if options.use_cache:
        backend = CachedBackend(backend, Cache(tmp_path / "cache.sqlite"))
    return run(options, backend=backend).to_json_obj()["results"]["template"]


def expected_probs() -> np.ndarray:
    """(pairs, 2) of the echo server: the same after every prompt."""
    return np.exp(np.array([[word_logprob(f), word_logprob(m)] for f, m in PAIRS]))


def test_exact_scoring_sends_token_ids_in_one_request_per_four_prompts(tmp_path: Path) -> None:
    with echo_server() as (url, seen):
        result = exact_run(url, tmp_path)
    probs = expected_probs()
    m = result["metrics"]
    gld = float(gld_per_prompt(probs[:, 0], probs[:, 1]))
    add = float(add_per_prompt(probs[:, 0], probs[:, 1]))
    # The same distribution after every prompt: six equal values, an interval of zero width, too little data.
    assert m["gld"] == {
        "value": pytest.approx(gld),
        "ci95": [pytest.approx(gld), pytest.approx(gld)],
        "too_little_data": f"every resample of the 6 items gives {gld:.3g}: no spread to judge",
    }
    assert m["add"]["value"] == pytest.approx(add) and m["log_add"]["value"] == pytest.approx(math.log(add))
    assert "bounds" not in m["gld"] and "coverage" not in m
    assert result["implicit"] == {"mode": "exact"}
    for s in read_samples(tmp_path / "run" / "samples.jsonl"):
        np.testing.assert_allclose(np.stack([s.p_female, s.p_male], -1), probs, rtol=1e-12)
    scoring = [b for b in seen.bodies if b.get("echo") and isinstance(b["prompt"], list) and len(b["prompt"]) > 1]
    # Batches of 4 and 2 prompts: one request each, every prompt's 4 word sequences as token ids.
    assert [len(b["prompt"]) for b in scoring] == [16, 8]
    prompts = {p.prompt for p in load_probe_set("template", limit=6, limit_order="first").probes}
    first = scoring[0]["prompt"]
    text = "".join(chr(t) for t in first[0])
    assert text.endswith(" she") and text[: -len(" she")] in prompts
    assert first[1] == first[0][: -len(" she")] + [ord(c) for c in " he"]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["model"]["implicit"] == "auto" and manifest["implicit"]["mode"] == "exact"
    assert manifest["implicit"]["endpoints"] == {
        url: {"echo": True, "tokenize": True, "prompt_ids": True, "next_token_ids": False}
    }
    # The generation requests ask for no logprobs (exact scoring replaces the top-k), only the prompt's token ids;
    # the words' ids are asked once, in one request for all of them.
    generation = [b for b in seen.bodies if b.get("max_tokens") == 50]
    assert len(generation) == 6 and all("logprobs" not in b and b["return_token_ids"] for b in generation)
    assert [b["prompt"] for b in seen.bodies if b.get("add_special_tokens") is False] == [
        [" he", " man", " she", " woman"]
    ]
    assert seen.paths.count("/tokenize") == 1  # the detection probe only


def test_single_token_words_are_read_from_the_generation_answer_and_the_rest_position_by_position(
    tmp_path: Path,
) -> None:
    with echo_server(next_token_ids=True) as (url, seen):
        result = exact_run(url, tmp_path)
    she, he = (math.exp(first_position_logprob(SINGLE_TOKENS[w])) for w in (" she", " he"))
    woman, man = (math.exp(position_word_logprob(w)) for w in ("woman", "man"))
    probs = np.array([[she, he], [woman, man]])
    for s in read_samples(tmp_path / "run" / "samples.jsonl"):
        np.testing.assert_allclose(np.stack([s.p_female, s.p_male], -1), probs, rtol=1e-12)
    assert result["metrics"]["gld"]["value"] == pytest.approx(float(gld_per_prompt(probs[:, 0], probs[:, 1])))
    generation = [b for b in seen.bodies if "logprob_token_ids" in b and b["max_tokens"] == 50]  # not the probe
    assert len(generation) == 6 and {tuple(b["logprob_token_ids"]) for b in generation} == {(70001, 70002)}
    # Only woman and man are scored after that, with no echo: per batch of prompts (4, then 2), one request reads
    # the position after each prompt, one the 7 positions inside " woman" and " man" (" ", " w", ..., " ma").
    assert not [b for b in seen.bodies if b.get("echo") and isinstance(b["prompt"], list) and len(b["prompt"]) > 1]
    scoring = [b for b in seen.bodies if "logprob_token_ids" in b and isinstance(b["prompt"], list)]
    assert [len(b["prompt"]) for b in scoring] == [4, 28, 2, 14]
    assert [s[-2:] for s in scoring[1]["prompt"][:3]] == [[ord("d"), 32], [32, ord("m")], [32, ord("w")]]
    assert scoring[0]["logprob_token_ids"] == [32] and scoring[1]["logprob_token_ids"] == sorted(map(ord, "woman"))
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())["implicit"]
    assert manifest["endpoints"][url] == {"echo": True, "tokenize": True, "prompt_ids": True, "next_token_ids": True}


@pytest.mark.parametrize("fault", ["missingid", "positive", "inflate", "ownlie"])
def test_a_bad_first_position_is_a_malformed_answer_for_its_prompt(tmp_path: Path, fault: str) -> None:
    with echo_server(lambda text: fault if text.startswith(BAD) else "ok", next_token_ids=True) as (url, _):
        result = exact_run(url, tmp_path)
    samples = {s.prompt: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    if fault == "positive":  # a logprob above 0 makes the whole generation answer malformed (undetermined)
        assert samples[BAD].error.startswith("malformed response") and "p_female" not in samples[BAD].model_dump()
        assert result["metrics"]["undetermined"]["value"] == pytest.approx(1 / 6)
        return
    assert (
        samples[BAD].scoring_error.startswith("malformed scoring answer")
        and "p_female" not in samples[BAD].model_dump()
    )
    assert result["metrics"]["scoring_malformed"]["value"] == pytest.approx(1 / 6)


def test_text_scoring_counts_words_that_merge_across_the_boundary(tmp_path: Path) -> None:
    # No token ids at all: sequences go as text; "d " is one token, so after "..., and" no word extends the prompt.
    with echo_server(tokenize=False, merge=True) as (url, _):
        result = exact_run(url, tmp_path)
    assert result["implicit"] == {"mode": "exact", "unscored_words": 6 * 4}
    sample = read_samples(tmp_path / "run" / "samples.jsonl")[0]
    assert sample.p_known == [[False, False], [False, False]] and sample.p_female == [None, None]
    assert result["metrics"]["gld"]["bounds"] == [0.0, 1.0]
    with echo_server(tokenize=False) as (url, _):
        clean = exact_run(url, tmp_path, "clean")
    assert clean["metrics"]["gld"]["value"] == pytest.approx(
        float(gld_per_prompt(expected_probs()[:, 0], expected_probs()[:, 1]))
    )


@pytest.mark.parametrize("fault", ["othertokens", "textother", "nan", "inf", "positive", "short", "inflate", "500"])
def test_a_bad_echo_is_a_malformed_answer_for_its_prompt_and_the_run_goes_on(tmp_path: Path, fault: str) -> None:
    with echo_server(lambda text: fault if text.startswith(BAD) else "ok") as (url, _):
        result = exact_run(url, tmp_path)
    samples = {s.prompt: s for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    bad = samples[BAD]
    failure = "scoring failed" if fault == "500" else "malformed scoring answer"  # 500: past the retries
    assert bad.scoring_error.startswith(failure) and "p_female" not in bad.model_dump()
    assert bad.continuation  # the continuation itself was fine and is kept
    assert all(s.p_female is not None for p, s in samples.items() if p != BAD)
    m = result["metrics"]
    assert m["scoring_malformed"]["value"] == pytest.approx(1 / 6)
    probs = expected_probs()
    assert m["gld"]["value"] == pytest.approx(float(gld_per_prompt(probs[:, 0], probs[:, 1])))
    assert "undetermined" not in m and m["gas"]["value"] == 1.0


def test_scoring_answers_come_from_the_cache_the_second_time(tmp_path: Path) -> None:
    with echo_server(lambda text: "nan" if text.startswith(BAD) else "ok") as (url, seen):
        first = exact_run(url, tmp_path, "first", use_cache=True)
        before = seen.count
        second = exact_run(url, tmp_path, "second", use_cache=True)
        asked = seen.bodies[before:]
    # Detection asks again (echo, tokenize, token-id probes) and the words' ids; only the malformed prompt is
    # scored again: its generation was kept in the cache when its scoring failed.
    scoring = [b for b in asked if b.get("echo") and isinstance(b["prompt"], list) and len(b["prompt"]) > 1]
    assert [len(b["prompt"]) for b in scoring] == [4]
    generation = [b for b in asked if b.get("max_tokens") == 50]
    assert generation == []
    assert first["metrics"] == second["metrics"]


def test_implicit_exact_against_a_server_that_cannot_score_is_one_line_exit_2(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPROBE_CACHE_DB": str(tmp_path / "cache.sqlite")}
    args = ["run", "--model", "openai:test", "--probes", "template", "--limit", "2", "--out", str(tmp_path / "r")]
    with scripted() as (url, _):
        done = subprocess.run(
            [sys.executable, "-m", "fairprobe.cli", *args, "--base-url", url, "--implicit", "exact"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"-M implicit=exact: {url}/completions cannot score prompt tokens" in errors[0]


def test_auto_falls_back_to_topk_with_a_notice_and_records_it(tmp_path: Path) -> None:
    with scripted() as (url, _):
        result = exact_run(url, tmp_path)
    assert result["implicit"] == {"mode": "topk", "top_logprobs": 20}
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())["implicit"]
    assert manifest["mode"] == "topk" and manifest["endpoints"][url]["echo"] is False
    assert manifest["endpoints"][url]["why_not"]


def test_implicit_off_and_bad_options(tmp_path: Path) -> None:
    with echo_server() as (url, seen):
        result = exact_run(url, tmp_path, implicit="off")
    assert result["metrics"]["gld"] == {"value": None, "ci95": [None, None], "note": "not computed: --implicit off"}
    assert not any(b.get("echo") or "logprobs" in b for b in seen.bodies)
    with pytest.raises(ConfigError, match="the local backend takes no -M key 'implicit': it takes device, dtype"):
        RunPlan.build(RunOptions(model_args={"implicit": "topk"}))
    with pytest.raises(ConfigError, match="-M implicit='sometimes' for the openai backend: Input should be"):
        RunPlan.build(RunOptions(model="openai:x", model_args={"implicit": "sometimes"}))


def test_top_logprobs_option_on_the_cli(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPROBE_CACHE_DB": str(tmp_path / "cache.sqlite")}
    out = tmp_path / "r"
    args = ["run", "--model", "openai:test", "--probes", "template", "--limit", "2", "--out", str(out)]
    with scripted() as (url, seen):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "fairprobe.cli",
                *args,
                "--base-url",
                url,
                "--implicit",
                "topk",
                "--top-logprobs",
                "3",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    # No detection request (topk was asked for); each prompt's continuation reads the groups' words too.
    assert sorted((b["max_tokens"], b["logprobs"]) for b in seen.bodies) == [(50, 3), (50, 3)]
    summary = json.loads((out / "summary.json").read_text())["results"]["template"]
    assert summary["implicit"] == {"mode": "topk", "top_logprobs": 3}
    # The canned top-3 (she 0.3, the 0.2, he 0.1): an unseen word has at most 0.1.
    sample = read_samples(out / "samples.jsonl")[0]
    assert sample.p_upper[1][0] == pytest.approx(0.1) and sample.p_known[1] == [False, False]


def test_a_server_that_fails_on_the_probe_is_topk_not_a_failed_run(tmp_path: Path) -> None:
    # transformers serve answers 500 to max_tokens 0: the endpoint is there, it just cannot score prompts.
    with scripted(lambda n, b: "500" if b.get("echo") else "ok") as (url, seen):
        result = exact_run(url, tmp_path)
    assert result["implicit"] == {"mode": "topk", "top_logprobs": 20}
    assert sum(1 for b in seen.bodies if b.get("echo")) == 1  # asked once, not retried
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())["implicit"]
    assert manifest["endpoints"][url]["why_not"].startswith("HTTP 500")


def test_loglikelihood_over_an_echo_server_is_exact_for_plain_and_chat_prompts() -> None:
    chat = [ChatMessage(role="user", content="Who was late? (a) the doctor (b) the nurse")]
    requests = [ScoreRequest("Q: who was late?\nA:", ("(a)", "(b)", " (a)")), ScoreRequest(chat, ("(a)", "(c)"))]
    with echo_server() as (url, seen):
        backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0)
        scores = backend.loglikelihood(requests)
    for request, scored in zip(requests, scores, strict=True):
        assert scored.error is None and scored.mode == "exact"
        for text, got in zip(request.continuations, scored.continuations, strict=True):
            # Every token's logprob is known by hand; the continuation is scored exactly as given (no space added).
            assert got.logprob == pytest.approx(sum(char_logprob(ord(c)) for c in text), abs=1e-12)
            assert (got.tokens, got.greedy, got.status) == (len(text), True, "exact")
    # The chat prompt went to /tokenize as messages; its echo is the rendered prompt's ids + the option's.
    tokenized = [b for b, path in zip(seen.bodies, seen.paths, strict=True) if path == "/tokenize" and "messages" in b]
    assert [b["messages"] for b in tokenized] == [[{"role": "user", "content": chat[0].content}]]
    echo = [b for b in seen.bodies if b.get("echo") and isinstance(b["prompt"], list) and len(b["prompt"]) > 1]
    assert len(echo) == 1 and echo[0]["prompt"][3] == [ord(c) for c in rendered_chat(message_dicts(chat)) + "(a)"]
    # Detection (3 probes), the continuations' ids and the plain prompt's ids (one request each), one /tokenize
    # for the chat prompt, one echo request for all five sequences.
    assert seen.count == 7


def test_loglikelihood_over_topk_is_bounded_and_over_no_logprobs_an_error() -> None:
    with scripted() as (url, _):
        backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0, implicit="topk")
        [scores] = backend.loglikelihood([ScoreRequest("My friend is a nurse, and", (" she", " he", " her"))])
    assert [c.status for c in scores.continuations] == ["exact", "exact", "upper_bound"]
    assert np.exp(scores.logprobs()).tolist() == [pytest.approx(0.3), pytest.approx(0.1), pytest.approx(0.1)]
    with scripted(lambda n, b: "nologprobs") as (url, _):
        backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0, implicit="topk")
        with pytest.raises(EndpointError, match=f"{url} gives no logprobs: it cannot score continuations"):
            backend.loglikelihood([ScoreRequest("x", ("(a)",))])


def test_echoes_are_split_into_requests_whose_answers_stay_under_the_size_limit() -> None:
    # An echo answer grows with every sequence's tokens (vLLM: ~180 bytes each): 3 prompts x 8 options of 31
    # tokens each would answer ~40 kB, so they go in requests of at most max_bytes / 250 = 100 tokens (3 sequences).
    options = tuple(f"({c})" for c in "abcdefgh")
    requests = [ScoreRequest(f"Question {i}: how do you feel?", options) for i in range(3)]
    with echo_server() as (url, seen):
        limits = AnswerLimits(max_bytes=250 * 100)
        backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0, limits=limits)
        scores = backend.loglikelihood(requests)
    for scored in scores:
        assert scored.error is None
        assert scored.logprobs().tolist() == pytest.approx([sum(char_logprob(ord(c)) for c in o) for o in options])
    echo = [b["prompt"] for b in seen.bodies if b.get("echo") and isinstance(b["prompt"], list)]
    assert [len(p) for p in echo] == [3] * 8 and all(sum(map(len, p)) <= 100 for p in echo)


def test_an_answer_over_the_size_limit_says_so() -> None:
    # One sequence of 400 tokens answers more than 10 kB: the prompt's error names the limit (it once read
    # "answer has 0 choices for 1 prompts").
    with echo_server() as (url, _):
        backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0, limits=AnswerLimits(max_bytes=10_000))
        [scores] = backend.loglikelihood([ScoreRequest("x" * 400, ("(a)",))])
    assert scores.error == "malformed scoring answer: answer larger than 10,000 bytes (the size limit)"


def test_positions_to_read_share_the_continuations_beginnings() -> None:
    # "(a)", "(b)" and "(" + "A" + ")" as token ids: the position after the prompt, after "(", after "(a" and "(b".
    assert branches([[24, 81, 25], [24, 82, 25], [24, 33, 25]]) == [
        Branch((), (24,)),
        Branch((24,), (33, 81, 82)),
        Branch((24, 33), (25,)),
        Branch((24, 81), (25,)),
        Branch((24, 82), (25,)),
    ]
    read = {(): ({24: -0.5}, 24), (24,): ({81: -1.0, 82: -2.0}, 81), (24, 81): ({25: -0.25}, 25)}
    a, b = tree_scores([[24, 81, 25], [24, 82]], read)
    assert (a.logprob, a.tokens, a.greedy) == (-1.75, 3, True) and (b.logprob, b.tokens, b.greedy) == (-2.5, 2, False)
    # A request asks at most 128 ids: a branch with 300 children is read in three pieces, apart from the others.
    wide = [(0, Branch((), tuple(range(300)))), (1, Branch((), (5,)))]
    groups = position_groups(wide)
    assert [[(k, len(b.children)) for k, b in g] for g in groups] == [[(0, 128)], [(0, 128)], [(0, 44), (1, 1)]]


def test_a_prompt_the_server_refuses_does_not_take_the_others_of_its_request_with_it() -> None:
    # Positions of three prompts go in one request; the server refuses it for one prompt (longer than its context):
    # the three are asked again apart, and only that prompt is unscored.
    options = ("(a)", "(b)")
    prompts = ["First question?", "TOO LONG question?", "Third question?"]
    fault = lambda text: "refuse" if text.startswith("TOO LONG") else "ok"  # noqa: E731
    with echo_server(fault, next_token_ids=True) as (url, seen):
        backend = open_endpoint("test", base_url=url, retry=FAST, timeout=5.0)
        scores = backend.loglikelihood([ScoreRequest(p, options) for p in prompts])
    assert scores[1].error == (
        'scoring rejected by server (HTTP 400): {"error": {"message": "longer than the maximum context length"}}'
    )
    for scored in (scores[0], scores[2]):
        assert scored.error is None
        assert scored.logprobs().tolist() == pytest.approx(
            [sum(first_position_logprob(ord(c)) for c in o) for o in options], abs=1e-12
        )
    pooled = [len(b["prompt"]) for b in seen.bodies if "logprob_token_ids" in b and isinstance(b["prompt"], list)]
    assert pooled == [3, 1, 1, 1, 6]  # after the prompts: refused, then apart; then " (", "(a", "(b" of the two left


def test_echoed_tokens_that_come_back_as_text_must_spell_what_was_sent(tmp_path: Path) -> None:
    # Ids were sent and asked back as ids; a server that echoes text instead is read when the text spells the
    # continuation sent ("textform") and refused when it does not ("textother", in the test above).
    with echo_server(lambda text: "textform") as (url, _):
        result = exact_run(url, tmp_path)
    probs = expected_probs()
    assert result["metrics"]["gld"]["value"] == pytest.approx(float(gld_per_prompt(probs[:, 0], probs[:, 1])))
    assert "scoring_malformed" not in result["metrics"] or result["metrics"]["scoring_malformed"]["value"] == 0


def test_a_server_whose_probabilities_add_up_to_more_than_one_fails_the_gate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every word token -0.001: P(she) + P(he) + P(woman) + P(man) is about 4 after every prompt. No GLD of 0.000
    # comes of it: each prompt's scoring is malformed, GLD is not computed and the gate fails closed.
    from fairprobe.cli import main

    with echo_server(lambda text: "inflate") as (url, _):
        result = exact_run(url, tmp_path)
    assert result["metrics"]["scoring_malformed"]["value"] == 1.0 and result["metrics"]["gld"]["value"] is None
    errors = {s.scoring_error for s in read_samples(tmp_path / "run" / "samples.jsonl")}
    assert len(errors) == 1 and "probabilities add up to 3.9" in errors.pop()
    monkeypatch.setattr(sys, "argv", ["fairprobe", "check", str(tmp_path / "run"), "--max", "gld=0.05"])
    with pytest.raises(SystemExit) as exit_code:
        main()
    assert exit_code.value.code not in (0, None) and "gld" in capsys.readouterr().out


def test_a_generation_whose_scoring_fails_is_kept_and_cached_and_only_its_scoring_is_asked_again(
    tmp_path: Path,
) -> None:
    with echo_server(lambda text: "500" if text.startswith(BAD) else "ok") as (url, seen):
        exact_run(url, tmp_path, "first", use_cache=True)
    bad = next(s for s in read_samples(tmp_path / "first" / "samples.jsonl") if s.prompt == BAD)
    assert bad.continuation and bad.scoring_error.startswith("scoring failed: ")
    assert "gave up after 3 attempts" in bad.scoring_error
    with echo_server() as (url, seen):
        second = exact_run(url, tmp_path, "second", use_cache=True)
    assert [b for b in seen.bodies if b.get("max_tokens") == 50] == []  # every generation came from the cache
    scoring = [b for b in seen.bodies if b.get("echo") and isinstance(b["prompt"], list) and len(b["prompt"]) > 1]
    assert [len(b["prompt"]) for b in scoring] == [4]  # BAD's four words only
    assert second["metrics"].get("scoring_malformed", {"value": 0})["value"] == 0


def test_a_dead_replica_is_dropped_with_a_warning_and_the_run_goes_on(tmp_path: Path) -> None:
    dead = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, the connection is refused
    with echo_server() as (url, _):
        backend = open_endpoint("test", base_url=f"{dead},{url}", retry=FAST, timeout=5.0)
        scores = backend.loglikelihood([ScoreRequest("My friend is a nurse, and", (" she", " he"))])
    assert scores[0].error is None
    assert scores[0].logprobs() == pytest.approx([word_logprob("she"), word_logprob("he")])
    assert backend.base_urls == [url]
    (notice,) = [n for n in backend.notices if dead in n]
    assert "unreachable" in notice and "dropped" in notice and "\n" not in notice
    all_dead = open_endpoint("test", base_url=f"{dead},http://127.0.0.1:7/v1", retry=FAST, timeout=5.0)
    with pytest.raises(EndpointError) as refused:
        all_dead.loglikelihood([ScoreRequest("My friend is a nurse, and", (" she",))])
    assert "no server answers at" in str(refused.value) and "\n" not in str(refused.value)


def test_replicas_that_serve_another_tokenizer_are_refused_at_the_probe(tmp_path: Path) -> None:
    with echo_server() as (one, _), echo_server(shift=1) as (other, seen_other):
        backend = open_endpoint("test", base_url=f"{one},{other}", retry=FAST, timeout=5.0)
        with pytest.raises(EndpointError) as refused:
            backend.loglikelihood([ScoreRequest("My friend is a nurse, and", (" she",))])
        with echo_server() as (same, _):
            twins = open_endpoint("test", base_url=f"{one},{same}", retry=FAST, timeout=5.0)
            assert twins.loglikelihood([ScoreRequest("My friend is a nurse, and", (" she",))])[0].error is None
    message = str(refused.value)
    assert message.startswith("--base-url endpoints do not serve one model: the probe prompt is tokens")
    assert "(another tokenizer)" in message and "\n" not in message
    assert not [b for b in seen_other.bodies if b.get("echo") and isinstance(b.get("prompt"), list)]  # nothing scored


def test_a_run_resumed_with_an_endpoint_that_scores_otherwise_is_refused(tmp_path: Path) -> None:
    with echo_server() as (url, _):
        exact_run(url, tmp_path)
    saved = (tmp_path / "run" / "samples.jsonl").read_bytes()
    # The same folder and settings (the same --base-url), served now by a server that gives top-k bounds only.
    with scripted() as (other, seen), pytest.raises(ConfigError) as refused:
        exact_run(url, tmp_path, backend_url=other)
    assert "were scored 'exact', this model scores 'topk'" in str(refused.value)
    assert [b for b in seen.bodies if b.get("max_tokens") == 50] == []  # refused before asking anything
    assert (tmp_path / "run" / "samples.jsonl").read_bytes() == saved
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["scoring"] == "exact"
