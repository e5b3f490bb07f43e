"""Independent, reproducible samples: each sampled request draws from its own seed (run seed, set, item, prompt,
repetition), so replies to different prompts are not coupled, a batch's other rows change no draw, and two runs
(or a run and its resume) with one seed draw the same. Checked on the local model and over the real vLLM.

The diversity test compares the number D of distinct first tokens among the replies to GenderBench's first 20
`direct` prompts with what an independent sampler gives: 20,000 simulated runs, each prompt drawn on its own from
the local model's exact first-token probabilities (E[D] is about 10); D must reach the simulated runs' 0.1%
quantile (6). With one seed shared by the 20 requests (the old behaviour over a server) the draws follow one
random stream and all 20 replies begin alike (D = 1).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from fairprobe.families.genderbench.record import GenderBenchSample
from fairprobe.models.base import Completion, GenerationConfig, generate_seeded, stable_seed
from fairprobe.models.sampling import draw, generators_for, log_probs, nucleus, race_every_token, uniforms
from fairprobe.options import RunOptions
from fairprobe.runner import RunPlan, read_samples, run, run_with_samples

PROMPTS = 20


def direct_options(out: Path, seed: int = 0, batch_size: int = 20, **kw) -> RunOptions:
    """GenderBench's first 20 `direct` prompts, sampled once each at temperature 1, one new token, no cache."""
    return RunOptions(
        suite="genderbench",
        probes=["direct"],
        limit=PROMPTS,
        limit_order="first",
        out=out,
        seed=seed,
        batch_size=batch_size,
        probe_options={"mode": "sample", "repetitions": 1},
        generation={"max_new_tokens": 1},
        use_cache=False,
        **kw,
    )


def first_tokens(options: RunOptions, backend=None) -> list[str]:
    """The one-token reply to each prompt, in the set's order."""
    _, samples = run_with_samples(options, backend=backend)
    records = samples["direct"]
    assert len(records) == PROMPTS and all(isinstance(r, GenderBenchSample) and r.error is None for r in records)
    return [r.replies[0][0].strip() for r in records]


def least_distinct(backend, options: RunOptions, runs: int = 20_000) -> int:
    """The 0.1% quantile of the number of distinct first-token texts over `runs` simulated independent samplers
    (each prompt drawn from the local model's exact first-token probabilities, tokens grouped by their text)."""
    from fairprobe.families import load_probe_set

    plan = RunPlan.build(options)
    bound = plan.bound("direct")
    ps = load_probe_set("direct", limit=PROMPTS, limit_order="first")
    prompts = [bound.family.requests(ps, probe, plan.context, bound.options)[0].prompt for probe in ps.probes[:PROMPTS]]
    with torch.inference_mode():
        logits = backend.model(**backend.encode(prompts)).logits[:, -1].float()
    probs = logits.softmax(-1).double().numpy()
    texts = [backend.tokenizer.decode([i], skip_special_tokens=True).strip() for i in range(probs.shape[1])]
    classes = {t: k for k, t in enumerate(dict.fromkeys(texts))}
    by_text = np.zeros((len(prompts), len(classes)))
    np.add.at(by_text.T, np.array([classes[t] for t in texts]), probs.T)
    cdf = np.cumsum(by_text / by_text.sum(1, keepdims=True), axis=1)
    u = np.random.default_rng(0).random((runs, len(prompts)))
    drawn = np.stack([np.searchsorted(cdf[i], u[:, i]).clip(max=len(classes) - 1) for i in range(len(prompts))], 1)
    distinct = np.array([len(set(row)) for row in drawn.tolist()])
    return int(np.quantile(distinct, 0.001))


def test_request_seeds_are_stable_and_apart() -> None:
    a = stable_seed(0, "direct", "direct-0", "p0r0", "prompt", 0)
    assert a == stable_seed(0, "direct", "direct-0", "p0r0", "prompt", 0)
    assert 0 <= a < 2**63
    others = {stable_seed(0, "direct", f"direct-{i}", "p0r0", "prompt", r) for i in range(50) for r in range(4)}
    assert len(others) == 200 and a in others


def test_nucleus_keeps_the_smallest_set_reaching_top_p_and_the_top_k() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    kept = torch.isfinite(nucleus(logits, 0.7, 0)).tolist()
    assert kept == [[True, True, False, False]]  # 0.5 < 0.7, 0.5 + 0.3 reaches it
    assert torch.isfinite(nucleus(logits, 1.0, 3)).tolist() == [[True, True, True, False]]
    assert torch.isfinite(nucleus(logits, 0.4, 0)).tolist() == [[True, False, False, False]]


def test_a_row_draws_from_its_own_generator_with_the_models_probabilities() -> None:
    probs = torch.tensor([0.6, 0.3, 0.1])
    config = GenerationConfig(temperature=1.0)
    row = torch.log(probs).unsqueeze(0)
    gens = generators_for([5], torch.device("cpu"))
    counts = np.bincount([int(draw(row, gens, config)[0]) for _ in range(4000)], minlength=3) / 4000
    assert np.abs(counts - probs.numpy()).max() < 0.03  # 4000 draws: sd of a share <= 0.008
    # Row 1's draws are the same whatever row 0 is, and alone.
    other = torch.log(torch.tensor([[0.1, 0.1, 0.8], [0.6, 0.3, 0.1]]))
    cpu = torch.device("cpu")
    beside = [int(draw(other, generators_for([s + 100, s], cpu), config)[1]) for s in range(40)]
    alone = [int(draw(row, generators_for([s], cpu), config)[0]) for s in range(40)]
    assert beside == alone and len(set(alone)) == 3


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_uniforms_are_each_generators_own_stream_on_any_number_of_threads(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    cpu, seeds = torch.device("cpu"), [7, 8, 9, 10, 11]
    want = torch.stack([torch.rand(1000, generator=g, dtype=torch.float64) for g in generators_for(seeds, cpu)])
    with torch.inference_mode():  # as a decode step draws: the rows are filled on other threads in this mode too
        got = uniforms(generators_for(seeds, cpu), 1000)
        assert got.is_inference()
    assert torch.equal(got, want)
    assert torch.equal(uniforms(generators_for(seeds[:1], cpu), 1000), want[:1])


def test_log_probabilities_at_temperature_one_are_the_quotients_bitwise() -> None:
    logits = torch.randn(3, 500, generator=torch.Generator().manual_seed(3)) * 4
    assert torch.equal(log_probs(logits, GenerationConfig(temperature=1.0)), (logits / 1.0).log_softmax(-1))
    hot = GenerationConfig(temperature=0.7)
    assert torch.equal(log_probs(logits, hot), (logits / 0.7).log_softmax(-1))


@pytest.mark.parametrize(
    "config",
    [
        GenerationConfig(temperature=1.0),
        GenerationConfig(temperature=0.7, top_p=0.9),
        GenerationConfig(temperature=1.5, top_k=40),
    ],
)
def test_a_draw_races_only_tokens_that_can_win_and_picks_the_full_races_token(config: GenerationConfig) -> None:
    cpu, picks = torch.device("cpu"), []
    for spread in (0.3, 2.0, 10.0):  # near-uniform (thousands of contenders) to peaked (a handful)
        logits = torch.randn(48, 6000, generator=torch.Generator().manual_seed(int(spread * 10))) * spread
        seeds = [int(spread * 1000) + row for row in range(48)]
        drawn = draw(logits, generators_for(seeds, cpu), config)
        assert torch.equal(drawn, race_every_token(logits, generators_for(seeds, cpu), config))
        picks.append(drawn)
    # The flat rows' winners are spread out and often not the most likely token: the pruning is really tested.
    assert len(set(picks[0].tolist())) > 40


def test_a_backend_that_takes_no_seeds_is_asked_prompt_by_prompt_with_each_seed() -> None:
    """A model written before per-prompt seeds (a plugin, a model in memory) samples each prompt from its own seed
    as `config.seed`, one call per prompt, and streamed answers keep their index in the whole call."""
    calls: list[tuple[list[str], int]] = []

    class OldBackend:
        def generate(self, prompts, config, score=None, on_result=None):
            calls.append((list(prompts), config.seed))
            out = [Completion(text=f"{p}|{config.seed}") for p in prompts]
            for i, c in enumerate(out):
                on_result(i, c)
            return out

    seen: list[tuple[int, str]] = []
    config = GenerationConfig(temperature=1.0)
    got = generate_seeded(
        OldBackend(), ["a", "b"], config, None, [7, 9], on_result=lambda i, c: seen.append((i, c.text))
    )
    assert [c.text for c in got] == ["a|7", "b|9"] and calls == [(["a"], 7), (["b"], 9)]
    assert seen == [(0, "a|7"), (1, "b|9")]


@pytest.mark.slow
def test_local_draws_are_independent_and_reproducible(embedded_backend, tmp_path: Path) -> None:
    """Locally: the 20 replies are as diverse as independent draws; one seed draws the same whatever the batch
    size and after a resume; another seed draws otherwise."""
    whole = first_tokens(direct_options(tmp_path / "a"), embedded_backend)
    assert len(set(whole)) >= least_distinct(embedded_backend, direct_options(tmp_path / "x")) >= 5
    assert first_tokens(direct_options(tmp_path / "b", batch_size=3), embedded_backend) == whole
    assert first_tokens(direct_options(tmp_path / "c", seed=1), embedded_backend) != whole
    # A resume: the first two batches of 3 kept, the rest asked again.
    first = tmp_path / "b"
    resumed = tmp_path / "resumed"
    shutil.copytree(first, resumed)
    (resumed / "summary.json").unlink()
    lines = (resumed / "samples.jsonl").read_text().splitlines(keepends=True)
    (resumed / "samples.jsonl").write_text("".join(lines[:6]))
    run(direct_options(resumed, batch_size=3), backend=embedded_backend)
    again = [r.replies[0][0].strip() for r in read_samples(resumed / "samples.jsonl")]  # type: ignore[attr-defined]
    assert again == whole


@pytest.mark.slow
def test_vllm_draws_are_independent_and_reproducible(vllm_server, embedded_backend, tmp_path: Path) -> None:
    """Over vLLM, which honours a seed per request: the 20 replies are as diverse as independent draws (with one
    seed for every request they shared a random stream: all 20 `direct` replies began alike), and two runs
    with one seed are identical."""
    served = {"model": f"openai:{vllm_server.model}", "model_args": {"base_url": vllm_server.url}}
    one = first_tokens(direct_options(tmp_path / "a", **served))
    assert len(set(one)) >= least_distinct(embedded_backend, direct_options(tmp_path / "x")) >= 5
    assert first_tokens(direct_options(tmp_path / "b", batch_size=7, **served)) == one
    manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert manifest["seed"] == 0
