"""Reaching the Hugging Face hub: a model id that cannot be loaded says so in seconds, with the next step.

Without a network, transformers asks the hub for each file with retries (minutes of raw `HEAD` lines) before
it gives up. Here the hub's host is asked once with a short timeout first: a cached model is then loaded from
the cache alone, and an uncached one is a one-line ModelError naming `HF_HUB_OFFLINE=1` and `hf:/local/path`.
The hub library's own retry lines are kept quiet while a model loads.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from fairprobe.errors import ModelError

# Seconds to wait for the hub's host before calling it unreachable.
REACH_TIMEOUT = 5.0
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
NEXT_STEP = "give a local folder as hf:/local/path, or download the model where there is a network (`hf download {}`)"


def hub_offline() -> bool:
    """True when the Hugging Face hub must not be contacted."""
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes")


def is_hub_id(path_or_id: str) -> bool:
    """Whether a spec's rest names a hub model rather than a folder on this machine."""
    return not Path(path_or_id).expanduser().exists()


def hub_unreachable(timeout: float = REACH_TIMEOUT) -> str | None:
    """Why the hub's host cannot be reached (a DNS or connection error), or None when it answers. Behind a proxy
    the host is not asked directly, so None."""
    from huggingface_hub import constants

    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return None
    url = urlsplit(constants.ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((url.hostname or "", port), timeout=timeout).close()
    except OSError as exc:
        return str(exc) or type(exc).__name__
    return None


def in_cache(hub_id: str, revision: str | None) -> bool:
    """Whether the model's config.json is in the local Hugging Face cache."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(hub_id, "config.json", revision=revision)
    except (ValueError, OSError):  # not a valid repository id
        return False
    return isinstance(found, str)


def hub_arguments(path_or_id: str, revision: str | None) -> dict[str, Any]:
    """from_pretrained's extra arguments for a model id, found before transformers is imported: `local_files_only`
    when the hub cannot be reached but the model is cached; a one-line ModelError with the next step when the
    model is not cached and the hub is off (HF_HUB_OFFLINE=1) or unreachable."""
    if not is_hub_id(path_or_id):
        return {}
    if path_or_id.startswith(("/", ".", "~")):
        raise ModelError(f"cannot load model {path_or_id!r}: no such folder")
    if hub_offline():
        if in_cache(path_or_id, revision):
            return {}
        raise ModelError(
            f"cannot load model {path_or_id!r}: it is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 "
            f"keeps the hub off; {NEXT_STEP.format(path_or_id)}"
        )
    reason = hub_unreachable()
    if reason is None:
        return {}
    if in_cache(path_or_id, revision):
        return {"local_files_only": True}
    raise ModelError(
        f"cannot load model {path_or_id!r}: the Hugging Face hub is unreachable ({reason}) and the model is not in "
        f"the local cache; set HF_HUB_OFFLINE=1 to use cached models only, or {NEXT_STEP.format(path_or_id)}"
    )


@contextlib.contextmanager
def quiet_hub() -> Iterator[None]:
    """Keep the hub library's warnings (its retry and HEAD lines) off the terminal while a model loads."""
    from huggingface_hub.utils import logging as hub_logging

    before = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()
    try:
        yield
    finally:
        hub_logging.set_verbosity(before)
