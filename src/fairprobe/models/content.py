"""A model named by its content, never by where it is installed: what the answer cache keys on.

The same weights in another virtualenv, another user's home or a team's shared disk give the same name, so
their answers are reused there; other weights (a new revision, another adapter) never are.
- a GGUF model (the embedded ones): the GGUF file's sha256;
- a Hugging Face model by id: the revision (commit) its files were loaded from;
- a model folder on disk: the sha256 of its files (remembered per file size and modification time);
- an API model: its name and the settings that change answers, never the endpoint or the key.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from fairprobe.io import atomic_write_json, cache_dir, sha256_bytes, sha256_file

# Identity fields that name the weights or the served model by content; the others are dropped from the key.
CONTENT_FIELDS = (
    "backend",
    "gguf_sha256",
    "revision",
    "weights_sha256",
    "model",
    "implicit",
    "top_logprobs",
    "dtype",
    "attention",
)


def folder_digest(folder: Path) -> str:
    """sha256 over a model folder's files (names and contents); each file's hash is remembered in the cache
    folder while its size and modification time stay the same, so a large model is read once."""
    memo_path = cache_dir("digests") / f"{sha256_bytes(str(folder.resolve()).encode())[:32]}.json"
    try:
        memo: dict[str, list[Any]] = json.loads(memo_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        memo = {}
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    fresh: dict[str, list[Any]] = {}
    for path in files:
        name, stat = path.relative_to(folder).as_posix(), path.stat()
        known = memo.get(name)
        same = isinstance(known, list) and len(known) == 3 and known[:2] == [stat.st_size, stat.st_mtime_ns]
        fresh[name] = known if same else [stat.st_size, stat.st_mtime_ns, sha256_file(path)]  # type: ignore[assignment]
    if fresh != memo:
        with contextlib.suppress(OSError):  # a memo that cannot be written only costs reading the files again
            atomic_write_json(memo_path, fresh)
    return sha256_bytes(json.dumps({name: entry[2] for name, entry in fresh.items()}, sort_keys=True).encode())


def hub_revision(repo_id: str, revision: str | None = None) -> str | None:
    """The commit a hub model's files were loaded from (its snapshot folder in the Hugging Face cache)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except ValueError:  # not a valid repository id
        return None
    return Path(found).parent.name if isinstance(found, str) else None


def hf_content(path_or_id: str, revision: str | None = None) -> dict[str, str]:
    """The content fields of an `hf:` model: a folder's digest, else the hub revision it was loaded from."""
    folder = Path(path_or_id).expanduser()
    if folder.is_dir():
        return {"weights_sha256": folder_digest(folder)}
    commit = hub_revision(path_or_id, revision)
    return {"revision": commit} if commit else {}


def model_content(identity: dict[str, Any]) -> dict[str, Any]:
    """The part of a backend's identity that decides its answers: content, never a path or an endpoint.

    The device counts by kind only (cpu, cuda: their arithmetic differs, not one GPU from another); an adapter by
    its weights' and config's sha256. An identity with no content field (a test double) keeps its id.
    """
    content = {k: identity[k] for k in CONTENT_FIELDS if identity.get(k) is not None}
    if not any(k in content for k in ("gguf_sha256", "revision", "weights_sha256", "model")):
        content["id"] = identity.get("id")
    if identity.get("device"):
        content["device"] = str(identity["device"]).split(":", 1)[0]
    adapter = identity.get("adapter")
    if isinstance(adapter, dict):
        content["adapter"] = [adapter.get("sha256"), adapter.get("config_sha256")]
    return content
