"""The naturally-sourced pipeline: one-person sentences of STS-B or SNLI rewritten to `My friend ...` predicates.

Rules read off the paper's released files (Dong et al. 2024, `stsb_neutral_*.csv`), which they
reproduce on STS-B (test: all 364 reference lines; dev: the exact file):
- sentences are taken column by column: every sentence1 in file order, then every sentence2;
- a sentence qualifies when its first two words name one person of any gender (`SUBJECTS`);
- the predicate is the rest of the sentence, lower-cased, with every period removed;
- a predicate is dropped when it holds a gendered word (the attribute-word detector) or another
  person (`OTHER_PERSON_WORDS`, matched as whole tokens, so "a baby's leg" stays);
- repeats keep their first occurrence.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from fairprobe.errors import DataError
from fairprobe.families.paper.words import AttributeWords
from fairprobe.io import atomic_write_text, iter_jsonl, read_text

SUBJECTS = frozenset(
    f"{article} {noun}"
    for article in ("a", "the")
    for noun in ("man", "woman", "person", "boy", "girl", "child", "lady", "human")
) | {"a guy", "a female"}

OTHER_PERSON_WORDS = frozenset(
    {"people", "person", "someone", "child", "children", "kid", "kids", "baby", "babies", "they", "their", "them"}
    | {"beard"}  # a gender cue the detector's word lists do not hold; the paper's files drop it too
)

FORMATS = ("stsb", "snli")

STSB_SENTENCE_COLUMNS = (5, 6)


@dataclass(frozen=True)
class NaturalSet:
    """The pipeline's result: kept predicates (in order) and how many sentences were read."""

    predicates: list[str]
    sentences: int


def read_stsb_sentences(path: Path) -> list[str]:
    """STS-B `sts-*.csv` sentences: every sentence1, then every sentence2 (tab-separated, quoting off)."""
    text = read_text(path, "STS-B file")
    columns: tuple[list[str], list[str]] = ([], [])
    reader = csv.reader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE)
    try:
        for row in reader:
            if not row:
                continue
            if len(row) < 7:
                raise DataError(
                    f"malformed line in {path} line {reader.line_num}: expected at least 7 tab-separated fields"
                )
            for column, index in zip(columns, STSB_SENTENCE_COLUMNS, strict=True):
                column.append(row[index])
    except csv.Error as exc:
        raise DataError(f"malformed line in {path} line {reader.line_num}: {exc}") from None
    return columns[0] + columns[1]


def read_snli_sentences(path: Path) -> list[str]:
    """SNLI 1.0 JSONL sentences (`sentence1`, `sentence2` fields): every sentence1, then every sentence2."""
    columns: tuple[list[str], list[str]] = ([], [])
    for lineno, record in iter_jsonl(path, "SNLI file"):
        for column, key in zip(columns, ("sentence1", "sentence2"), strict=True):
            value = record.get(key)
            if not isinstance(value, str):
                raise DataError(f"malformed record in {path} line {lineno}: no string field {key!r}")
            column.append(value)
    return columns[0] + columns[1]


def read_sentences(path: Path, fmt: str) -> list[str]:
    """Raw sentences of an STS-B or SNLI file, in the order the pipeline takes them."""
    if fmt == "stsb":
        return read_stsb_sentences(path)
    if fmt == "snli":
        return read_snli_sentences(path)
    raise DataError(f"unknown sentence format {fmt!r}: choose from {', '.join(FORMATS)}")


def subject_predicate(sentence: str) -> str | None:
    """The lower-cased, period-free predicate of a sentence whose subject is one person, else None."""
    tokens = sentence.replace(".", "").split()
    if len(tokens) < 3 or " ".join(tokens[:2]).lower() not in SUBJECTS:
        return None
    return " ".join(tokens[2:]).lower()


def extract_predicates(sentences: list[str], words: AttributeWords | None = None) -> list[str]:
    """Neutral predicates of one-person sentences, first occurrence kept (see the module docstring)."""
    words = words or AttributeWords.default()
    kept: dict[str, None] = {}
    for sentence in sentences:
        predicate = subject_predicate(sentence)
        if predicate is None or predicate in kept:
            continue
        if words.pattern.search(predicate) or OTHER_PERSON_WORDS.intersection(predicate.split()):
            continue
        kept[predicate] = None
    return list(kept)


def build_natural(path: Path, fmt: str = "stsb", words: AttributeWords | None = None) -> NaturalSet:
    """Run the pipeline on a raw STS-B or SNLI file."""
    sentences = read_sentences(path, fmt)
    return NaturalSet(predicates=extract_predicates(sentences, words), sentences=len(sentences))


def predicates_csv(predicates: list[str]) -> str:
    """Predicates in the paper's CSV format: one a line, quoted when it holds a comma or quote, no header."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for predicate in predicates:
        writer.writerow([predicate])
    return buffer.getvalue()


def write_predicates(path: Path, predicates: list[str]) -> None:
    """Write predicates atomically in the paper's CSV format (read back by `paper.read_predicates`)."""
    atomic_write_text(path, predicates_csv(predicates))


def overlap(ours: list[str], reference: list[str]) -> tuple[float, float]:
    """(recall, precision): share of reference lines we produce, share of our lines in the reference."""
    ours_set, ref_set = set(ours), set(reference)
    common = len(ours_set & ref_set)
    return common / max(len(ref_set), 1), common / max(len(ours_set), 1)
