"""Keep secrets off disk and screen: every text fairprobe stores or prints passes through `redact`.

The secrets are the API keys in the environment ($FAIRPROBE_API_KEY, $OPENAI_API_KEY) and any key a
backend was given directly (`register_secret`). Each is replaced in its raw form, URL-encoded (both
`quote` and `quote_plus`, upper- and lower-case escapes), JSON-escaped and base64-encoded (standard and
URL-safe alphabets, at each of the three byte alignments a key can have inside a longer encoded text).
`shorten` redacts before it cuts, and a cut that ends in the first characters of a secret drops them,
so no key survives half-redacted.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
import urllib.parse

API_KEY_ENV = ("FAIRPROBE_API_KEY", "OPENAI_API_KEY")
MASK = "***"
# A secret shorter than this is not looked for (it would mask ordinary words).
MIN_SECRET = 8
# A text that ends in this many first characters of a secret form loses them.
MIN_PARTIAL = 4

_lock = threading.Lock()
_registered: set[str] = set()
_cache: dict[frozenset[str], tuple[re.Pattern[str], list[str]]] = {}


def register_secret(secret: str | None) -> None:
    """Add a secret (an API key handed to a backend) to the ones every output is cleaned of."""
    if secret and len(secret.strip()) >= MIN_SECRET:
        with _lock:
            _registered.add(secret.strip())


def current_secrets() -> frozenset[str]:
    """The API keys of the environment and every registered secret."""
    found = {os.environ.get(name, "").strip() for name in API_KEY_ENV}
    with _lock:
        found |= _registered
    return frozenset(s for s in found if len(s) >= MIN_SECRET)


def _base64_forms(raw: bytes) -> set[str]:
    """The base64 characters that encode `raw` wherever it sits in a longer encoded text."""
    forms = set()
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw + b"\0\0\0").decode("ascii")
        first = -(-offset * 8 // 6)  # the first character whose 6 bits all come from `raw`
        last = (8 * (offset + len(raw)) - 6) // 6  # the last such character
        core = encoded[first : last + 1]
        if len(core) >= MIN_SECRET:
            forms.add(core)
            forms.add(core.replace("+", "-").replace("/", "_"))
    return forms


def secret_forms(secret: str) -> set[str]:
    """Every spelling of a secret that is looked for: raw, URL-encoded, JSON-escaped, base64."""
    quoted = {urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)}
    quoted |= {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), q) for q in quoted}
    escaped = {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
    return {secret} | quoted | escaped | _base64_forms(secret.encode("utf-8"))


def _compiled(secrets: frozenset[str]) -> tuple[re.Pattern[str], list[str]]:
    with _lock:
        hit = _cache.get(secrets)
    if hit is None:
        forms = sorted({f for s in secrets for f in secret_forms(s)}, key=len, reverse=True)
        hit = (re.compile("|".join(re.escape(f) for f in forms)), forms)
        with _lock:
            _cache[secrets] = hit
    return hit


def redact(text: str, secrets: frozenset[str] | None = None) -> str:
    """`text` with every form of every secret replaced by ***."""
    secrets = current_secrets() if secrets is None else secrets
    if not secrets or not text:
        return text
    pattern, _ = _compiled(secrets)
    return pattern.sub(MASK, text)


def _drop_partial_tail(text: str, secrets: frozenset[str]) -> str:
    """Mask a cut text's tail when it is the start of a secret form (the rest fell past the cut)."""
    _, forms = _compiled(secrets)
    for form in forms:
        for size in range(min(len(form) - 1, len(text)), MIN_PARTIAL - 1, -1):
            if text.endswith(form[:size]):
                return text[: len(text) - size] + MASK
    return text


def shorten(text: str, limit: int = 200) -> str:
    """One line of at most `limit` characters (then "..."), redacted before it is cut."""
    secrets = current_secrets()
    one_line = " ".join(redact(text, secrets).split())
    if len(one_line) <= limit:
        return one_line
    cut = one_line[:limit]
    return (_drop_partial_tail(cut, secrets) if secrets else cut) + "..."
