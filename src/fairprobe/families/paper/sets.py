"""The paper family's sets: the paper's five (Dong et al. 2024), fairprobe's own statements, `file:PATH` sets."""

from __future__ import annotations

import csv
import io
import json
from importlib import resources
from pathlib import Path

from fairprobe.errors import DataError
from fairprobe.families.base import probe_set
from fairprobe.io import read_text, sha256_bytes, split_lines
from fairprobe.records import Probe, ProbeSet
from fairprobe.sources import RemoteFile, data_folder, fetch

DEBIAS_LLMS_REPO = "dongxiangjue/Debias-LLMs"
DEBIAS_LLMS_COMMIT = "ea017a3939d75c7c1599c869a6e682015524c8ef"

_SHA256 = {
    "stsb_neutral_test.csv": "87b06b50a9a550a07f0ec867d903270425c811352ec149931f2a59c830b8011b",
    "snli_neutral_test.csv": "83ed5a773f9d07a81a9fda4eadbb8042d1c6c9851469f1a0f70026f9a849cb01",
    "stsb_neutral_train.csv": "9451173e87f33a521e3ccb7efd78ddd5cac4252ac5ad935872cf9fd029f91e38",
    "stsb_neutral_validation.csv": "5318369370c675e285e1c9d930d625e8ad94b94e7484fd8ee9a20bb0486ffc49",
    "snli_neutral_train.csv": "1eeffaad81978cb0cbf278aa8e44e54f70a797a6c7829e0c2c7fac0f1ef74d52",
    "snli_neutral_validation.csv": "30ed881a397350a7bdcd0e6026a1c9ca8e3957f74e473184d093bda7917a8aa3",
    "total_neutral_train.csv": "e6f3e2b148b34f6b2315e650fa05ac06a6f0c9c22f4538cd900893a2889a4f69",
    "total_neutral_validation.csv": "250d752d6fc86f6b5d456367a6026552c4764f6809e764e8f667e37e03d8f470",
    "templates_200.txt": "2aa4ff9005945a158c15f27ebab013e80070801fd6f85abec9a286c57ec07aa8",
    "templates_200_1.txt": "d57195d4e680205adf507ff8f79750fdf4912a31bbc77305af77af40b95d9a62",
}

# The shared data root's folders this family reads.
data_folder("debias_llms")
data_folder("stsb")


def debias_llms_file(name: str) -> RemoteFile:
    """A data file of the paper's repository at the pinned commit."""
    if name not in _SHA256:
        raise DataError(f"unknown Debias-LLMs data file {name!r}")
    return RemoteFile(DEBIAS_LLMS_REPO, DEBIAS_LLMS_COMMIT, f"data/{name}", _SHA256[name], "Apache-2.0")


# A first line holding one of these is a column header, not a predicate.
HEADER_NAMES = frozenset({"predicate", "predicates", "sentence", "sentences", "statement", "text", "prompt", "line"})


def read_predicates(path: Path) -> list[str]:
    """The lines of a paper CSV (one quoted-when-needed predicate a line, no header), blanks dropped."""
    text = read_text(path, "probe file")
    out: list[str] = []
    reader = csv.reader(io.StringIO(text), strict=True)
    try:
        for row in reader:
            if len(row) > 1:
                raise DataError(f"malformed line in {path} line {reader.line_num}: expected one field, got {len(row)}")
            if row and row[0].strip():
                if not out and row[0].strip().lower() in HEADER_NAMES:
                    raise DataError(
                        f"{path} line {reader.line_num} is a column header ({row[0].strip()!r}): "
                        "the paper's CSV format has none, so remove that line"
                    )
                out.append(row[0].strip())
    except csv.Error as exc:
        raise DataError(f"malformed line in {path} line {reader.line_num}: {exc}") from None
    return out


def load_statement_file(
    path: Path, name: str, template: str | None = None, source: str | None = None, description: str = ""
) -> ProbeSet:
    """A probe set from a statement file: a paper-format CSV of predicates or a text file of statements.

    The default template follows the file type, as in the paper: `My friend {line}, and` for a .csv of
    predicates (the naturally-sourced format), `{line}, and` for a text file of whole statements.
    """
    if path.suffix == ".csv":
        lines = read_predicates(path)
        template = template or "My friend {line}, and"
    else:
        lines = [line.strip() for line in split_lines(read_text(path, "probe file")) if line.strip()]
        template = template or "{line}, and"
    probes = [Probe(id=str(i), prompt=template.format(line=line), meta={"text": line}) for i, line in enumerate(lines)]
    return ProbeSet(
        name=name,
        description=description,
        source=source or str(path),
        sha256=sha256_bytes(path.read_bytes()),
        probes=probes,
    )


def _statement_set(name: str, file: str, template: str, data_dir: Path | None, description: str) -> ProbeSet:
    path, source = fetch(debias_llms_file(file), data_dir)
    return load_statement_file(path, name, template, source, description)


TEMPLATE_FORMS = {
    "occupations": "My friend is a {word}, and",
    "personalities": "My friend is {word}, and",
    "hobbies": "My friend likes {word}, and",
    "colors": "My friend likes {word} color, and",
}


def template_words() -> dict[str, dict[str, list[str]]]:
    """The paper's Table 6 lists: topic -> stereotyped gender -> 20 words."""
    text = resources.files("fairprobe.data").joinpath("template_words.json").read_text(encoding="utf-8")
    return json.loads(text)["topics"]


@probe_set(
    "template",
    family="paper",
    suite="paper",
    description="160 template prompts (paper Table 6: 4 topics x 40 words)",
    offline=True,
)
def load_template(data_dir: Path | None = None) -> ProbeSet:
    """The template-based set, built from package word lists exactly as the authors' scripts do."""
    probes: list[Probe] = []
    for topic, form in TEMPLATE_FORMS.items():
        for gender in ("female", "male"):
            for word in template_words()[topic][gender]:
                probes.append(
                    Probe(
                        id=str(len(probes)),
                        prompt=form.format(word=word),
                        subsets=[topic, f"{gender}-stereotyped"],
                        meta={"topic": topic, "attribute": word, "stereotyped_gender": gender},
                    )
                )
    digest = sha256_bytes("\n".join(p.prompt for p in probes).encode())
    return ProbeSet(
        name="template",
        description="paper Table 6 templates",
        source="fairprobe package data (Dong et al. 2024, Table 6)",
        sha256=digest,
        probes=probes,
        strata="topic x stereotyped gender",
    )


@probe_set("llm-gen-1", family="paper", suite="paper", description="200 LLM-generated statements (templates_200.txt)")
def load_llm_gen_1(data_dir: Path | None = None) -> ProbeSet:
    """LLM-generated set (1): `{statement}, and`."""
    return _statement_set("llm-gen-1", "templates_200.txt", "{line}, and", data_dir, "LLM-generated statements (1)")


@probe_set("llm-gen-2", family="paper", suite="paper", description="200 LLM-generated statements (templates_200_1.txt)")
def load_llm_gen_2(data_dir: Path | None = None) -> ProbeSet:
    """LLM-generated set (2): `{statement}, and`."""
    return _statement_set("llm-gen-2", "templates_200_1.txt", "{line}, and", data_dir, "LLM-generated statements (2)")


@probe_set(
    "stsb", family="paper", suite="paper", description="364 naturally-sourced STS-B predicates (stsb_neutral_test.csv)"
)
def load_stsb(data_dir: Path | None = None) -> ProbeSet:
    """Naturally-sourced STS-B test set: `My friend {predicate}, and`."""
    return _statement_set("stsb", "stsb_neutral_test.csv", "My friend {line}, and", data_dir, "STS-B neutral test")


@probe_set(
    "snli", family="paper", suite="paper", description="317 naturally-sourced SNLI predicates (snli_neutral_test.csv)"
)
def load_snli(data_dir: Path | None = None) -> ProbeSet:
    """Naturally-sourced SNLI test set: `My friend {predicate}, and`."""
    return _statement_set("snli", "snli_neutral_test.csv", "My friend {line}, and", data_dir, "SNLI neutral test")


@probe_set(
    "friend-statements",
    family="paper",
    suite="paper",
    description="fairprobe's own neutral 'My friend ...' statements, grouped by activity domain",
    offline=True,
    rank=1,
)
def load_friend_statements(data_dir: Path | None = None) -> ProbeSet:
    """fairprobe's built-in neutral statements (data/friend_statements.tsv: domain TAB statement)."""
    raw = resources.files("fairprobe.data").joinpath("friend_statements.tsv").read_bytes()
    probes = []
    for line in split_lines(raw.decode("utf-8-sig")):
        if not line.strip() or line.startswith("#"):
            continue
        domain, statement = line.split("\t", 1)
        probes.append(
            Probe(id=str(len(probes)), prompt=f"{statement.strip()}, and", subsets=[domain], meta={"text": statement})
        )
    return ProbeSet(
        name="friend-statements",
        description="fairprobe built-in neutral statements",
        source="fairprobe package data (friend_statements.tsv)",
        sha256=sha256_bytes(raw),
        probes=probes,
        strata="activity domain",
    )
