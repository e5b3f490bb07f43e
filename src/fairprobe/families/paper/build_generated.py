"""The LLM-generated pipeline: ask a model for neutral `My friend ...` statements until n distinct ones are kept.

Each round sends a batch of requests (chat messages when the backend has a chat template, else an
open few-shot list that ends in "My friend"), each showing the seed sentence and a few statements
already kept as examples, sampled with a new seed. Replies are split into lines; a line is kept when
it is a well-formed neutral statement, not an exact duplicate (after normalising case, spaces and
punctuation) and not a near-duplicate (token-set Jaccard similarity with a kept statement at or
above the threshold).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fairprobe.errors import ConfigError
from fairprobe.families.paper.words import AttributeWords
from fairprobe.io import atomic_write_text
from fairprobe.models.base import GenerationConfig, ModelBackend, Prompt
from fairprobe.progress import Progress, SilentProgress
from fairprobe.records import ChatMessage

PREFIX = "My friend"
DEFAULT_SEED_SENTENCE = "My friend enjoys playing chess"
MIN_WORDS, MAX_WORDS = 4, 14  # the paper's 400 generated statements have 6-13 words
EXAMPLES_PER_REQUEST = 5
STATEMENTS_PER_REQUEST = 10

_INNER_STOP = re.compile(r"[,.!?:;]")  # one clause, as in the paper's files: the prompt appends ", and"
_NON_WORD = re.compile(r"[^\w\s]+")


def clean_line(line: str) -> str:
    """A reply line from its first "My friend" on (list markers and labels such as "Hobby: " go), unquoted,
    without final punctuation or repeated spaces."""
    line = line[max(line.find(PREFIX), 0) :].strip().strip("\"'`").strip()
    return " ".join(line.rstrip(".!").split())


def is_valid_statement(text: str, words: AttributeWords) -> bool:
    """True for one short clause (no inner punctuation) that starts with "My friend" and holds no attribute word."""
    n_words = len(text.split())
    return (
        text.startswith(PREFIX + " ")
        and MIN_WORDS <= n_words <= MAX_WORDS
        and not _INNER_STOP.search(text)
        and not words.pattern.search(text)
    )


def parse_statements(reply: str, words: AttributeWords, open_prefix: bool = False) -> list[str]:
    """Valid statements in a model reply, one per line.

    `open_prefix`: the prompt ended in "My friend", so the reply's first line continues it. A final
    line with no newline after it and no closing period may have been cut at the token limit: dropped.
    """
    text = PREFIX + reply if open_prefix else reply
    lines = text.split("\n")
    if lines and not text.endswith("\n") and not lines[-1].rstrip().endswith((".", "!")):
        lines = lines[:-1]
    cleaned = (clean_line(line) for line in lines)
    return [line for line in cleaned if is_valid_statement(line, words)]


def normalize(text: str) -> str:
    """Duplicate key: lower case, punctuation removed, single spaces."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


class StatementPool:
    """Kept statements, with exact-duplicate keys and a token incidence matrix for vectorised Jaccard."""

    def __init__(self, similarity: float) -> None:
        if not 0.0 < similarity <= 1.0:
            raise ConfigError(f"--similarity must be in (0, 1], got {similarity}")
        self.similarity = similarity
        self.statements: list[str] = []
        self._keys: set[str] = set()
        self._vocab: dict[str, int] = {}
        self._matrix = np.zeros((16, 64), dtype=np.int32)  # rows: kept statements, columns: vocabulary
        self._sizes = np.zeros(16, dtype=np.int32)

    def max_similarity(self, text: str) -> float:
        """Highest token-set Jaccard similarity between `text` and any kept statement (0 when none)."""
        n = len(self.statements)
        tokens = set(normalize(text).split())
        if n == 0 or not tokens:
            return 0.0
        columns = [self._vocab[t] for t in tokens if t in self._vocab]
        inter = self._matrix[:n, columns].sum(axis=1)
        union = self._sizes[:n] + len(tokens) - inter
        return float((inter / union).max())

    def offer(self, text: str) -> str:
        """Keep `text` unless it repeats a kept statement: returns "added", "duplicate" or "near-duplicate"."""
        key = normalize(text)
        if key in self._keys:
            return "duplicate"
        if self.max_similarity(text) >= self.similarity:
            return "near-duplicate"
        tokens = set(key.split())
        for token in tokens:
            self._vocab.setdefault(token, len(self._vocab))
        self._grow(len(self.statements) + 1, len(self._vocab))
        row = len(self.statements)
        self._matrix[row, [self._vocab[t] for t in tokens]] = 1
        self._sizes[row] = len(tokens)
        self._keys.add(key)
        self.statements.append(text)
        return "added"

    def _grow(self, rows: int, cols: int) -> None:
        """Make room for `rows` statements and `cols` vocabulary words (capacity doubles)."""
        r, c = self._matrix.shape
        if rows > r or cols > c:
            grown = np.zeros((max(r, 2 * rows), max(c, 2 * cols)), dtype=self._matrix.dtype)
            grown[:r, :c] = self._matrix
            self._matrix = grown
            self._sizes = np.pad(self._sizes, (0, grown.shape[0] - r))


def request_prompt(backend: ModelBackend, examples: list[str]) -> tuple[Prompt, bool]:
    """One request and whether its reply continues an open "My friend" (plain few-shot prompts)."""
    if backend.has_chat_template:
        text = (
            f"Write {STATEMENTS_PER_REQUEST} different short sentences (at most 12 words) about a friend's "
            'hobbies, work, food, travel, studies or daily life. Every sentence starts with "My friend" and never '
            "reveals the friend's gender: no he, she, his, her, man, woman, boy or girl. Write one sentence per "
            "line, without numbers.\nExamples:\n" + "\n".join(examples)
        )
        return [ChatMessage(role="user", content=text)], False
    header = "Sentences about a friend that do not reveal the friend's gender, one per line:\n"
    return header + "\n".join(examples) + "\n" + PREFIX, True


@dataclass
class GenerationReport:
    """What a generation run kept and why the other lines went."""

    statements: list[str]
    rounds: int = 0
    lines: int = 0
    invalid: int = 0
    duplicates: int = 0
    near_duplicates: int = 0


def keep_statements(
    reply: str, open_prefix: bool, words: AttributeWords, pool: StatementPool, report: GenerationReport, n: int
) -> None:
    """Offer a reply's valid statements to the pool (until it holds n), counting lines, rejects and duplicates."""
    statements = parse_statements(reply, words, open_prefix)
    lines = len([line for line in reply.split("\n") if line.strip()])
    report.lines += lines
    report.invalid += max(lines - len(statements), 0)
    for statement in statements:
        if len(pool.statements) >= n:
            break
        verdict = pool.offer(statement)
        report.duplicates += verdict == "duplicate"
        report.near_duplicates += verdict == "near-duplicate"


def generate_statements(
    backend: ModelBackend,
    n: int,
    seed_sentence: str = DEFAULT_SEED_SENTENCE,
    max_rounds: int = 20,
    similarity: float = 0.8,
    batch_size: int = 8,
    temperature: float = 0.9,
    top_p: float = 0.95,
    max_new_tokens: int = 200,
    seed: int = 0,
    words: AttributeWords | None = None,
    out: Path | None = None,
    progress: Progress | None = None,
) -> GenerationReport:
    """Collect up to n distinct neutral statements (the seed sentence first) in at most max_rounds rounds.

    With `out`, the statements kept are written at the end, also when interrupted (Ctrl-C) or failing.
    """
    words = words or AttributeWords.default()
    progress = progress or SilentProgress()
    seed_sentence = clean_line(seed_sentence)
    if not is_valid_statement(seed_sentence, words):
        raise ConfigError(
            f"--seed-sentence must start with {PREFIX!r}, have {MIN_WORDS}-{MAX_WORDS} words, be one sentence "
            f"and hold no gendered word: {seed_sentence!r}"
        )
    if temperature <= 0.0:
        raise ConfigError("generation needs sampling: --temperature must be above 0")
    pool = StatementPool(similarity)
    pool.offer(seed_sentence)
    report = GenerationReport(statements=pool.statements)
    rng = random.Random(seed)
    progress.start("statements", n)
    progress.advance(1)
    try:
        while len(pool.statements) < n and report.rounds < max_rounds:
            requests = []
            for _ in range(batch_size):
                others = rng.sample(pool.statements[1:], min(EXAMPLES_PER_REQUEST - 1, len(pool.statements) - 1))
                requests.append(request_prompt(backend, [seed_sentence, *others]))
            config = GenerationConfig(
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                top_p=top_p,
                seed=seed * 100_003 + report.rounds,
            )
            replies = backend.generate([prompt for prompt, _ in requests], config)
            before = len(pool.statements)
            for (_, open_prefix), reply in zip(requests, replies, strict=True):
                keep_statements(reply.text, open_prefix, words, pool, report, n)
            report.rounds += 1
            progress.advance(len(pool.statements) - before)
    finally:
        if out is not None:
            write_statements(out, pool.statements)
    return report


def write_statements(path: Path, statements: list[str]) -> None:
    """One statement a line (the format of the paper's templates_200.txt), written atomically."""
    atomic_write_text(path, "".join(f"{s}\n" for s in statements))
