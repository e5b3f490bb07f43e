"""Input files: lines split on "\\n" only, a BOM accepted, headers and huge lines refused, strict words files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import exact_scores, fake_loglikelihood
from fairprobe.errors import DataError, ModelError
from fairprobe.families import load_probe_set
from fairprobe.families.paper import PaperSample
from fairprobe.families.paper.sets import read_predicates
from fairprobe.families.paper.words import AttributeWords, detect_gendered_words
from fairprobe.io import iter_jsonl, read_text, split_lines
from fairprobe.models import Completion, GenerationConfig, ModelBackend
from fairprobe.runner import RunOptions, read_samples, run
from fairprobe.scoring import score_responses

ODD_BREAKS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"


def test_split_lines_breaks_on_newline_only() -> None:
    assert split_lines(f"a{ODD_BREAKS}b\nc\r\nd\n") == [f"a{ODD_BREAKS}b", "c", "d"]
    assert split_lines("") == [] and split_lines("\n") == [""] and split_lines("x") == ["x"]


def test_a_statement_file_keeps_unicode_line_separators_inside_lines(tmp_path: Path) -> None:
    path = tmp_path / "s.txt"
    path.write_text("\ufeffMy friend reads\u2028poems\nMy friend swims\u0085daily\n", encoding="utf-8")
    ps = load_probe_set(f"file:{path}")
    assert [p.prompt for p in ps.probes] == ["My friend reads\u2028poems, and", "My friend swims\u0085daily, and"]


def test_a_bom_is_accepted_on_every_text_input(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": "0", "response": "The nurse."}\n')
    assert [obj for _, obj in iter_jsonl(path)] == [{"id": "0", "response": "The nurse."}]
    report = score_responses("professional-bias", path)
    assert report.skipped == [] and len(report.samples) == 1
    words = tmp_path / "w.json"
    words.write_bytes(b'\xef\xbb\xbf{"pairs": [["she", "he"]]}')
    assert AttributeWords.from_file(words).pairs == (("she", "he"),)


def test_a_reply_with_a_line_separator_is_one_valid_line_for_score(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    reply = "The nurse.\u2028Really\u2029."
    path.write_text(json.dumps({"id": "0", "response": reply}, ensure_ascii=False) + "\n", encoding="utf-8")
    report = score_responses("professional-bias", path)
    assert report.skipped == [] and len(report.samples) == 1


def test_a_saved_sample_with_a_line_separator_is_read_back_whole(tmp_path: Path) -> None:
    sample = PaperSample(set="template", id="0", prompt="p", continuation="she said\u2028hi\u0085there")
    path = tmp_path / "samples.jsonl"
    path.write_text(sample.model_dump_json() + "\n", encoding="utf-8")
    assert [s.continuation for s in read_samples(path)] == ["she said\u2028hi\u0085there"]


def test_a_csv_header_is_not_a_prompt(tmp_path: Path) -> None:
    path = tmp_path / "p.csv"
    path.write_text("predicate\nis playing a harp\n")
    with pytest.raises(DataError, match="line 1 is a column header"):
        read_predicates(path)
    path.write_text("is playing a harp\nis cutting onions\n")
    assert read_predicates(path) == ["is playing a harp", "is cutting onions"]


def test_text_that_is_not_utf8_is_a_data_error(tmp_path: Path) -> None:
    path = tmp_path / "b.txt"
    path.write_bytes(b"My friend \xff\xfe\n")
    with pytest.raises(DataError, match="not UTF-8 text"):
        read_text(path, "probe file")


@pytest.mark.slow
def test_a_prompt_longer_than_the_model_context_is_refused_before_tokenizing(embedded_backend) -> None:
    with pytest.raises(ModelError, match=r"longer than .*context"):
        embedded_backend.generate(["x" * 10_000_000], GenerationConfig(max_new_tokens=1))
    with pytest.raises(ModelError, match="tokens is longer than"):
        embedded_backend.generate(["friend " * 9000], GenerationConfig(max_new_tokens=1))


@pytest.mark.parametrize(
    ("words", "match"),
    [
        ({"pairs": [[1, "he"]]}, r"pairs\[0\]\[0\] must be a string, got 1"),
        ({"pairs": [[None, "he"]]}, r"pairs\[0\]\[0\] must be a string, got null"),
        ({"pairs": [[["she"], "he"]]}, r"pairs\[0\]\[0\] must be a string"),
        ({"pairs": [["", "he"]]}, r"pairs\[0\]\[0\] is not a word"),
        ({"pairs": [[" she", "he"]]}, r"is not a word"),
        ({"pairs": [["she", "he", "they"]]}, r"pairs\[0\] must be a list of two words"),
        ({"pairs": []}, "non-empty list 'pairs'"),
        ({"pairs": [["she", "he"]], "detection": {"female": [""]}}, r"detection.female\[0\] is not a word"),
        ({"pairs": [["she", "he"]], "detection": {"female": [3]}}, r"detection.female\[0\] must be a string"),
        ({"pairs": [["she", "he"]], "detection": {"female": "her"}}, "detection.female must be a list"),
        ({"pairs": [["she", "he"]], "detection": {"male": ["she"]}}, "both female and male: she"),
        ({"pairs": [["she", "he"]], "detection": {"neutral": ["they"]}}, "'detection' must be"),
        ({"pairs": [["she", "he"], ["she", "him"]]}, "bijection"),
        ({"pairs": [["she", "he"]], "extra": 1}, "unknown key"),
        ([["she", "he"]], "must be a JSON object"),
    ],
)
def test_words_files_are_validated_strictly(tmp_path: Path, words: object, match: str) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps(words))
    with pytest.raises(DataError, match=match):
        AttributeWords.from_file(path)


def test_an_empty_detection_word_can_no_longer_make_everything_female(tmp_path: Path) -> None:
    path = tmp_path / "w.json"
    path.write_text(json.dumps({"pairs": [["she", "he"]], "detection": {"female": [""]}}))
    with pytest.raises(DataError):
        AttributeWords.from_file(path)
    words = AttributeWords.from_json({"pairs": [["she", "he"]], "detection": {"female": ["ma'am", "step-mother"]}}, "t")
    assert detect_gendered_words("he met the step-mother", words).first_gender == "male"


@pytest.mark.parametrize("content", [b"", b"\x00\xff\x80", b"{", b"[1, 2]", b"null"])
def test_unreadable_words_files_are_data_errors(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "w.json"
    path.write_bytes(content)
    with pytest.raises(DataError):
        AttributeWords.from_file(path)


def test_words_folder_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="is a folder"):
        AttributeWords.from_file(tmp_path)


class EchoBackend(ModelBackend):
    """A fake model whose every reply holds U+2028 and U+2029; refuses to be asked when `refuse` is set."""

    name = "echo"
    has_chat_template = False

    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse

    def identity(self) -> dict[str, str]:
        return {"id": "echo"}

    def generate(self, prompts, config, score=None):
        assert not self.refuse, "a finished run must not ask again"
        scores = [None if score is None else exact_scores([0.01] * len(s)) for s in (score or [()] * len(prompts))]
        return [Completion(text=" she\u2028said he\u2029left.", scores=scored) for scored in scores]

    def loglikelihood(self, requests):
        return fake_loglikelihood(requests)


def test_a_finished_run_with_line_separators_in_replies_is_resumed_without_asking_again(tmp_path: Path) -> None:
    opts = RunOptions(probes=["template"], limit=4, out=tmp_path / "run", use_cache=False)
    first = run(opts, backend=EchoBackend())
    again = run(opts, backend=EchoBackend(refuse=True))
    assert first.to_json_obj() == again.to_json_obj()
    assert [s.continuation for s in read_samples(tmp_path / "run" / "samples.jsonl")] == [
        " she\u2028said he\u2029left."
    ] * 4


def test_report_samples_carry_line_separators_escaped() -> None:
    from fairprobe.report.html import samples_json
    from fairprobe.report.runs import RunData

    run_data = RunData(
        path=Path("r"),
        label="r",
        summary=None,
        samples=[{"set": "template", "id": "0", "prompt": "p", "continuation": "a\u2028b\u2029c"}],
    )
    text = samples_json([run_data])
    assert "\u2028" not in text and "\u2029" not in text
    assert json.loads(text)[0]["t"] == ["a\u2028b\u2029c"]
