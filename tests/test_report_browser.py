"""report.html in a real browser: headless Chromium (Debian `chromium` + `chromium-driver`) driven by selenium.

A real run (embedded model, 8 template prompts) must show every figure and the sample table, filter and sort it,
log no console error and send no request beyond the file itself; a synthetic 1,241-prompt run must stay under
5 MB and render. Without Chromium the tests skip, except in CI (CI=true), where they fail.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest

from fairprobe.report.html import highlight

BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "report_load.py"
_spec = importlib.util.spec_from_file_location("report_load", BENCHMARK)
report_load = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(report_load)  # type: ignore[union-attr]


def _browser_missing() -> str | None:
    for exe in (report_load.CHROMIUM, report_load.CHROMEDRIVER):
        if not Path(exe).is_file():
            return f"{exe} not found: install Debian packages chromium and chromium-driver (`make test` does as root)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium not installed: pip install -e '.[dev]'"
    return None


@pytest.fixture(scope="module")
def driver(tmp_path_factory: pytest.TempPathFactory):
    """One headless Chromium for the module, with browser and performance (network) logs."""
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the browser test: {missing}")
        pytest.skip(missing)
    d = report_load.chrome(tmp_path_factory.mktemp("chromium-profile"), logs=True)
    yield d
    d.quit()


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory, embedded_backend) -> Path:
    """A real paper-suite run of 8 template prompts (24 new tokens); the runner writes report.html itself."""
    from fairprobe.models import GenerationConfig
    from fairprobe.runner import RunOptions, run

    out = tmp_path_factory.mktemp("report-run") / "run"
    options = RunOptions(
        probes=["template"], limit=8, out=out, batch_size=8, generation=GenerationConfig(max_new_tokens=24)
    )
    run(options, backend=embedded_backend)
    return out


def network_requests(driver) -> list[str]:
    """URLs of every request the page sent since the last call (Chrome performance log, CDP Network events)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def shown_rows(driver) -> int:
    return driver.execute_script("return document.querySelectorAll('#samples tbody tr').length")


@pytest.mark.slow
def test_real_run_report_in_chromium(driver, real_run: Path, tmp_path: Path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    page = real_run / "report.html"
    assert page.is_file(), "the runner must write report.html"
    samples = [json.loads(line) for line in (real_run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8
    driver.get_log("performance")
    driver.get_log("browser")
    driver.get(page.as_uri())
    assert driver.execute_script("return document.body.dataset.ready") == "1"

    # Figures: GAS per set, GAS per template subset, GLD, ADD, GAS(F)/GAS(M) split; all visible with content.
    figures = driver.find_elements(By.CSS_SELECTOR, "figure.fig svg")
    titles = [f.text.split("\n")[0] for f in driver.find_elements(By.CSS_SELECTOR, "figure.fig figcaption")]
    assert titles == [
        "GAS per probe set and model (paper Figure 2)",
        "GAS per subset of template (paper Figure 3)",
        "Stereotype direction per probe set",
        "Stereotype direction per subset of template",
        "GLD per probe set (paper Figure 4)",
        "ADD per probe set (paper Figure 5)",
        "GAS(F) / GAS(M) with Delta (paper Table 10)",
    ]
    for svg in figures:
        driver.execute_script("arguments[0].scrollIntoView()", svg)
        assert svg.is_displayed() and svg.size["width"] > 300 and svg.size["height"] > 100
    glance = driver.find_element(By.ID, "glance")
    assert glance.is_displayed()
    assert "template" in glance.text

    # The sample table: every sample, attribute words highlighted as the detector found them.
    table = driver.find_element(By.ID, "samples")
    driver.execute_script("arguments[0].scrollIntoView()", table)
    assert table.is_displayed()
    assert shown_rows(driver) == 8
    expected_marks = sum(
        1 for s in samples for piece in highlight(s["continuation"], s["words_found"]) if isinstance(piece, list)
    )
    assert len(driver.find_elements(By.CSS_SELECTOR, "#samples mark")) == expected_marks

    # Filtering: a prompt word, then nonsense, then the verdict menu.
    box = driver.find_element(By.ID, "filter")
    word = samples[3]["prompt"].split()[-2].rstrip(",")
    expected = sum(1 for s in samples if word.lower() in (s["prompt"] + s["continuation"]).lower())
    box.send_keys(word)
    assert shown_rows(driver) == expected < 8
    assert driver.find_element(By.ID, "count").text == f"showing {expected} of 8"
    box.clear()
    box.send_keys("zzqqxx")
    assert shown_rows(driver) == 0
    box.clear()
    box.send_keys(" ")  # clear() fires no input event; a blank query shows everything again
    assert shown_rows(driver) == 8
    none = sum(1 for s in samples if not s["first_gender"])
    Select(driver.find_element(By.ID, "verdict-filter")).select_by_value("no gendered word")
    assert shown_rows(driver) == none
    Select(driver.find_element(By.ID, "verdict-filter")).select_by_value("")

    # Sorting by P(f): ascending, then descending on a second click.
    header = driver.find_element(By.CSS_SELECTOR, "#samples th[data-key=f]")
    p_female = sorted(float(f"{sum(s['p_female']):.3g}") for s in samples)
    column = "return [...document.querySelectorAll('#samples tbody tr')].map(r => parseFloat(r.cells[5].textContent))"
    header.click()
    assert driver.execute_script(column) == pytest.approx(p_female, rel=1e-2)
    header.click()
    assert driver.execute_script(column) == pytest.approx(p_female[::-1], rel=1e-2)
    assert header.get_attribute("aria-sort") == "descending"

    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == []
    requests = network_requests(driver)
    assert requests and set(requests) == {page.as_uri()}

    driver.set_window_size(1280, min(8000, driver.execute_script("return document.body.scrollHeight") + 150))
    driver.execute_script("window.scrollTo(0, 0)")
    assert driver.save_screenshot(str(tmp_path / "report.png"))
    shutil.copy(tmp_path / "report.png", "/tmp/report.png")


def test_full_size_report_is_small_and_renders(driver, tmp_path: Path):
    from selenium.webdriver.support.ui import WebDriverWait

    from fairprobe.report.html import write_run_report

    run_dir = report_load.synthetic_run(tmp_path / "run")
    page = write_run_report(run_dir)
    assert page.stat().st_size < report_load.SIZE_BUDGET
    driver.get_log("browser")
    driver.get(page.as_uri())
    assert driver.execute_script("return document.readyState") == "complete"
    assert driver.execute_script("return document.getElementById('count').textContent") == "showing 1241 of 1241"
    assert shown_rows(driver) == 200  # rows are attached a page at a time, the next ones on scrolling
    driver.execute_script("const s = document.getElementById('samples').parentNode; s.scrollTop = s.scrollHeight;")
    WebDriverWait(driver, 5).until(lambda d: shown_rows(d) == 400)  # the scroll event comes asynchronously
    assert len(driver.find_elements("css selector", "figure.fig svg")) == 7
    assert [e for e in driver.get_log("browser") if e["level"] == "SEVERE"] == []


def genderbench_run(out: Path, sizes: dict[str, int]) -> Path:
    """A synthetic GenderBench run: records with 600-character replies (sample mode) or option probabilities."""
    from fairprobe.families.genderbench.record import GenderBenchSample
    from fairprobe.records import MetricValue, SetResult, Summary

    out.mkdir(parents=True)
    reply = ("He said the answer is (a) and that he would think again about it. " * 10)[:600]
    with (out / "samples.jsonl").open("w", encoding="utf-8") as handle:
        for name, n in sizes.items():
            for i in range(n):
                prompt = f"Item {i} of {name}: " + "a prompt of a few hundred characters " * 12
                if i % 2:
                    record = GenderBenchSample(
                        set=name, id=f"{name}-{i}", prompt=prompt, mode="exact", q=[[0.7, 0.3]], mass=[0.4]
                    )
                else:
                    record = GenderBenchSample(
                        set=name, id=f"{name}-{i}", prompt=prompt, mode="sample", replies=[[reply]], answers=[["a"]]
                    )
                handle.write(record.model_dump_json() + "\n")
    metric = MetricValue(value=0.2, ci95=(0.1, 0.3))
    results = {
        name: SetResult(n=n, source="synthetic", metrics={"stereotype_rate": metric}) for name, n in sizes.items()
    }
    summary = Summary(fairprobe_version="0.1.0", model="synthetic-model", results=results)
    (out / "summary.json").write_text(json.dumps(summary.to_json_obj()), encoding="utf-8")
    (out / "manifest.json").write_text(json.dumps({"suite": "genderbench", "options": {}}), encoding="utf-8")
    return out


def test_a_100k_sample_genderbench_report_stays_small_and_opens_fast(driver, tmp_path: Path):
    """100,000 records (samples.jsonl about 120 MB): the browser holds 1,000 of each set, the page stays under
    20 MB and loads in under 3 s."""
    from fairprobe.report.html import write_run_report

    sizes = {"hiring-an": 40_000, "isear": 30_000, "dreaddit": 15_000, "bbq-gender": 15_000}
    page = write_run_report(genderbench_run(tmp_path / "run", sizes))
    assert page.stat().st_size < 20 * 1024 * 1024
    load_s, _ = report_load.load_time(driver, page)
    assert load_s < 3.0
    assert driver.execute_script("return document.getElementById('count').textContent") == "showing 4000 of 4000"
    assert "Showing 4000 of them, evenly spread over each set" in driver.page_source
    assert driver.execute_script("return document.querySelector('h2 + p.meta') !== null")


def mitigation_folder(folder: Path, run: Path) -> Path:
    """A `fairprobe compare` folder (compare.json for the five paper sets and four methods, the Original run)."""
    from fairprobe.report.html import write_run_report

    def m(value: float, lo: float, hi: float) -> dict:
        return {"value": value, "ci95": [lo, hi]}

    metrics = {"gas": m(0.244, 0.18, 0.32), "gld": m(0.176, 0.15, 0.2), "add": m(0.00369, 0.003, 0.0044)}
    metrics["log_add"] = m(-5.598, -5.87, -5.36)
    drift = {k: m(0.912, 0.874, 0.941) for k in ("fluency_nll", "on_subject", "distinct_2", "garbage")}
    tests = {k: {"difference": -0.05, "p": 0.01, "p_holm": 0.02} for k in drift}
    vs = {
        "gas": {"original_only": 7, "method_only": 0, "p_mcnemar": 0.0039, "relative_change": -0.75, "p_holm": 0.01},
        "gld": {"difference": m(-0.0123, -0.0456, 0.0321), "p": 0.00001, "p_floor": True, "p_holm": 0.0001},
        "add": {"difference": m(-0.00123, -0.00234, -0.000512), "p": 0.004, "p_holm": 0.02},
    }
    row = {"n": 160, "metrics": metrics, "drift": drift, "perplexity": 12.345, "perplexity_relative_change": 0.0123}
    methods = {"Original": row}
    for name in ("Hyperparameter", "Instruction", "Debias Tuning", "w/o L_d"):
        methods[name] = {**row, "vs_original": vs, "drift_vs_original": tests}
    sets = {name: {"n": 160, "source": "x", "methods": methods} for name in report_load.SET_SIZES}
    folder.mkdir()
    (folder / "compare.json").write_text(json.dumps({"model": {"id": "toy"}, "sets": sets, "notes": []}))
    shutil.copytree(run, folder / "runs" / "original")
    return write_run_report(folder)


@pytest.mark.slow
def test_no_table_is_wider_than_the_page_at_1400_px(driver, tmp_path: Path):
    """The widest reports (a two-model comparison, a five-method mitigation comparison): every table, the closed
    ones opened, fits the 1400 px page without scrolling sideways, as a screenshot 1400 px wide shows."""
    from fairprobe.report.leaderboard import write_comparison

    a = report_load.synthetic_run(tmp_path / "a", seed=0)
    b = report_load.synthetic_run(tmp_path / "b", seed=1)
    summary = json.loads((b / "summary.json").read_text())
    (b / "summary.json").write_text(json.dumps({**summary, "model": "synthetic-model-with-a-longer-name"}))
    write_comparison(tmp_path / "comparison", [a, b])
    pages = [tmp_path / "comparison" / "report.html", mitigation_folder(tmp_path / "mitigation", a)]
    driver.set_window_size(1400, 1000)
    for page in pages:
        driver.get(page.as_uri())
        driver.execute_script("document.querySelectorAll('details').forEach(d => { d.open = true; })")
        too_wide = driver.execute_script(
            """
            const page = document.documentElement.clientWidth;
            return [...document.querySelectorAll('table')].filter(t => {
                const box = t.getBoundingClientRect(), scroller = t.parentElement;
                return box.right > page + 0.5 || scroller.scrollWidth > scroller.clientWidth + 1;
            }).map(t => t.id || t.dataset.table || t.className);
            """
        )
        assert too_wide == [], page
        assert driver.execute_script("return document.documentElement.scrollWidth") <= 1400
        shot = tmp_path / f"{page.parent.name}.png"
        assert driver.save_screenshot(str(shot))
        assert int.from_bytes(shot.read_bytes()[16:20], "big") == 1400  # the PNG header's width
        shutil.copy(shot, f"/tmp/report-{page.parent.name}-1400.png")
    titles = driver.execute_script(
        "return [...document.querySelectorAll('section.comparison h2')].map(h => h.textContent)"
    )
    assert titles == ["Mitigation comparison"]
