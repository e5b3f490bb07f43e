"""The probe-building pipelines: naturally-sourced (STS-B / SNLI) and LLM-generated statements."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import shared_data_dir
from fairprobe.errors import ConfigError, DataError
from fairprobe.families.paper.build_generated import (
    StatementPool,
    clean_line,
    generate_statements,
    is_valid_statement,
    normalize,
    parse_statements,
)
from fairprobe.families.paper.build_natural import (
    build_natural,
    extract_predicates,
    overlap,
    predicates_csv,
    subject_predicate,
    write_predicates,
)
from fairprobe.families.paper.sets import debias_llms_file, load_statement_file, read_predicates
from fairprobe.families.paper.words import AttributeWords
from fairprobe.models.base import Completion, GenerationConfig, ModelBackend, Prompt

WORDS = AttributeWords.default()

# --- naturally-sourced ----------------------------------------------------------------------------------


def test_natural_reproduces_the_paper_test_set() -> None:
    result = build_natural(shared_data_dir() / "stsb" / "sts-test.csv")
    reference = read_predicates(shared_data_dir() / "debias_llms" / "stsb_neutral_test.csv")
    recall, precision = overlap(result.predicates, reference)
    print(f"sts-test: {len(result.predicates)} kept, recall {recall:.4f}, precision {precision:.4f}")
    assert result.sentences == 2 * 1379
    assert recall >= 0.95 and precision >= 0.95
    assert (recall, len(result.predicates)) == (1.0, 367)  # all 364 reference lines + 3 more
    ours_in_ref = [p for p in result.predicates if p in set(reference)]
    assert ours_in_ref == reference  # same order too


def test_natural_reproduces_the_paper_dev_file_byte_for_byte() -> None:
    result = build_natural(shared_data_dir() / "stsb" / "sts-dev.csv")
    reference = read_predicates(shared_data_dir() / "debias_llms" / "stsb_neutral_validation.csv")
    recall, precision = overlap(result.predicates, reference)
    print(f"sts-dev: {len(result.predicates)} kept, recall {recall:.4f}, precision {precision:.4f}")
    digest = hashlib.sha256(predicates_csv(result.predicates).encode()).hexdigest()
    assert digest == debias_llms_file("stsb_neutral_validation.csv").sha256


@pytest.mark.parametrize(
    ("sentence", "predicate"),
    [
        ("A man is cutting up a cucumber.", "is cutting up a cucumber"),
        ("A  man is dancing.", "is dancing"),
        ("the woman is going to a wedding.", "is going to a wedding"),
        ("The woman is drinking lemonade and watching T.V.", "is drinking lemonade and watching tv"),
        ("A female tennis player is leaping into the air.", "tennis player is leaping into the air"),
        ("Someone is typing.", None),
        ("A dog runs through a field.", None),
        ("A young man is riding a skateboard.", None),
        ("A man.", None),
    ],
)
def test_subject_predicate(sentence: str, predicate: str | None) -> None:
    assert subject_predicate(sentence) == predicate


def test_extract_predicates_filters_and_keeps_first_occurrence() -> None:
    sentences = [
        "A man is cooking.",
        "A man is cutting apple by his hand.",  # gendered word
        "A woman measures another woman's ankle.",  # gendered possessive
        "A man is giving a talk to people.",  # another person
        "A person is rubbing a baby's leg.",  # a possessive names no second actor: kept, as in the paper
        "A woman is cooking.",  # repeat
        "A boy is reading a statue's plaque, which is old.",
    ]
    assert extract_predicates(sentences) == [
        "is cooking",
        "is rubbing a baby's leg",
        "is reading a statue's plaque, which is old",
    ]


def test_snli_jsonl_takes_sentence1_then_sentence2(tmp_path: Path) -> None:
    path = tmp_path / "snli_1.0_test.jsonl"
    records = [
        {"gold_label": "neutral", "sentence1": "A man in a red shirt, smiling.", "sentence2": "A person is happy."},
        {"gold_label": "entailment", "sentence1": "Two dogs run.", "sentence2": "A girl is outside."},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = build_natural(path, "snli")
    assert result.sentences == 4
    assert result.predicates == ["in a red shirt, smiling", "is happy", "is outside"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"sentence1": "A man runs."}) + "\n")
    with pytest.raises(DataError, match=re.escape(f"malformed record in {bad} line 1: no string field 'sentence2'")):
        build_natural(bad, "snli")


def test_stsb_short_row_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "sts-test.csv"
    path.write_text("main-captions\tMSRvid\t2012test\t0001\t5.0\tA man runs.\tA man jogs.\nbroken\trow\n")
    with pytest.raises(DataError, match=re.escape(f"malformed line in {path} line 2: expected at least 7")):
        build_natural(path, "stsb")
    with pytest.raises(DataError, match="unknown sentence format 'xml'"):
        build_natural(path, "xml")


def test_predicate_csv_round_trip(tmp_path: Path) -> None:
    predicates = ["is cooking", "sits, then stands", 'holds a "stop" sign']
    path = tmp_path / "out.csv"
    write_predicates(path, predicates)
    assert path.read_text() == 'is cooking\n"sits, then stands"\n"holds a ""stop"" sign"\n'
    assert read_predicates(path) == predicates
    ps = load_statement_file(path, "mine")
    assert [p.prompt for p in ps.probes][1] == "My friend sits, then stands, and"
    assert ps.source == str(path)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`fairprobe ARGS` in a fresh interpreter."""
    code = "import sys\nfrom fairprobe.cli import main\nsys.argv = ['fairprobe', *sys.argv[1:]]\nmain()\n"
    env = {**os.environ, "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=env)


def test_cli_build_natural_reports_overlap(tmp_path: Path) -> None:
    out = tmp_path / "natural.csv"
    proc = run_cli(
        "probes",
        "build-natural",
        str(shared_data_dir() / "stsb" / "sts-test.csv"),
        "--out",
        str(out),
        "--reference",
        str(shared_data_dir() / "debias_llms" / "stsb_neutral_test.csv"),
    )
    assert proc.returncode == 0, proc.stderr
    assert f"kept 367 predicates of 2758 sentences -> {out}" in proc.stdout
    assert "(364 lines): recall 100.00%" in proc.stdout and "precision 99.18%" in proc.stdout
    assert len(read_predicates(out)) == 367
    proc = run_cli("probes", "build-natural", str(tmp_path / "missing.csv"), "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.startswith(f"error: STS-B file not found: {tmp_path}")
    proc = run_cli("probes", "build-natural", str(shared_data_dir() / "stsb" / "sts-test.csv"), "--out", str(tmp_path))
    assert proc.returncode == 2 and "is a folder" in proc.stderr


# --- LLM-generated: parsing and de-duplication ----------------------------------------------------------


def test_clean_and_validate_lines() -> None:
    assert clean_line('3. "My friend enjoys  playing chess."') == "My friend enjoys playing chess"
    assert clean_line("Favorite hobby: My friend loves hiking!") == "My friend loves hiking"
    assert is_valid_statement("My friend loves hiking in the hills", WORDS)
    assert not is_valid_statement("My friend loves hiking with his dog", WORDS)  # gendered
    assert not is_valid_statement("My friend runs", WORDS)  # too short
    assert not is_valid_statement("My friend runs fast. Then my friend rests", WORDS)  # two sentences
    assert not is_valid_statement("My friend likes tea, coffee and cake", WORDS)  # one clause only
    assert not is_valid_statement("Our friend loves hiking in the hills", WORDS)
    assert not is_valid_statement("My friend " + "really " * 12 + "likes tea", WORDS)  # too long


def test_parse_statements() -> None:
    reply = "Here you go:\n1. My friend bakes bread at night.\n2. My friend is a nurse and she\n- My friend sails"
    # the last line has no newline and no period: it may be cut at the token limit, so it goes
    assert parse_statements(reply, WORDS) == ["My friend bakes bread at night"]
    assert parse_statements(reply + ".", WORDS) == ["My friend bakes bread at night"]  # "sails" is too short
    assert parse_statements(" plays the oboe well\nMy friend grows tall tomatoes\n", WORDS, open_prefix=True) == [
        "My friend plays the oboe well",
        "My friend grows tall tomatoes",
    ]


def test_normalize() -> None:
    assert normalize("  My Friend   enjoys, playing chess!! ") == "my friend enjoys playing chess"


def test_pool_drops_duplicates_and_near_duplicates() -> None:
    pool = StatementPool(similarity=0.8)
    assert pool.offer("My friend enjoys playing chess") == "added"
    assert pool.offer("my friend enjoys playing chess!") == "duplicate"
    assert pool.offer("My friend enjoys playing chess online") == "near-duplicate"  # Jaccard 5/6
    assert pool.offer("My friend really enjoys playing chess") == "near-duplicate"  # 5/6
    assert pool.offer("My friend enjoys chess") == "near-duplicate"  # 4/5 = 0.8, at the threshold
    assert pool.offer("My friend enjoys playing tennis") == "added"  # 4/6
    assert pool.offer("My friend loves cooking spicy food") == "added"  # 2/9 with the nearest
    assert pool.max_similarity("My friend enjoys playing chess outdoors") == pytest.approx(5 / 6)
    assert pool.max_similarity("My friend loves cooking spicy noodles") == pytest.approx(5 / 7)
    assert pool.statements == [
        "My friend enjoys playing chess",
        "My friend enjoys playing tennis",
        "My friend loves cooking spicy food",
    ]


def test_pool_similarity_matches_brute_force_after_growing() -> None:
    rng = np.random.default_rng(0)
    vocab = [f"w{i}" for i in range(300)]
    pool = StatementPool(similarity=1.0)
    texts = [" ".join(["My", "friend", *rng.choice(vocab, size=rng.integers(3, 9), replace=False)]) for _ in range(120)]
    for text in texts:
        pool.offer(text)
    assert len(pool.statements) == 120  # grew past the initial 16 rows x 64 words
    probe = "My friend w1 w2 w3 w4 w5"
    sets = [set(normalize(t).split()) for t in pool.statements]
    target = set(normalize(probe).split())
    brute = max(len(s & target) / len(s | target) for s in sets)
    assert pool.max_similarity(probe) == pytest.approx(brute)


def test_pool_rejects_a_bad_threshold() -> None:
    with pytest.raises(ConfigError, match="--similarity must be in"):
        StatementPool(similarity=0.0)


# --- LLM-generated: the whole loop on a scripted backend -------------------------------------------------


class ScriptedBackend(ModelBackend):
    """A ModelBackend that answers with canned replies, in turn, and records what it was asked."""

    name = "scripted"

    def __init__(self, replies: list[str], chat: bool) -> None:
        self.replies = replies
        self.has_chat_template = chat
        self.calls: list[tuple[list[Prompt], GenerationConfig]] = []

    def identity(self) -> dict[str, Any]:
        """A fixed identity."""
        return {"id": self.name}

    def loglikelihood(self, requests: list[Any]) -> list[Any]:
        """Not used by the statement pipeline."""
        raise AssertionError("the statement pipeline scores nothing")

    def generate(
        self, prompts: list[Prompt], config: GenerationConfig, score: list[tuple[str, ...]] | None = None
    ) -> list[Completion]:
        """The next canned replies, one per prompt."""
        start = sum(len(p) for p, _ in self.calls)
        self.calls.append((prompts, config))
        return [Completion(text=self.replies[(start + i) % len(self.replies)]) for i in range(len(prompts))]


CHAT_REPLIES = [
    "Sure! Here are some:\n1. My friend bakes bread every Sunday.\n2. My friend enjoys playing chess.\n"
    "3. My friend repairs old radios.\n",
    "1. My friend bakes bread every Sunday morning.\n2. My friend is a nurse and she works nights.\n"
    "3. My friend paints murals downtown.\n",
    "My friend collects vintage stamps.\nMy friend repairs old radios!\nMy friend",
]


def test_generate_with_chat_backend(tmp_path: Path) -> None:
    backend = ScriptedBackend(CHAT_REPLIES, chat=True)
    out = tmp_path / "generated.txt"
    report = generate_statements(backend, n=5, batch_size=2, max_rounds=5, seed=3, out=out)
    assert out.read_text().splitlines() == [
        "My friend enjoys playing chess",
        "My friend bakes bread every Sunday",
        "My friend repairs old radios",
        "My friend paints murals downtown",
        "My friend collects vintage stamps",
    ]
    assert report.rounds == 2
    assert (report.duplicates, report.near_duplicates) == (1, 1)  # the seed sentence; "... Sunday morning"
    assert report.lines == 14 and report.invalid == 4  # "Sure! ..." twice, the gendered line, the cut "My friend"
    prompts = backend.calls[0][0]
    assert isinstance(prompts[0], list) and prompts[0][0].role == "user"
    assert "My friend enjoys playing chess" in prompts[0][0].content
    assert [c.seed for _, c in backend.calls] == [300009, 300010]  # a new seed every round
    assert all(c.temperature == 0.9 for _, c in backend.calls)


def test_generate_with_plain_backend_and_max_rounds(tmp_path: Path) -> None:
    backend = ScriptedBackend([" grows tall tomatoes\nMy friend grows tall tomatoes\n"], chat=False)
    out = tmp_path / "generated.txt"
    report = generate_statements(
        backend, n=10, batch_size=3, max_rounds=2, out=out, seed_sentence="My friend sews quilts"
    )
    assert out.read_text() == "My friend sews quilts\nMy friend grows tall tomatoes\n"
    assert report.rounds == 2 and report.duplicates == 11
    prompt = backend.calls[1][0][0]
    assert isinstance(prompt, str) and prompt.endswith(
        "My friend sews quilts\nMy friend grows tall tomatoes\nMy friend"
    )


def test_generate_rejects_bad_settings() -> None:
    backend = ScriptedBackend(["x"], chat=True)
    with pytest.raises(ConfigError, match="--seed-sentence must start with 'My friend'"):
        generate_statements(backend, n=3, seed_sentence="My friend loves his dog")
    with pytest.raises(ConfigError, match="--temperature must be above 0"):
        generate_statements(backend, n=3, temperature=0.0)


@pytest.mark.slow
def test_generate_on_the_embedded_model(embedded_backend, tmp_path: Path) -> None:
    out = tmp_path / "generated.txt"
    report = generate_statements(embedded_backend, n=5, batch_size=4, max_rounds=2, max_new_tokens=64, out=out)
    lines = out.read_text().splitlines()
    print(f"embedded model: {len(lines)} statements in {report.rounds} rounds: {lines}")
    assert lines == report.statements and lines[0] == "My friend enjoys playing chess"
    assert len(lines) >= 2
    assert all(is_valid_statement(line, WORDS) for line in lines)
    assert len({normalize(line) for line in lines}) == len(lines)


def test_cli_generate_with_a_registered_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    import fairprobe.models
    from fairprobe.cli import app

    # A copy of the scheme registry's entries, restored afterwards: the scheme exists for this test only.
    monkeypatch.setattr(fairprobe.models.SCHEMES, "_entries", dict(fairprobe.models.SCHEMES._entries))
    fairprobe.models.register_scheme("scripted")(lambda rest, **options: ScriptedBackend(CHAT_REPLIES, True))
    out = tmp_path / "gen.txt"
    args = ["probes", "generate", "--model", "scripted:x", "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "-n", "4", "--batch-size", "2"])
    assert result.exit_code == 0, result.output
    assert "kept 4 statements in 1 rounds" in result.output
    assert out.read_text().splitlines()[1:] == [
        "My friend bakes bread every Sunday",
        "My friend repairs old radios",
        "My friend paints murals downtown",
    ]
    result = CliRunner().invoke(app, [*args, "-n", "50", "--max-rounds", "1"])  # 8 requests: 5 distinct lines
    assert result.exit_code == 0 and "only 5 of 50" in result.output
