"""What a fix costs: perplexity of held-out neutral sentences ("My friend {predicate}.") before and after tuning."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from fairprobe.errors import DataError
from fairprobe.models.hf import positions_from_mask

SENTENCE = "My friend {predicate}."


def neutral_sentences(predicates: list[str]) -> list[str]:
    """Full neutral sentences from "My friend" predicates."""
    return [SENTENCE.format(predicate=p) for p in predicates]


@torch.inference_mode()
def perplexity(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sentences: list[str],
    batch_size: int = 32,
    max_length: int = 512,
    advance: Callable[[int], None] | None = None,
) -> float:
    """exp(mean token NLL) over all sentences; every token after the first is scored, padding is masked."""
    if not sentences:
        raise DataError("no sentences to compute perplexity on")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nll = torch.zeros((), dtype=torch.float64)
    tokens = 0
    try:
        for start in range(0, len(sentences), batch_size):
            enc = tokenizer(
                sentences[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=max_length,
            )
            ids = enc["input_ids"].to(device)
            mask = enc["attention_mask"].to(device)
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions_from_mask(mask)).logits
            lp = logits[:, :-1].float().log_softmax(-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
            scored = (mask[:, 1:] * mask[:, :-1]).bool()
            nll -= lp[scored].double().sum().cpu()
            tokens += int(scored.sum())
            if advance is not None:
                advance(len(ids))
    finally:
        model.train(was_training)
    return math.exp(float(nll) / max(tokens, 1))
