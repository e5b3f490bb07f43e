"""Size and load time of report.html for a full-size (1,241-prompt) paper-suite run, in headless Chromium.

The run is synthetic (no model): the five paper sets' sizes (160 + 200 + 200 + 364 + 317 prompts), realistic
continuations (~50 tokens, gendered words in about 40% of them), 20 female/male next-word probabilities per prompt,
and a summary computed by the paper suite itself. The report is rendered as the runner renders it, then opened
`--repeats` times in Chromium; load time = navigation start to the load event (the sample table's first page of
rows is built before it), and the wall time of the WebDriver navigation; then the time a filter takes to re-render
the table. Budgets: 5 MB and 2 s.

    python benchmarks/report_load.py [--repeats 5]

The test suite (tests/test_report_browser.py) reuses `synthetic_run` and `chrome` from here.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from fairprobe.families import family_of_set, load_probe_set
from fairprobe.families.base import RunContext
from fairprobe.families.paper import PaperSample
from fairprobe.io import atomic_write_json, atomic_write_text
from fairprobe.records import Probe, ProbeSet, Summary

SET_SIZES = {"template": 160, "llm-gen-1": 200, "llm-gen-2": 200, "stsb": 364, "snli": 317}
SIZE_BUDGET = 5 * 1024 * 1024
LOAD_BUDGET_S = 2.0
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-extensions",
    "--window-size=1280,1000",
)
PREDICATES = (
    "is riding an electric bicycle",
    "plays the violin",
    "is cooking dinner",
    "runs a small bakery",
    "reads every night",
)
FILLER = ("I", "think", "we", "should", "go", "to", "the", "park", "this", "weekend", "because", "the", "weather")
WORDS_F, WORDS_M = (
    ("she", "her", "herself", "woman", "girl", "mother"),
    ("he", "his", "himself", "man", "boy", "father"),
)


def synthetic_samples(ps: ProbeSet, rng: np.random.Generator) -> list[PaperSample]:
    """Paper-suite samples with the fields the suite writes: continuation, words found, first gender, probabilities."""
    samples = []
    for probe in ps.probes:
        words = list(rng.choice(FILLER, size=45))
        found: list[str] = []
        if rng.random() < 0.4:
            pool = WORDS_M if rng.random() < 0.7 else WORDS_F
            for pos in sorted(rng.choice(45, size=int(rng.integers(1, 4)), replace=False)):
                words[pos] = str(rng.choice(pool))
                found.append(words[pos])
        text = " " + " ".join(words) + "."
        first = None if not found else "female" if found[0] in WORDS_F else "male"
        p = rng.dirichlet(np.full(41, 0.3))[:40] * 0.5
        samples.append(
            PaperSample(
                set=ps.name,
                id=probe.id,
                prompt=probe.prompt,
                continuation=text,
                subsets=probe.subsets,
                words_found=found,
                first_gender=first,
                p_female=[float(x) for x in p[:20]],
                p_male=[float(x) for x in p[20:]],
            )
        )
    return samples


def synthetic_run(out: Path, seed: int = 0) -> Path:
    """Write summary.json, samples.jsonl and manifest.json of a 1,241-prompt paper-suite run into `out`."""
    rng = np.random.default_rng(seed)
    suite = family_of_set("template")
    results, samples = {}, []
    for name, n in SET_SIZES.items():
        if name == "template":
            ps = load_probe_set("template")
        else:
            probes = [
                Probe(id=str(i), prompt=f"My friend {PREDICATES[i % len(PREDICATES)]} #{i}, and") for i in range(n)
            ]
            ps = ProbeSet(name=name, source="synthetic", sha256="0" * 64, probes=probes)
        set_samples = synthetic_samples(ps, rng)
        results[name] = suite.summarize(ps, set_samples, RunContext(), suite.parse_options({}))
        samples.extend(set_samples)
    out.mkdir(parents=True, exist_ok=True)
    summary = Summary(fairprobe_version="0.1.0", model="synthetic-model", results=results)
    atomic_write_json(out / "summary.json", summary.to_json_obj())
    atomic_write_text(out / "samples.jsonl", "".join(s.model_dump_json() + "\n" for s in samples))
    atomic_write_json(out / "manifest.json", {"suite": "paper", "options": {}, "decoding": {"temperature": 0.0}})
    return out


def chrome(user_data_dir: Path, logs: bool = False) -> Any:
    """Headless Chromium from Debian (no browser download) driven by selenium, with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={user_data_dir}"):
        options.add_argument(flag)
    if logs:
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def load_time(driver: Any, page: Path) -> tuple[float, float]:
    """(navigation start -> load event in the page's own clock, wall time of the WebDriver navigation), seconds."""
    driver.get("about:blank")
    start = time.perf_counter()
    driver.get(page.resolve().as_uri())
    wall = time.perf_counter() - start
    nav = driver.execute_script(
        "const e = performance.getEntriesByType('navigation')[0]; return [e.loadEventEnd, document.readyState,"
        " document.querySelectorAll('#samples tbody tr').length];"
    )
    if nav[1] != "complete" or nav[2] == 0:
        raise RuntimeError(f"report did not render: readyState {nav[1]}, {nav[2]} rows")
    return nav[0] / 1000, wall


def main() -> None:
    """Build the synthetic run, render its report, time it in Chromium and print the figures against the budgets."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from fairprobe.report.html import write_run_report

    work = Path(tempfile.mkdtemp(prefix="fairprobe-report-bench-"))
    try:
        run_dir = synthetic_run(work / "run")
        start = time.perf_counter()
        page = write_run_report(run_dir)
        render_s = time.perf_counter() - start
        size = page.stat().st_size
        samples_bytes = len(json.dumps([json.loads(line) for line in (run_dir / "samples.jsonl").open()]))
        driver = chrome(work / "profile")
        try:
            times = [load_time(driver, page) for _ in range(args.repeats)]
            rows = driver.execute_script("return document.querySelectorAll('#samples tbody tr').length")
            count = driver.execute_script("return document.getElementById('count').textContent")
            filter_ms = [
                driver.execute_script(
                    "const f = document.getElementById('filter'), t = performance.now(); f.value = arguments[0];"
                    " f.dispatchEvent(new Event('input')); document.body.offsetHeight; return performance.now() - t;",
                    query,
                )
                for query in ("she", "", "friend", "")
            ]
        finally:
            driver.quit()
        load = statistics.median(t[0] for t in times)
        wall = statistics.median(t[1] for t in times)
        print(f"samples: {count}, first {rows} rows attached (more on scrolling); as JSON {samples_bytes / 1e6:.2f} MB")
        print(
            f"report.html: {size / 1e6:.3f} MB = {size / SIZE_BUDGET:.1%} of the 5 MB budget (python render {render_s:.2f} s)"
        )
        print(
            f"load (navigation start -> load event, median of {args.repeats}): {load * 1000:.0f} ms = "
            f"{load / LOAD_BUDGET_S:.1%} of the 2 s budget; WebDriver navigation wall time {wall * 1000:.0f} ms"
        )
        print("all loads (ms, page/WebDriver): " + ", ".join(f"{a * 1000:.0f}/{b * 1000:.0f}" for a, b in times))
        print(
            "filter + re-render incl. layout (ms, 'she', clear, 'friend', clear): "
            + ", ".join(f"{t:.0f}" for t in filter_ms)
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
