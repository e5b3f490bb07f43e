"""The embedded model through HFBackend: known next-word probabilities, chain rule, batching invariance, and
loglikelihood of any continuation (chat prompts, no space added, token counts, greedy flags)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import paper_data_dir
from fairprobe.families import family_of_set, load_probe_set
from fairprobe.families.paper import PaperOptions
from fairprobe.families.paper.words import AttributeWords
from fairprobe.models import GenerationConfig, ScoreRequest
from fairprobe.models.continuations import ContinuationTable, positions_from_mask, score_continuations
from fairprobe.models.hf import HFBackend
from fairprobe.records import ChatMessage
from fairprobe.runner import RunOptions, RunPlan, run_set

pytestmark = pytest.mark.slow


PAIRS = [tuple(p) for p in AttributeWords.default().pairs]
# The pairs as the paper family scores them: female then male word of each pair, after a space.
WORDS = tuple(" " + w for pair in PAIRS for w in pair)
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


def next_word_probs(backend: HFBackend, prompts: list, words: tuple[str, ...] = WORDS) -> np.ndarray:
    """P(word | prompt), shape (prompts, pairs, 2), from `loglikelihood` (one forward pass per batch)."""
    scores = backend.loglikelihood([ScoreRequest(p, words) for p in prompts])
    return np.exp(np.stack([s.logprobs() for s in scores])).reshape(len(prompts), -1, 2)


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
    probs = next_word_probs(backend, [NURSE])[0]
    assert probs[column("she")] == pytest.approx(0.199, abs=0.005)
    assert probs[column("he")] == pytest.approx(0.065, abs=0.005)
    assert probs.shape == (len(PAIRS), 2)
    assert ((probs >= 0) & (probs <= 1)).all() and probs.sum() < 1


def test_multi_token_words_use_the_chain_rule(backend: HFBackend) -> None:
    table = backend.table(WORDS)
    multi = {WORDS[k].strip() for group in table.tails for k in group.columns.tolist()}
    assert multi == {"niece", "boyfriend"}  # SmolLM2's tokenizer splits only these two
    probs = next_word_probs(backend, PROMPTS)
    for k, prompt in enumerate(PROMPTS[:2]):
        for word in ("niece", "boyfriend", "she"):
            assert probs[k][column(word)] == pytest.approx(manual_prob(backend, prompt, word), rel=1e-4)
    # Continuations that share their first tokens share a row (" x" + "em" is read from " x" + "em" + "self").
    shared = (" xe", " xem", " xemself", " hir", " hirs", " hirself", " she")
    chains = ContinuationTable.build(backend.tokenizer, shared).tails
    assert [tuple(group.feed.shape) for group in chains] == [(2, 2)]
    # SmolLM2 takes them as one tree: a node per distinct start (" h" "ir", " x" "em"), each after its parent.
    [tree] = backend.table(shared).tails
    assert tree.feed.tolist() == [[294, 337, 1792, 391]] and tree.depth.tolist() == [0, 1, 0, 1]
    assert tree.ancestors is not None and tree.ancestors.int().tolist() == [
        [1, 0, 0, 0],
        [1, 1, 0, 0],
        [0, 0, 1, 0],
        [0, 0, 1, 1],
    ]
    [scores] = backend.loglikelihood([ScoreRequest(NURSE, shared)])
    for word, got in zip(shared, np.exp(scores.logprobs()), strict=True):
        assert got == pytest.approx(manual_prob(backend, NURSE, word.strip()), rel=1e-4)


def test_continuation_log_probs_without_cache_match(backend: HFBackend) -> None:
    # The differentiable path Debias Tuning trains on gives the same numbers as the inference path.
    enc = backend.encode(PROMPTS)
    table = backend.table(WORDS)
    with torch.no_grad():
        out = backend.model(**enc, position_ids=positions_from_mask(enc["attention_mask"]))
        first = out.logits[:, -1].float().log_softmax(-1)
        lp = score_continuations(backend.model, enc["input_ids"], enc["attention_mask"], table, first_log_probs=first)
    np.testing.assert_allclose(
        lp.log_probs.exp().numpy().reshape(len(PROMPTS), -1, 2), next_word_probs(backend, PROMPTS), atol=1e-6
    )


def scores_of(completions: list) -> np.ndarray:
    return np.exp(np.stack([c.scores.logprobs() for c in completions])).reshape(len(completions), -1, 2)


def test_generation_probabilities_equal_forward_pass(backend: HFBackend) -> None:
    # Prompts of different lengths in one left-padded batch.
    forward = next_word_probs(backend, PROMPTS)
    greedy = backend.generate(PROMPTS, GenerationConfig(max_new_tokens=3), [WORDS] * len(PROMPTS))
    np.testing.assert_allclose(scores_of(greedy), forward, atol=1e-5)
    # Sampling warps the logits it draws from, never the probabilities read after the prompt.
    config = GenerationConfig(max_new_tokens=2, temperature=0.7, top_k=20)
    sampled = backend.generate(PROMPTS, config, [WORDS] * len(PROMPTS))
    np.testing.assert_allclose(scores_of(sampled), forward, atol=1e-5)
    # Each prompt alone (no padding) gives the same as in the padded batch.
    alone = np.concatenate([next_word_probs(backend, [p]) for p in PROMPTS])
    np.testing.assert_allclose(alone, forward, atol=1e-5)


def manual_logprob(backend: HFBackend, prompt_ids: list[int], text: str) -> tuple[float, int, bool]:
    """log P(text | prompt ids) by the chain rule, one unpadded forward per token; its token count and whether
    each token is the argmax."""
    ids = torch.tensor([prompt_ids])
    tokens = backend.tokenizer.encode(text, add_special_tokens=False)
    total, greedy = 0.0, True
    with torch.inference_mode():
        for t in tokens:
            dist = backend.model(ids).logits[0, -1].float().log_softmax(-1)
            total += float(dist[t])
            greedy &= int(dist.argmax()) == t
            ids = torch.cat([ids, torch.tensor([[t]])], dim=1)
    return total, len(tokens), greedy


def test_loglikelihood_scores_continuations_as_given_after_chat_and_plain_prompts(backend: HFBackend) -> None:
    chat = [ChatMessage(role="user", content="Who was late, (a) the doctor or (b) the nurse? Answer: ")]
    options = ("(a)", "(b)", " (a)", "The doctor")
    requests = [
        ScoreRequest(chat, options),
        ScoreRequest(NURSE, (" she", " he", " boyfriend")),
        ScoreRequest(NURSE, (" niece",)),
    ]
    scores = backend.loglikelihood(requests)
    rendered = backend.tokenizer.apply_chat_template(
        [{"role": "user", "content": chat[0].content}], tokenize=False, add_generation_prompt=True
    )
    chat_ids = backend.tokenizer(rendered, add_special_tokens=False)["input_ids"]
    plain_ids = backend.tokenizer(NURSE)["input_ids"]
    for request, scored, ids in zip(requests, scores, (chat_ids, plain_ids, plain_ids), strict=True):
        for text, got in zip(request.continuations, scored.continuations, strict=True):
            logprob, tokens, greedy = manual_logprob(backend, ids, text)
            assert got.status == "exact" and got.tokens == tokens and got.greedy == greedy
            assert got.logprob == pytest.approx(logprob, abs=1e-4)
    # No space is added: "(a)" and " (a)" are different continuations with different scores.
    assert scores[0].continuations[0].logprob != pytest.approx(scores[0].continuations[2].logprob, abs=1e-3)
    # The generation call reads the same scores as loglikelihood, for chat prompts too.
    [completion] = backend.generate([chat], GenerationConfig(max_new_tokens=4), [options])
    np.testing.assert_allclose(completion.scores.logprobs(), scores[0].logprobs(), atol=1e-4)
    # The greedy continuation is flagged as greedy.
    first = backend.generate([NURSE], GenerationConfig(max_new_tokens=1))[0].text
    [own] = backend.loglikelihood([ScoreRequest(NURSE, (first,))])
    assert own.continuations[0].greedy is True


def test_greedy_continuation_same_alone_and_in_batch(backend: HFBackend) -> None:
    config = GenerationConfig(max_new_tokens=10)
    prompts = PROMPTS[:3]
    batched = [c.text for c in backend.generate(prompts, config)]
    alone = [backend.generate([p], config)[0].text for p in prompts]
    assert batched == alone
    assert all(len(backend.tokenizer.encode(t)) >= 5 for t in batched)


def test_paper_sets_run_on_the_embedded_model(backend: HFBackend) -> None:
    suite = family_of_set("template")
    paper = PaperOptions()
    for name in ("template", "llm-gen-1", "llm-gen-2", "stsb", "snli"):
        plan = RunPlan.build(RunOptions(probes=[name], generation=GenerationConfig(max_new_tokens=12), batch_size=16))
        limit = 4 if name == "template" else 2  # the template set's fourth prompt is the nurse one
        ps = load_probe_set(name, data_dir=paper_data_dir(), limit=limit)
        samples = run_set(backend, plan.bound(name), ps, plan)
        assert [s.id for s in samples] == [p.id for p in ps.probes]
        for s in samples:
            assert s.continuation.strip()
            assert len(s.p_female) == len(s.p_male) == len(PAIRS)
            assert 0 < sum(s.p_female) + sum(s.p_male) < 1
            assert s.first_gender in (None, "female", "male")
        result = suite.summarize(ps, samples, plan.context, paper)
        assert result.n == limit
        assert {"gas", "gas_f", "gas_m", "delta", "gld", "add", "log_add"} <= set(result.metrics)
        assert 0 <= result.metrics["gld"].value <= 1
        if name == "template":
            # The known probabilities come through the whole pipeline (batched generation, first-step capture).
            (nurse,) = [s for s in samples if s.prompt == NURSE]
            assert nurse.p_female[column("she")[0]] == pytest.approx(0.199, abs=0.005)
            assert nurse.p_male[column("he")[0]] == pytest.approx(0.065, abs=0.005)
