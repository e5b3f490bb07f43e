"""The API key never reaches disk or screen: a server echoes it everywhere it can, in every spelling."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from fairprobe.models import GenerationConfig
from fairprobe.models.api import EndpointError, RetryPolicy, open_endpoint
from fairprobe.redact import redact, secret_forms, shorten
from openai_servers import completion_json, prompt_text, serve

KEY = "sk-proj/Ab+Cd=Ef_0123456789-echo"
FORMS = {
    "raw": KEY,
    "url-encoded": urllib.parse.quote(KEY, safe=""),
    "url-encoded (plus)": urllib.parse.quote_plus(KEY),
    "url-encoded (lower)": urllib.parse.quote(KEY, safe="").replace("%2F", "%2f"),
    "base64": base64.b64encode(KEY.encode()).decode(),
    "base64 of the header": base64.b64encode(f"Bearer {KEY}".encode()).decode(),
    "url-safe base64": base64.urlsafe_b64encode(f"x{KEY}".encode()).decode(),
}


def leaks(text: str) -> list[str]:
    """Names of the key's spellings found in text (base64 forms by their key-only core)."""
    found = [name for name, form in FORMS.items() if form in text and "base64" not in name]
    found += [f"{name} core" for name, form in FORMS.items() if "base64" in name and form[4:-4] in text]
    return found


def echoing_answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
    """A server that puts the key (from the Authorization header) in every field of its answers."""
    key = (auth or "").removeprefix("Bearer ")
    spellings = " ".join([key, urllib.parse.quote(key, safe=""), base64.b64encode(key.encode()).decode()])
    prompt = prompt_text(body)
    if "nurse" in prompt:  # a refusal whose body puts the key across the 200-character cut
        detail = "x" * 190 + key + " " + urllib.parse.quote(key, safe="")
        return 400, json.dumps({"error": {"message": detail}}).encode(), {}
    top = {" she": -1.2, " he": -2.3, key: -3.0, " " + key[:20]: -4.0}
    answer = completion_json(body, f" she said {spellings} and left.", top)
    answer["model"] = key
    answer["id"] = base64.b64encode(f"Bearer {key}".encode()).decode()
    return 200, json.dumps(answer).encode(), {"X-Echo": key}


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fairprobe.cli", *args], capture_output=True, text=True, env=env, timeout=180
    )


def test_an_echoing_server_leaves_no_key_in_files_or_output(tmp_path: Path) -> None:
    env = {**os.environ, "FAIRPROBE_API_KEY": KEY, "FAIRPROBE_CACHE_DB": str(tmp_path / "cache" / "calls.sqlite")}
    out = tmp_path / "run"
    with serve(echoing_answer) as (url, seen):
        args = ["run", "--model", "openai:test", "--base-url", url, "--probes", "template", "--limit", "12"]
        done = _cli([*args, "--out", str(out)], env)
        again = _cli([*args, "--out", str(out)], env)
    assert done.returncode == 0, done.stderr
    assert again.returncode == 0, again.stderr  # resumed from the run folder and the cache
    assert set(seen.auth) == {f"Bearer {KEY}"}
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().split("\n") if line]
    assert len(samples) == 12
    assert any("***" in s["continuation"] for s in samples)
    refused = [s for s in samples if s.get("error")]
    assert refused and all("rejected by server (HTTP 400)" in s["error"] for s in refused)
    report = _cli(["report", str(out), "--format", "md"], env)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {"samples.jsonl", "summary.json", "manifest.json", "report.html", "calls.sqlite"} <= {p.name for p in files}
    for path in files:
        assert not leaks(path.read_bytes().decode("utf-8", errors="replace")), path
    for proc in (done, again, report):
        assert not leaks(proc.stdout + proc.stderr)


@pytest.mark.parametrize("status", [400, 401, 500])
def test_error_messages_carry_no_key(monkeypatch: pytest.MonkeyPatch, status: int) -> None:
    def answer(number: int, body: dict[str, Any], auth: str | None):
        key = (auth or "").removeprefix("Bearer ")
        # The key straddles the 200-character cut of error details, then comes base64- and URL-encoded.
        text = "y" * 170 + key + " " + base64.b64encode(key.encode()).decode() + " " + urllib.parse.quote_plus(key)
        return status, json.dumps({"error": {"message": text}}).encode(), {}

    monkeypatch.setenv("FAIRPROBE_API_KEY", KEY)
    retry = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)
    with serve(answer) as (url, _):
        backend = open_endpoint("test", base_url=url, retry=retry, timeout=5.0)
        try:
            message = backend.generate(["My friend is a nurse, and"], GenerationConfig())[0].error or ""
        except EndpointError as exc:
            message = str(exc)
        finally:
            backend.close()
    assert message and not leaks(message), message
    if status == 400:
        assert message.startswith("rejected by server (HTTP 400): ") and message.endswith("***...")


def test_redaction_covers_every_spelling_and_the_cut() -> None:
    secrets = frozenset([KEY])
    for pre in ("", "a", "ab", "abc"):
        for name, text in {
            "base64": base64.b64encode(f"{pre}{KEY}!".encode()).decode(),
            "url-safe": base64.urlsafe_b64encode(f"{pre}{KEY}".encode()).decode(),
        }.items():
            assert not leaks(redact(text, secrets)), (name, pre)
    assert redact(json.dumps({"k": KEY}), secrets) == '{"k": "***"}'
    assert all(redact(form, secrets) == "***" for form in secret_forms(KEY))


def test_shorten_redacts_before_the_cut_and_drops_a_partial_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIRPROBE_API_KEY", KEY)
    for at in range(180, 201):
        text = "z" * at + KEY + " tail"
        short = shorten(text, 200)
        assert KEY[:6] not in short, at
        assert len(short) <= 203
    assert shorten("no secret here") == "no secret here"
