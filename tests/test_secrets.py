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
    # The refused "nurse" prompt is a failed item: exit 3, and the same command asks it (alone) again.
    assert done.returncode == 3, done.stderr
    assert again.returncode == 3, again.stderr  # resumed from the run folder and the cache
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


SHORT_KEY = "sk-9f/Ab+Cd=Ef_01234"  # 20 characters, as in the trial that found 14 of them in samples.jsonl


def prefixes(key: str) -> list[str]:
    """Every prefix of the key longer than 8 characters (the whole key included)."""
    return [key[:n] for n in range(9, len(key) + 1)]


def cutting_answer(number: int, body: dict[str, Any], auth: str | None) -> tuple[int, bytes, dict[str, str]]:
    """A server that puts the key where fairprobe cuts values: a bad logprob's token name (cut at 40 characters for
    the error), past the 200-character cut of an error body, and its first 20 characters alone."""
    key = (auth or "").removeprefix("Bearer ")
    prompt = prompt_text(body)
    if "nurse" in prompt:
        return 400, ("z" * 195 + key).encode(), {}
    if "teacher" in prompt:
        return 200, json.dumps(completion_json(body, " she", {"x" * 26 + key: 0.5, " he": -1.0})).encode(), {}
    answer = completion_json(body, f" she said {key[:20]} and {key}", {" she": -1.2, " he": -2.3, key[:15]: -3.0})
    answer["model"] = key
    return 200, json.dumps(answer).encode(), {}


@pytest.mark.parametrize("given", ["environment", "model arg"])
def test_no_prefix_of_the_key_reaches_any_file_a_run_writes(tmp_path: Path, given: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FAIRPROBE_API_KEY", "OPENAI_API_KEY")}
    env["FAIRPROBE_CACHE_DB"] = str(tmp_path / "cache" / "calls.sqlite")
    key_args = ["-M", f"api_key={SHORT_KEY}"] if given == "model arg" else []
    if given == "environment":
        env["FAIRPROBE_API_KEY"] = SHORT_KEY
    out = tmp_path / "run"
    with serve(cutting_answer) as (url, seen):
        args = [
            "run",
            "-m",
            "openai:test",
            "--base-url",
            url,
            "--probes",
            "template",
            "--limit",
            "16",
            "--limit-order",
            "first",
            *key_args,
        ]
        done = _cli([*args, "--out", str(out)], env)
        again = _cli([*args, "--out", str(out)], env)
    assert done.returncode == 3, done.stderr  # the cut and the refused answers are failed items (exit 3)
    assert again.returncode == 3, again.stderr
    assert set(seen.auth) == {f"Bearer {SHORT_KEY}"}  # -M api_key is sent, as the environment's key is
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    errors = " ".join(s.get("error", "") for s in samples)
    assert "top_logprobs[" in errors and "HTTP 400" in errors  # the cut values were written, redacted
    manifest = json.loads((out / "manifest.json").read_text())
    if given == "model arg":
        assert manifest["options"]["model_args"]["api_key"] == "***"  # beside base_url, folded in from --base-url
        assert "api_key=***" in manifest["command"]  # the lock file holds the same redacted command, cut short
    report = _cli(["report", str(out), "--format", "csv", "--out", str(tmp_path / "csv")], env)
    assert report.returncode == 0, report.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert {".fairprobe.lock", "manifest.json", "samples.jsonl", "calls.sqlite", "report.html"} <= {
        p.name for p in files
    }
    for path in files:
        text = path.read_bytes().decode("utf-8", errors="replace")
        assert not [p for p in prefixes(SHORT_KEY) if p in text], path
    for proc in (done, again, report):
        assert not [p for p in prefixes(SHORT_KEY) if p in proc.stdout + proc.stderr]
