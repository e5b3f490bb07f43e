"""The backend's training/scoring interface and the KL term, on a tiny random Llama built here (no download)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch

from fairprobe.errors import ConfigError
from fairprobe.mitigation.loss_weights import LossWeights
from fairprobe.mitigation.losses import debias_loss, loss_kl
from fairprobe.mitigation.perplexity import perplexity
from fairprobe.models.base import LoraSettings, ScoringBackend, TrainableBackend
from fairprobe.models.hf import HFBackend

WORDS = [
    "my",
    "friend",
    "is",
    "a",
    "nurse",
    "teacher",
    "and",
    "cooks",
    "plays",
    "chess",
    "she",
    "he",
    "her",
    "his",
    "today",
    "we",
    "went",
    "home",
    "it",
    "was",
    "fun",
]
# The attribute words as the paper family scores them: each pair female then male, after a space.
SCORED = (" she", " he", " her", " his")


def tiny_backend(seed: int = 0, **config_fields: Any) -> HFBackend:
    """A 2-layer Llama with a word-level tokenizer over WORDS; random weights, fixed by `seed`; `config_fields`
    change its LlamaConfig."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "<eos>", *WORDS])}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>")
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=1,
        pad_token_id=1,
    )
    for name, value in config_fields.items():
        setattr(config, name, value)
    return HFBackend(LlamaForCausalLM(config).float(), tokenizer, name="tiny-llama", info={"id": "tiny-llama"})


def with_lora(backend: HFBackend) -> HFBackend:
    """Add LoRA and move its B matrices off zero, so the tuned model differs from the frozen one."""
    params = backend.add_lora(LoraSettings(rank=4, alpha=8, dropout=0.0, target_modules=("q_proj", "v_proj")))
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn_like(p) * 0.5)
    backend.train_mode(False)
    return backend


def test_hf_backend_implements_the_protocols() -> None:
    backend = tiny_backend()
    assert isinstance(backend, ScoringBackend) and isinstance(backend, TrainableBackend)


def test_text_log_probs_match_a_direct_forward_pass() -> None:
    backend = tiny_backend()
    prompts, texts = ["my friend is a nurse and", "my friend plays chess and"], ["she went home", "it was fun today"]
    got = backend.text_log_probs(prompts, texts)
    for prompt, text, lp in zip(prompts, texts, got, strict=True):
        p_ids = backend.tokenizer(prompt)["input_ids"]
        t_ids = backend.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p_ids + t_ids])
        with torch.no_grad():
            logits = backend.model(input_ids=ids).logits[0].log_softmax(-1)
        want = [float(logits[len(p_ids) - 1 + k, tok]) for k, tok in enumerate(t_ids)]
        np.testing.assert_allclose(lp, want, rtol=1e-5, atol=1e-5)
    # Perplexity: exp of the mean NLL of every token after the first, over all sentences.
    sentences = ["my friend is a nurse", "we went home"]
    scores = backend.text_log_probs(["", ""], sentences)
    assert [len(s) for s in scores] == [4, 2]
    assert perplexity(backend, sentences) == pytest.approx(math.exp(-np.concatenate(scores).mean()))


def direct_kl(backend: HFBackend, prompt: str, positions: int, excluded: set[int]) -> float:
    """KL(base || tuned) of the renormalised non-attribute distributions, one prompt, no padding, no batching."""
    ids = torch.tensor([backend.tokenizer(prompt)["input_ids"]])
    n = ids.shape[1]
    with torch.no_grad():
        with backend.frozen_base():
            for _ in range(positions):  # the frozen model's greedy continuation, one token at a time
                next_id = backend.model(input_ids=ids).logits[0, -1].argmax()
                ids = torch.cat([ids, next_id.view(1, 1)], 1)
            base = backend.model(input_ids=ids).logits[0]
        tuned = backend.model(input_ids=ids).logits[0]
    keep = [v for v in range(base.shape[-1]) if v not in excluded]
    total = 0.0
    for k in range(positions):
        p = torch.softmax(base[n - 1 + k, keep].double(), -1)
        q = torch.softmax(tuned[n - 1 + k, keep].double(), -1)
        total += float((p * (p / q).log()).sum())
    return total / positions


def test_kl_loss_matches_a_direct_computation_on_a_tiny_model() -> None:
    backend = with_lora(tiny_backend())
    prompts = ["my friend is a nurse and", "my friend plays chess and"]
    excluded = backend.first_token_ids(SCORED)
    assert sorted(excluded.tolist()) == sorted(backend.tokenizer.convert_tokens_to_ids(["she", "he", "her", "his"]))
    window = backend.continuation_window(prompts, positions=3, max_length=32)
    assert window.tuned.shape == window.base.shape == (2, 3, len(WORDS) + 2) and bool(window.valid.all())
    want = sum(direct_kl(backend, p, 3, set(excluded.tolist())) for p in prompts)
    got = loss_kl(window.base, window.tuned, excluded, window.valid)
    assert want > 1e-3  # the adapter really moved the distribution
    assert float(got.detach()) == pytest.approx(want, rel=1e-4)
    # Without the adapter the two distributions are one: KL 0.
    with backend.frozen_base():
        same = backend.continuation_window(prompts, positions=3, max_length=32)
    assert float(loss_kl(same.base, same.tuned, excluded, same.valid)) == pytest.approx(0.0, abs=1e-9)


def test_kl_loss_hand_computed_and_masked() -> None:
    # V = 3, token 2 is an attribute word: renormalised over tokens 0 and 1.
    base = torch.log(torch.tensor([[[0.5, 0.3, 0.2], [0.25, 0.25, 0.5]]]))
    tuned = torch.log(torch.tensor([[[0.2, 0.2, 0.6], [0.1, 0.3, 0.6]]]))
    p, q = np.array([0.5, 0.3]) / 0.8, np.array([0.2, 0.2]) / 0.4
    first = float((p * np.log(p / q)).sum())
    p2, q2 = np.array([0.5, 0.5]), np.array([0.25, 0.75])
    second = float((p2 * np.log(p2 / q2)).sum())
    excluded = torch.tensor([2])
    both = loss_kl(base, tuned, excluded, torch.tensor([[True, True]]))
    assert float(both) == pytest.approx((first + second) / 2)
    only_first = loss_kl(base, tuned, excluded, torch.tensor([[True, False]]))
    assert float(only_first) == pytest.approx(first)


def test_kl_gradient_flows_to_the_adapter_only() -> None:
    backend = with_lora(tiny_backend())
    backend.train_mode(True)
    window = backend.continuation_window(["my friend is a nurse and"], positions=2, max_length=32)
    lp = backend.continuation_log_probs(["my friend is a nurse and"], SCORED, 32)
    probs = lp.reshape(1, -1, 2).exp()
    kl = loss_kl(window.base, window.tuned, backend.first_token_ids(SCORED), window.valid)
    loss, parts = debias_loss(probs, LossWeights.parse("d,g,l,kl=0.5"), kl)
    assert parts["kl"] == pytest.approx(float(kl.detach())) and float(loss.detach()) == pytest.approx(
        parts["d"] + parts["g"] + parts["l"] + 0.5 * parts["kl"]
    )
    loss.backward()
    grads = {n: p.grad for n, p in backend.model.named_parameters() if p.grad is not None}
    assert grads and all("lora_" in n for n in grads)


def test_loss_weights_parse_kl() -> None:
    weights = LossWeights.parse("d,g,l,kl=0.5")
    assert weights.as_dict() == {"d": 1.0, "g": 1.0, "l": 1.0, "kl": 0.5}
    assert weights.label() == "d,g,l,kl=0.5"
    assert LossWeights.parse("d,g,l").as_dict() == {"d": 1.0, "g": 1.0, "l": 1.0}  # old manifests stay the same
    with pytest.raises(ConfigError, match="switch every debiasing term off"):
        LossWeights.parse("kl=1")
    with pytest.raises(ConfigError, match="unknown loss 'x'"):
        LossWeights.parse("d,x")
