"""Keep secrets off disk and screen, and terminal controls off the screen.

Every text fairprobe stores or prints passes through `redact`; every outside text printed has its control
characters escaped (`escape_controls`; fairprobe.terminal applies it to all console output).

The secrets are the API keys in the environment ($FAIRPROBE_API_KEY, $OPENAI_API_KEY) and any key a
backend was given directly (`register_secret`). Each is replaced in its raw form, URL-encoded (both
`quote` and `quote_plus`, upper- and lower-case escapes), JSON-escaped and base64-encoded (standard and
URL-safe alphabets, at each of the three byte alignments a key can have inside a longer encoded text), and
so is any stretch of text that is the first 9 or more characters of one of those forms. `clip` (and `shorten`,
its one-line form) redacts before it cuts, and a cut that ends in the first characters of a secret drops
them, so no key survives half-redacted. Every value fairprobe cuts for a message is cut by `clip`.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import threading
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

API_KEY_ENV = ("FAIRPROBE_API_KEY", "OPENAI_API_KEY")
MASK = "***"
# A secret shorter than this is not looked for (it would mask ordinary words).
MIN_SECRET = 8
# A text that ends in this many first characters of a secret form loses them.
MIN_PARTIAL = 4
# Any stretch of text that is the first PREFIX_MIN (or more) characters of a secret form is masked too.
PREFIX_MIN = 9

# Backend options that hold a secret: their values are registered, masked in recorded settings and commands.
SECRET_OPTIONS = ("api_key",)
_SECRET_ASSIGNMENT = re.compile(r"(?i)\b(" + "|".join(SECRET_OPTIONS) + r")=\S*")

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional embeddings, overrides and isolates.
_CONTROLS = [*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
_ESCAPES = {code: (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}") for code in _CONTROLS}
_JSON_ESCAPES = {code: f"\\u{code:04x}" for code in _CONTROLS}
_HAS_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in _CONTROLS) + "]")


def escape_controls(text: str) -> str:
    """`text` with every control character (bar tab and newline) written as its escape, e.g. ESC as `\\x1b`."""
    return text.translate(_ESCAPES) if _HAS_CONTROL.search(text) else text


def escape_json_controls(text: str) -> str:
    """A JSON text with the control characters JSON leaves raw (C1, bidirectional) as `\\uXXXX` escapes.

    Outside strings a JSON text holds none of them, so the escaped text reads back as the same JSON value.
    """
    return text.translate(_JSON_ESCAPES) if _HAS_CONTROL.search(text) else text


_lock = threading.Lock()
_registered: set[str] = set()
_cache: dict[frozenset[str], tuple[list[re.Pattern[str]], list[str]]] = {}


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


def _prefix_pattern(form: str) -> str:
    """A pattern for `form` and for each of its prefixes longer than PREFIX_MIN - 1 characters (the longest wins)."""
    head, tail = form[:PREFIX_MIN], form[PREFIX_MIN:]
    nested = ""
    for char in reversed(tail):
        nested = f"(?:{re.escape(char)}{nested})?"
    return re.escape(head) + nested


def _compiled(secrets: frozenset[str]) -> tuple[list[re.Pattern[str]], list[str]]:
    with _lock:
        hit = _cache.get(secrets)
    if hit is None:
        forms = sorted({f for s in secrets for f in secret_forms(s)}, key=len, reverse=True)
        hit = ([re.compile(_prefix_pattern(f)) for f in forms], forms)
        with _lock:
            _cache[secrets] = hit
    return hit


def redact(text: str, secrets: frozenset[str] | None = None) -> str:
    """`text` with every form of every secret, and every prefix of one longer than 8 characters, replaced by ***.

    The spans of all forms are merged before masking, so where two spellings overlap (a key raw up to its
    first `/`, URL-encoded after it) the whole stretch is masked.
    """
    secrets = current_secrets() if secrets is None else secrets
    if not secrets or not text:
        return text
    patterns, _ = _compiled(secrets)
    spans = sorted(m.span() for pattern in patterns for m in pattern.finditer(text) if m.end() > m.start())
    if not spans:
        return text
    parts, at = [], 0
    for start, end in spans:
        if end <= at:
            continue
        if start >= at:
            parts.append(text[at:start] + MASK)
        at = end
    return "".join(parts) + text[at:]


def _drop_partial_tail(text: str, secrets: frozenset[str]) -> str:
    """Mask a cut text's tail when it is the start of a secret form (the rest fell past the cut)."""
    _, forms = _compiled(secrets)
    for form in forms:
        for size in range(min(len(form) - 1, len(text)), MIN_PARTIAL - 1, -1):
            if text.endswith(form[:size]):
                return text[: len(text) - size] + MASK
    return text


def clip(text: str, limit: int) -> str:
    """At most `limit` characters of `text` (then "..."), redacted before it is cut: a cut never leaves the start
    of a secret behind."""
    secrets = current_secrets()
    text = redact(text, secrets)
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return (_drop_partial_tail(cut, secrets) if secrets else cut) + "..."


def shorten(text: str, limit: int = 200) -> str:
    """Outside text (a server's body) for a message: one line of at most `limit` characters (then "..."),
    redacted before it is cut, control characters escaped."""
    return escape_controls(clip(" ".join(text.split()), limit))


def secret_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """Backend options with every secret value registered (so no output holds it) and shown as ***."""
    for key in SECRET_OPTIONS:
        if isinstance(options.get(key), str):
            register_secret(options[key])
    return {k: MASK if k in SECRET_OPTIONS and v is not None else v for k, v in options.items()}


def redacted_command(argv: list[str] | None = None) -> str:
    """The command line (`fairprobe run ...`) as a lock file or manifest records it: secrets redacted, and the
    value of every `api_key=...` masked whatever its length."""
    argv = sys.argv if argv is None else argv
    words = [Path(argv[0]).name, *argv[1:]] if argv else []
    return redact(_SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}={MASK}", " ".join(words)))
