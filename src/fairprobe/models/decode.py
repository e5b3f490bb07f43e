"""The local engine's decode loop: after `transformers`' own prompt pass and first token, the later tokens come
from a loop that keeps each layer's keys and values in one buffer reserved for the whole reply and lets finished
rows leave the batch.

`transformers.generate` grows every layer's keys and values by concatenation at each step (a copy of the whole
cache per layer per step) and keeps computing rows that have ended. Here the prompt's cache is copied once into
buffers as long as prompt + reply, each step writes its position in place, and a row that has produced its end
of sequence is dropped from the batch (and from the buffers) before the next step. Each step is the same call
`generate` makes (the last token, its position, the grown attention mask, the cache), so greedy replies are
`generate`'s; a sampled row draws from its own generator once per step it is in the batch, as it did inside
`generate` (models/sampling.py), so its reply is unchanged too.

This module imports only torch and transformers besides fairprobe's sampling and the engine's `Shortlist`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import torch
from transformers import Cache

from fairprobe.models.base import GenerationConfig
from fairprobe.models.continuations import cache_keyword
from fairprobe.models.engine import Shortlist
from fairprobe.models.sampling import draw

Logits = torch.Tensor | Shortlist  # a step's next-token logits (B, V), or a greedy step's shortlist of them
Choose = Callable[[Logits, torch.Tensor], torch.Tensor]  # (logits, active rows (B,)) -> tokens (B,)
# (tokens (B,), their positions (B,), the attention mask so far (B, L), the cache) -> next-token logits
Step = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Cache], Logits]


def compaction(going: torch.Tensor) -> torch.Tensor:
    """The rows that stay (`going`, a (B,) mask; n of them) in their new order: a row among the first n keeps its
    place and each row beyond them takes the place of one that left, so a reserved cache moves only those rows
    (a copy of every row's buffers at each end of sequence is most of the cost of rows leaving on long replies)."""
    kept = int(going.sum())
    order = torch.arange(kept, device=going.device)
    order[(~going[:kept]).nonzero().squeeze(-1)] = going[kept:].nonzero().squeeze(-1) + kept
    return order


def chooser(config: GenerationConfig, generators: Sequence[torch.Generator] | None) -> Choose:
    """How a step picks its tokens: the argmax (greedy, of full logits or a shortlist), or each active row's draw
    from its own generator (sampled steps give full logits)."""
    if config.greedy or generators is None:
        return lambda logits, active: logits.argmax(-1)

    def drawn(logits: Logits, active: torch.Tensor) -> torch.Tensor:
        assert isinstance(logits, torch.Tensor)
        return draw(logits, [generators[int(r)] for r in active.tolist()], config).to(logits.device)

    return drawn


def first_step(
    model: Any, enc: dict[str, torch.Tensor], processors: Any, chunk: int | None, cache: Cache | None = None
) -> tuple[torch.Tensor, Cache]:
    """`transformers.generate`'s prompt pass and first token (B,) with the `processors`, and the prompt's cache (the
    empty `cache` given, filled, when there is one: a `ReservedPool`'s block)."""
    generated = model.generate(
        **enc,
        max_new_tokens=1,
        logits_processor=processors,
        return_dict_in_generate=True,
        do_sample=False,
        **({"prefill_chunk_size": chunk} if chunk else {}),
        **({} if cache is None else {cache_keyword(model): cache}),
    )
    cache = getattr(generated, "cache", None)
    return generated.sequences[:, -1], cache if cache is not None else generated.past_key_values


def scoring_copy(cache: Cache) -> Cache:
    """A cache object of its own over the same key and value tensors (scoring passes reshape theirs)."""
    other = copy.copy(cache)
    other.layers = [copy.copy(layer) for layer in cache.layers]  # type: ignore[attr-defined]
    return other


def model_step(model: Any) -> Step:
    """The model's own forward as a decode step: the call `generate` makes at each step after the first."""
    name = cache_keyword(model)

    def step(tokens: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, cache: Cache) -> torch.Tensor:
        return model(
            input_ids=tokens[:, None],
            attention_mask=mask,
            position_ids=positions[:, None],
            use_cache=True,
            **{name: cache},
        ).logits[:, -1]

    return step


def continue_decoding(
    step: Step,
    cache: Cache,
    first: torch.Tensor,
    mask: torch.Tensor,
    limits: torch.Tensor,
    stop: tuple[Sequence[int], int],
    choose: Choose,
) -> torch.Tensor:
    """The reply tokens (B, most of `limits`) after `first`, each row padded after its end of sequence or its limit.

    `cache` holds the prompts' keys and values with room for the replies (`reserved.repeat_rows` or a
    `ReservedPool`), `mask` (B, L) their attention mask, `limits` (B,) each row's most new tokens and `stop` (end-of-
    sequence ids, pad id). Step s feeds the token of step s - 1 to `step` at its position with the mask grown by one,
    as `generate` does; a row that has ended, or made its limit, leaves the batch before the next step.
    """
    batch, prompt_len, device = first.shape[0], mask.shape[1], first.device
    most = int(limits.max())
    eos, pad = torch.as_tensor(list(stop[0]), device=device), stop[1]
    out = torch.full((batch, most), pad, dtype=torch.long, device=device)
    out[:, 0] = first
    masks = torch.cat([mask, mask.new_ones((batch, most))], 1)
    positions, active, last = mask.long().sum(-1), torch.arange(batch, device=device), first
    limits = limits.to(device)
    for index in range(1, most):
        going = ~torch.isin(last, eos) & (limits > index)
        if not bool(going.all()):
            if not bool(going.any()):
                break
            keep = compaction(going)
            cache.batch_select_indices(keep)
            active, last, positions, masks, limits = (
                active[keep],
                last[keep],
                positions[keep],
                masks[keep],
                limits[keep],
            )
        logits = step(last, positions + index - 1, masks[:, : prompt_len + index], cache)
        last = choose(logits, active)
        out[active, index] = last
    return out
