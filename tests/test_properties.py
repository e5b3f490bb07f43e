"""Property-based tests: every loader and parser, given arbitrary bytes or structures, returns a valid result
or fairprobe's own one-line error, nothing else. Examples are derived from a fixed seed (derandomize), so CI
runs the same cases every time."""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairprobe.errors import ConfigError, DataError, FairprobeError
from fairprobe.families.gender_income.sets import read_decodingtrust, read_uci
from fairprobe.families.paper.build_natural import read_snli_sentences, read_stsb_sentences
from fairprobe.families.paper.sets import load_statement_file, read_predicates
from fairprobe.families.paper.words import AttributeWords, detect_gendered_words
from fairprobe.families.professional_bias.sets import parse_winobias, read_frames, read_vijil_prompts
from fairprobe.io import iter_jsonl, read_text, split_lines
from fairprobe.models import validate
from fairprobe.models.api import parse_reply
from fairprobe.models.server_scoring import topk_scores
from fairprobe.models.validate import MalformedResponse
from fairprobe.records import ProbeSet, Summary
from fairprobe.report.check import check_summary
from fairprobe.report.runs import load_run, load_summary
from fairprobe.runfolder import check_folder, read_manifest
from fairprobe.runner import read_samples
from fairprobe.scoring import score_responses

PROPERTY = settings(
    derandomize=True,  # a fixed seed: the same examples on every machine and every CI run
    database=None,
    deadline=None,
    max_examples=int(os.environ.get("FAIRPROBE_PROPERTY_EXAMPLES", "60")),  # more for a deeper local search
    suppress_health_check=[HealthCheck.too_slow],
)
WORK = Path(tempfile.mkdtemp(prefix="fairprobe-properties-"))

# JSON values of every kind, NaN and infinities included (Python's json writes and reads them).
leaves = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=30)
json_values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
# Text that looks like the files' lines: words, quotes, commas, tabs, brackets, line separators, BOMs.
line_chars = st.sampled_from(list("aAz09 ,;\t\"'[]{}:.-_\\/\r\u2028\u2029\u0085\ufeff\x00é→"))
lines = st.lists(st.text(alphabet=line_chars, max_size=40), max_size=8).map("\n".join)
file_bytes = (
    st.binary(max_size=300) | lines.map(lambda t: t.encode("utf-8")) | json_values.map(lambda v: json.dumps(v).encode())
)
jsonl_bytes = st.lists(json_values.map(json.dumps) | st.text(alphabet=line_chars, max_size=30), max_size=5).map(
    lambda rows: "\n".join(rows).encode("utf-8")
)


def write(name: str, data: bytes) -> Path:
    path = WORK / name
    path.write_bytes(data)
    return path


@PROPERTY
@given(st.text(alphabet=line_chars, max_size=200))
def test_split_lines_keeps_every_character_but_newlines(text: str) -> None:
    parts = split_lines(text)
    assert all("\n" not in p for p in parts)
    assert "".join(parts).replace("\r", "") == text.replace("\n", "").replace("\r", "")


@PROPERTY
@given(file_bytes | jsonl_bytes)
def test_text_and_jsonl_readers(data: bytes) -> None:
    path = write("any.jsonl", data)
    try:
        text = read_text(path)
        assert isinstance(text, str) and not text.startswith("\ufeff")
        rows = list(iter_jsonl(path))
        assert all(isinstance(n, int) and isinstance(obj, dict) for n, obj in rows)
    except DataError:
        pass


@PROPERTY
@given(file_bytes, st.sampled_from(["s.txt", "s.csv"]))
def test_probe_files(data: bytes, name: str) -> None:
    path = write(name, data)
    try:
        ps = load_statement_file(path, f"file:{path}")
        assert isinstance(ps, ProbeSet) and all(isinstance(p.prompt, str) and p.prompt for p in ps.probes)
    except DataError:
        pass
    with contextlib.suppress(DataError):
        assert all(isinstance(p, str) and p for p in read_predicates(path))


@PROPERTY
@given(file_bytes | jsonl_bytes)
def test_fairness_and_pipeline_source_files(data: bytes) -> None:
    path = write("source.jsonl", data)
    for reader in (
        read_uci,
        read_decodingtrust,
        read_frames,
        read_vijil_prompts,
        read_stsb_sentences,
        read_snli_sentences,
    ):
        with contextlib.suppress(DataError):
            assert isinstance(reader(path), list)


@PROPERTY
@given(st.text(alphabet=line_chars, max_size=80))
def test_winobias_lines(line: str) -> None:
    with contextlib.suppress(DataError):
        assert len(parse_winobias(line, "x line 1")) == 4


@PROPERTY
@given(json_values)
def test_words_structures(obj: Any) -> None:
    try:
        words = AttributeWords.from_json(obj, "words.json")
    except DataError:
        return
    assert words.pairs and all(f and m for f, m in words.pairs) and not words.female & words.male
    assert detect_gendered_words("", words).words == []  # no empty word: nothing found in nothing


@PROPERTY
@given(file_bytes)
def test_words_files(data: bytes) -> None:
    with contextlib.suppress(DataError):
        AttributeWords.from_file(write("words.json", data))


@PROPERTY
@given(jsonl_bytes | file_bytes)
def test_responses_files(data: bytes) -> None:
    path = write("responses.jsonl", data)
    try:
        report = score_responses("professional-bias", path)
    except DataError:
        return
    assert report.samples and all(isinstance(n, int) for n, _ in report.skipped)


@PROPERTY
@given(json_values | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_summaries_manifests_and_samples(obj: Any) -> None:
    folder = WORK / "run"
    folder.mkdir(exist_ok=True)
    data = obj if isinstance(obj, str) else json.dumps(obj)
    for name in ("summary.json", "manifest.json", "samples.jsonl"):
        (folder / name).write_text(data, encoding="utf-8")
    try:
        summary = load_summary(folder)
        assert isinstance(summary, Summary)
        check_summary(summary, {"gas": 0.5})
    except (DataError, ConfigError):
        pass
    with contextlib.suppress(DataError):
        load_run(folder)
    try:
        assert isinstance(read_manifest(folder), dict)
        check_folder(folder, "run", "f", {})
    except ConfigError:
        pass
    assert isinstance(read_samples(folder / "samples.jsonl"), list)


def answer_shapes() -> st.SearchStrategy[Any]:
    """Answers shaped like a server's, with arbitrary values at every level, and arbitrary JSON."""
    top = st.dictionaries(st.text(max_size=6), leaves, max_size=4)
    chat_entry = st.fixed_dictionaries(
        {"token": leaves, "logprob": leaves},
        optional={
            "top_logprobs": st.lists(st.fixed_dictionaries({"token": leaves, "logprob": leaves}), max_size=3) | leaves
        },
    )
    choice = st.fixed_dictionaries(
        {},
        optional={
            "text": leaves,
            "message": st.fixed_dictionaries({}, optional={"content": leaves, "refusal": leaves}) | leaves,
            "logprobs": st.fixed_dictionaries(
                {},
                optional={
                    "top_logprobs": st.lists(top | leaves, max_size=2) | leaves,
                    "content": st.lists(chat_entry, max_size=2) | leaves,
                },
            )
            | leaves,
        },
    )
    return st.fixed_dictionaries({"choices": st.lists(choice, max_size=2) | leaves}) | json_values


@PROPERTY
@given(answer_shapes(), st.booleans())
def test_server_answers(data: Any, chat: bool) -> None:
    try:
        answer = parse_reply(data, chat)
    except MalformedResponse:
        return
    assert isinstance(answer.text, str)
    top = answer.top
    if top is not None:
        assert all(isinstance(k, str) and math.isfinite(v) and v <= 0 for k, v in top.items())
        assert validate.total_probability(top) <= 1.001
        scores = topk_scores(top, (" she", " he", " her", " his"), 20)
        probs = np.exp(scores.logprobs())
        assert probs.shape == (4,) and ((probs >= 0) & (probs <= 1.001)).all()


@PROPERTY
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_server_bodies(data: bytes) -> None:
    with contextlib.suppress(MalformedResponse):
        validate.json_body(data)


def test_the_errors_caught_above_are_fairprobes_own() -> None:
    assert issubclass(DataError, FairprobeError) and issubclass(ConfigError, FairprobeError)
    with pytest.raises(DataError):
        load_summary(WORK / "absent")
