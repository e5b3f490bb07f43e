"""Sampling a local batch with one random stream per row, so that a row's draw depends only on its own seed.

transformers samples a batch with one `torch.multinomial` over the whole batch from the global generator: row r's
draw then depends on the rows beside it and on where the batch starts (a resume, a different `--batch-size`).
`RowSampler` draws each row with the Gumbel-max trick from its own `torch.Generator`, seeded with the row's seed:
token = argmax(log p - log E) with E ~ Exp(1) per token (an exponential race), which picks token t with
probability p(t) exactly. It then leaves only the chosen token possible, so greedy decoding takes it.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor

from fairprobe.models.base import GenerationConfig


def nucleus(logits: torch.Tensor, top_p: float, top_k: int) -> torch.Tensor:
    """The logits (B, V) with the tokens outside the top k and outside the top-p nucleus set to -inf (the smallest
    set of most likely tokens whose probability reaches top_p; the most likely token always stays)."""
    out = logits
    if top_k and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        out = out.masked_fill(out < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = torch.sort(out, dim=-1, descending=True)
        probs = ordered.softmax(-1)
        above = probs.cumsum(-1) - probs  # the probability of the tokens more likely than each one
        drop = torch.zeros_like(above, dtype=torch.bool).scatter(-1, order, above >= top_p)
        out = out.masked_fill(drop, float("-inf"))
    return out


def draw(logits: torch.Tensor, generators: Sequence[torch.Generator], config: GenerationConfig) -> torch.Tensor:
    """One token id per row (B,), row r drawn from `generators[r]` alone at the config's temperature, top-p, top-k."""
    scaled = nucleus(logits.float() / config.temperature, config.top_p, config.top_k)
    log_p = scaled.log_softmax(-1)
    noise = torch.stack(
        [torch.rand(logits.shape[-1], generator=g, device=g.device, dtype=torch.float64) for g in generators]
    )
    waits = -torch.log1p(-noise)  # E = -log(1 - U) ~ Exp(1): each token's arrival time, scaled by 1 / p below
    race = -waits.clamp_min(1e-300).log().to(log_p.device)
    return torch.argmax(log_p.double() + race, dim=-1)


def generators_for(seeds: Sequence[int], device: torch.device) -> list[torch.Generator]:
    """One generator per row, seeded with the row's seed."""
    return [torch.Generator(device=device).manual_seed(seed) for seed in seeds]


class RowSampler(LogitsProcessor):
    """Samples each row from its own generator, then masks every other token (run with greedy decoding)."""

    def __init__(self, seeds: Sequence[int], config: GenerationConfig, device: torch.device) -> None:
        self.generators = generators_for(seeds, device)
        self.config = config

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        chosen = draw(scores, self.generators, self.config).to(scores.device)
        only = torch.full_like(scores, float("-inf"))
        return only.scatter(-1, chosen.unsqueeze(-1), 0.0)
