"""log P(continuation | prompt) on a local model, batched, with the prompt's key/value cache shared by its continuations.

Each continuation is tokenized on its own (no special tokens, no space added) and its tokens follow the prompt's.
The first token's log-probability is read from the distribution right after the prompt (the same one the first
generation step uses); a continuation of several tokens adds its later tokens' conditional log-probabilities
(chain rule), fed after the prompt's cached keys and values, so the prompt is never run twice. Everything is one
torch graph, so Debias Tuning trains on exactly the numbers the metrics read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from transformers import Cache, DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from fairprobe.errors import ModelError
from fairprobe.models.base import ContinuationScore, Scores


# Continuations of several tokens scored in one tail pass (each repeats the prompts' key/value cache once).
TAIL_ROWS = 4


@dataclass(frozen=True)
class TailGroup:
    """The continuations of one tail width (tokens after the first), fed after the prompt in one pass: their
    columns, `feed` (M, W) the tokens to feed (all but the last), `targets` (M, W) the tokens they predict."""

    columns: tuple[int, ...]
    feed: torch.Tensor
    targets: torch.Tensor


@dataclass(frozen=True)
class ContinuationTable:
    """Continuations tokenized for one tokenizer.

    `ids` holds each continuation's tokens and `first` (C,) their first tokens; `tails` groups the continuations of
    several tokens by the number of tokens after the first, TAIL_ROWS a pass (so a tail pass has no padding, a
    continuation's numbers do not depend on longer ones asked beside it, and memory stays that of a few rows).
    """

    ids: tuple[tuple[int, ...], ...]
    first: torch.Tensor
    tails: tuple[TailGroup, ...]

    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase, continuations: tuple[str, ...]) -> ContinuationTable:
        """Tokenize every continuation exactly as given, without special tokens."""
        ids = []
        for text in continuations:
            tokens = tuple(tokenizer.encode(text, add_special_tokens=False))
            if not tokens:
                raise ModelError(f"continuation {text!r} tokenizes to nothing: a scored continuation needs a token")
            ids.append(tokens)
        widths = sorted({len(t) - 1 for t in ids if len(t) > 1})
        tails = []
        for width in widths:
            members = [k for k, t in enumerate(ids) if len(t) - 1 == width]
            for start in range(0, len(members), TAIL_ROWS):  # a few continuations a pass: the prompt cache is
                chunk = members[start : start + TAIL_ROWS]  # repeated once per continuation of the pass
                feed = torch.tensor([ids[k][:-1] for k in chunk], dtype=torch.long)
                targets = torch.tensor([ids[k][1:] for k in chunk], dtype=torch.long)
                tails.append(TailGroup(tuple(chunk), feed, targets))
        first = torch.tensor([t[0] for t in ids], dtype=torch.long)
        return cls(ids=tuple(ids), first=first, tails=tuple(tails))


@dataclass
class TableScores:
    """Log-probabilities (B, C) of every continuation after every prompt and, when asked, whether each is greedy."""

    log_probs: torch.Tensor
    greedy: torch.Tensor | None = None


def positions_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids for left-padded rows: 0 at each row's first real token."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def score_continuations(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    table: ContinuationTable,
    first_log_probs: torch.Tensor | None = None,
    prompt_cache: Cache | None = None,
    greedy: bool = False,
) -> TableScores:
    """log P(continuation | prompt), shape (B, C), for left-padded prompts; exact and differentiable.

    `first_log_probs` (B, V) together with `prompt_cache` (the key/value cache of exactly the prompts, e.g. cut from
    generation) skip the prompt pass; the cache is used up. With `greedy`, also whether each continuation is the
    greedy one (every token the argmax).
    """
    if first_log_probs is None or (table.tails and prompt_cache is None):
        out = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=positions_from_mask(attention_mask),
            logits_to_keep=1,
            use_cache=bool(table.tails),
        )
        first_log_probs = out.logits[:, -1, :].float().log_softmax(-1)
        prompt_cache = out.past_key_values
    device = first_log_probs.device
    first = table.first.to(device)
    lp = first_log_probs[:, first]
    is_greedy = (first_log_probs.argmax(-1, keepdim=True) == first) if greedy else None
    if not table.tails:
        return TableScores(lp, is_greedy)
    # Each tail pass feeds its rows after the prompt's keys and values: a fresh cache of the same tensors each.
    layers = [(layer.keys, layer.values) for layer in prompt_cache.layers]  # type: ignore[union-attr]
    for k, group in enumerate(table.tails):
        cache = prompt_cache if k == 0 else DynamicCache(ddp_cache_data=layers)
        columns = torch.tensor(group.columns, device=device)
        tail, tail_greedy = tail_log_probs(model, attention_mask, group, cache)
        lp[:, columns] = lp[:, columns] + tail
        if is_greedy is not None:
            is_greedy[:, columns] &= tail_greedy
    return TableScores(lp, is_greedy)


def tail_log_probs(
    model: PreTrainedModel, attention_mask: torch.Tensor, group: TailGroup, prompt_cache: Cache
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each continuation of the group, the log-probability (B, M) of its tokens after the first, given the
    prompt, and whether each of those tokens is the argmax.

    One row per (prompt, continuation) feeds only the continuation's tokens after the prompt's cached keys and
    values (repeated in place per continuation), so the prompt is never run twice.
    """
    batch = attention_mask.shape[0]
    n_rows, width = group.feed.shape
    device = attention_mask.device
    prompt_cache.batch_repeat_interleave(n_rows)
    prompt_mask = attention_mask.repeat_interleave(n_rows, 0)
    targets = group.targets.to(device).repeat(batch, 1)
    out = model(
        input_ids=group.feed.to(device).repeat(batch, 1),
        attention_mask=torch.cat([prompt_mask, torch.ones_like(targets)], dim=1),
        position_ids=prompt_mask.sum(-1, keepdim=True) + torch.arange(width, device=device),
        past_key_values=prompt_cache,
        use_cache=True,
    )
    picked = out.logits.float().log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    argmax = out.logits.argmax(-1) == targets
    return picked.sum(-1).reshape(batch, n_rows), argmax.all(-1).reshape(batch, n_rows)


def prompt_part(cache: Cache | None, prompt_len: int) -> Cache | None:
    """A generation cache cut back to the prompt's keys and values; None where that is not exact.

    Only a DynamicCache whose every layer still holds every position can be cut (a sliding-window
    layer past its window has dropped the start of the prompt).
    """
    if not isinstance(cache, DynamicCache) or not cache.layers:
        return None
    lengths = {int(getattr(layer, "keys", torch.empty(0)).shape[-2]) for layer in cache.layers}
    if len(lengths) != 1 or lengths != {cache.get_seq_length()}:
        return None
    (length,) = lengths
    if length < prompt_len:
        return None
    cache.crop(prompt_len - length)
    return cache


def as_scores(result: TableScores, table: ContinuationTable) -> list[Scores]:
    """One Scores per prompt. Each logprob is the log of the float32 probability the model's softmax gives, so
    exp(logprob) is that probability to float64 rounding (an underflowed probability keeps its float32 logprob)."""
    probs = result.log_probs.exp().cpu().numpy().astype("float64")
    raw = result.log_probs.detach().cpu().numpy().astype("float64")
    greedy = None if result.greedy is None else result.greedy.cpu().numpy()
    lengths = [len(t) for t in table.ids]
    out = []
    for row in range(probs.shape[0]):
        scores = tuple(
            ContinuationScore(
                logprob=math.log(p) if p > 0 else float(raw[row, k]),
                tokens=lengths[k],
                greedy=None if greedy is None else bool(greedy[row, k]),
            )
            for k, p in enumerate(probs[row])
        )
        out.append(Scores(scores))
    return out
