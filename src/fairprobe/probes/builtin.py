"""Probe sets written by this project; they need no network and carry their own names."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fairprobe.io import split_lines
from fairprobe.probes.registry import probe_set
from fairprobe.probes.sources import sha256_bytes
from fairprobe.records import Probe, ProbeSet


@probe_set(
    "friend-statements",
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
    )
