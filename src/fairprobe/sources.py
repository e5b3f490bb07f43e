"""Data files from public repositories: pinned commit, sha256-checked, cached; or a user's local copy."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import httpx

from fairprobe.errors import DataError
from fairprobe.io import atomic_write_bytes, cache_dir, sha256_bytes

DEFAULT_MIRROR = "https://raw.githubusercontent.com"
# Download hosts found unreachable in this process: later files from them fail at once instead of waiting again.
_UNREACHABLE: dict[str, str] = {}


class Unreachable(DataError):
    """A file that must be downloaded and cannot be: no network, no route, no name (not a wrong checksum)."""


@dataclass(frozen=True)
class RemoteFile:
    """One file of a public repository at a pinned commit, with its expected sha256."""

    repo: str
    commit: str
    path: str
    sha256: str
    license: str

    @property
    def name(self) -> str:
        """The file's base name, as a user's local data folder holds it."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def url(self) -> str:
        """Download address; $FAIRPROBE_MIRROR replaces the host (tests serve files from 127.0.0.1)."""
        base = os.environ.get("FAIRPROBE_MIRROR", DEFAULT_MIRROR).rstrip("/")
        return f"{base}/{self.repo}/{self.commit}/{self.path}"

    @property
    def citation(self) -> str:
        """Where the file comes from, for manifests and summaries."""
        return f"{self.repo}@{self.commit[:7]}/{self.path}"


# The folders of the shared data root (../shared/data) that the families read, each declared by its family.
DATA_FOLDERS: set[str] = set()


def data_folder(name: str) -> str:
    """Declare a folder of the shared data root that a family reads its files from (returns the name)."""
    DATA_FOLDERS.add(name)
    return name


def find_local(name: str, data_dir: Path) -> Path | None:
    """A file named `name` in the data root (`--data-dir` names the root, for every suite), one folder below it,
    or (the older, deeper form `--data-dir ../shared/data/debias_llms`) in a sibling of a declared data folder."""
    roots = [data_dir]
    if data_dir.name in DATA_FOLDERS:
        roots.append(data_dir.parent)
    for root in roots:
        direct = root / name
        if direct.is_file():
            return direct
        for candidate in sorted(root.glob(f"*/{name}")):
            if candidate.is_file():
                return candidate
    return None


def fetch(remote: RemoteFile, data_dir: Path | None = None, timeout: float = 30.0) -> tuple[Path, str]:
    """Return (local path, source description) for a remote file.

    With data_dir, the file must be there (no download); otherwise it is downloaded once into the
    cache and its sha256 checked against the pinned value.
    """
    if data_dir is not None:
        if not data_dir.is_dir():
            raise DataError(f"data folder not found: {data_dir}")
        local = find_local(remote.name, data_dir)
        if local is None:
            raise DataError(
                f"{remote.name} not found in data folder {data_dir} or one folder below it "
                "(--data-dir takes the shared data root, e.g. ../shared/data)"
            )
        return local, str(local)
    target = cache_dir("data", remote.repo.replace("/", "__"), remote.commit) / remote.name
    if target.is_file() and sha256_bytes(target.read_bytes()) == remote.sha256:
        return target, remote.citation
    host = httpx.URL(remote.url).netloc.decode()
    if host in _UNREACHABLE:
        raise Unreachable(
            f"cannot download {remote.name}: {host} is unreachable ({_UNREACHABLE[host]}); pass --data-dir"
        )
    try:
        response = httpx.get(remote.url, timeout=timeout, follow_redirects=True)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        why = f"{type(exc).__name__}: {exc}"
        message = f"cannot download {remote.name} from {remote.url} ({why}); pass --data-dir with a local copy"
        if isinstance(exc, httpx.TransportError):
            _UNREACHABLE[host] = why
            raise Unreachable(message) from None
        raise DataError(message) from None
    digest = sha256_bytes(response.content)
    if digest != remote.sha256:
        raise DataError(f"checksum mismatch for {remote.url}: expected sha256 {remote.sha256}, got {digest}")
    atomic_write_bytes(target, response.content)
    return target, remote.citation
