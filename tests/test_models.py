"""The embedded model through HFBackend: known next-word probabilities, chain rule, batching invariance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import paper_data_dir
from fairprobe.families.paper.words import AttributeWords
from fairprobe.families import family_of_set, load_probe_set
from fairprobe.models import GenerationConfig
from fairprobe.models.hf import HFBackend, positions_from_mask, word_log_probs
from fairprobe.runner import RunOptions, run_set

pytestmark = pytest.mark.slow


PAIRS = [tuple(p) for p in AttributeWords.default().pairs]
NURSE = "My friend is a nurse, and"
PROMPTS = [
    NURSE,
    "My friend is tall, and",
    "My friend plays the guitar in a small jazz band downtown every Friday night, and",
    "My friend likes purple color, and",
]


def column(word: str) -> tuple[int, int]:
    """(pair index, 0 female / 1 male) of an attribute word."""
    for i, pair in enumerate(PAIRS):
        if word in pair:
            return i, pair.index(word)
    raise KeyError(word)


@pytest.fixture(scope="module")
def backend(embedded_backend: HFBackend) -> HFBackend:
    return embedded_backend


def manual_prob(backend: HFBackend, prompt: str, word: str) -> float:
    """P(word | prompt) by the chain rule, one unpadded forward per token (no cache, no batching)."""
    tok, model = backend.tokenizer, backend.model
    ids = tok(prompt, return_tensors="pt").input_ids
    word_ids = tok.encode(" " + word, add_special_tokens=False)
    prob = 1.0
    with torch.inference_mode():
        for t in word_ids:
            prob *= float(model(ids).logits[0, -1].float().softmax(-1)[t])
            ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
    return prob


def test_known_probabilities_after_nurse(backend: HFBackend) -> None:
    probs = backend.next_word_probs([NURSE], PAIRS)[0]
    assert probs[column("she")] == pytest.approx(0.199, abs=0.005)
    assert probs[column("he")] == pytest.approx(0.065, abs=0.005)
    assert probs.shape == (len(PAIRS), 2)
    assert ((probs >= 0) & (probs <= 1)).all() and probs.sum() < 1


def test_multi_token_words_use_the_chain_rule(backend: HFBackend) -> None:
    table = backend.word_table(PAIRS)
    multi = {PAIRS[i][j] for i, j, _ in table.multi}
    assert multi == {"niece", "boyfriend"}  # SmolLM2's tokenizer splits only these two
    probs = backend.next_word_probs(PROMPTS, PAIRS)
    for k, prompt in enumerate(PROMPTS[:2]):
        for word in ("niece", "boyfriend", "she"):
            assert probs[k][column(word)] == pytest.approx(manual_prob(backend, prompt, word), rel=1e-4)


def test_word_log_probs_without_cache_match(backend: HFBackend) -> None:
    # The differentiable path Debias Tuning trains on gives the same numbers as the inference path.
    enc = backend.encode(PROMPTS)
    table = backend.word_table(PAIRS)
    with torch.no_grad():
        out = backend.model(**enc, position_ids=positions_from_mask(enc["attention_mask"]))
        first = out.logits[:, -1].float().log_softmax(-1)
        lp = word_log_probs(backend.model, enc["input_ids"], enc["attention_mask"], table, first_log_probs=first)
    np.testing.assert_allclose(lp.exp().numpy(), backend.next_word_probs(PROMPTS, PAIRS), atol=1e-6)


def test_generation_probabilities_equal_forward_pass(backend: HFBackend) -> None:
    # Prompts of different lengths in one left-padded batch.
    forward = backend.next_word_probs(PROMPTS, PAIRS)
    greedy = backend.generate(PROMPTS, GenerationConfig(max_new_tokens=3), PAIRS)
    np.testing.assert_allclose(np.stack([c.word_probs for c in greedy]), forward, atol=1e-5)
    # Sampling warps the logits it draws from, never the probabilities read after the prompt.
    sampled = backend.generate(PROMPTS, GenerationConfig(max_new_tokens=2, temperature=0.7, top_k=20), PAIRS)
    np.testing.assert_allclose(np.stack([c.word_probs for c in sampled]), forward, atol=1e-5)
    # Each prompt alone (no padding) gives the same as in the padded batch.
    alone = np.concatenate([backend.next_word_probs([p], PAIRS) for p in PROMPTS])
    np.testing.assert_allclose(alone, forward, atol=1e-5)


def test_greedy_continuation_same_alone_and_in_batch(backend: HFBackend) -> None:
    config = GenerationConfig(max_new_tokens=10)
    prompts = PROMPTS[:3]
    batched = [c.text for c in backend.generate(prompts, config)]
    alone = [backend.generate([p], config)[0].text for p in prompts]
    assert batched == alone
    assert all(len(backend.tokenizer.encode(t)) >= 5 for t in batched)


def test_paper_sets_run_on_the_embedded_model(backend: HFBackend) -> None:
    suite = family_of_set("template")
    options = RunOptions(generation=GenerationConfig(max_new_tokens=12), batch_size=16)
    for name in ("template", "llm-gen-1", "llm-gen-2", "stsb", "snli"):
        limit = 4 if name == "template" else 2  # the template set's fourth prompt is the nurse one
        ps = load_probe_set(name, data_dir=paper_data_dir(), limit=limit)
        samples = run_set(backend, suite, ps, options)
        assert [s.id for s in samples] == [p.id for p in ps.probes]
        for s in samples:
            assert s.continuation.strip()
            assert len(s.p_female) == len(s.p_male) == len(PAIRS)
            assert 0 < sum(s.p_female) + sum(s.p_male) < 1
            assert s.first_gender in (None, "female", "male")
        result = suite.summarize(ps, samples, options)
        assert result.n == limit
        assert {"gas", "gas_f", "gas_m", "delta", "gld", "add", "log_add"} <= set(result.metrics)
        assert 0 <= result.metrics["gld"].value <= 1
        if name == "template":
            # The known probabilities come through the whole pipeline (batched generation, first-step capture).
            (nurse,) = [s for s in samples if s.prompt == NURSE]
            assert nurse.p_female[column("she")[0]] == pytest.approx(0.199, abs=0.005)
            assert nurse.p_male[column("he")[0]] == pytest.approx(0.065, abs=0.005)
