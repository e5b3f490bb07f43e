"""Sampling a local batch with one random stream per row, so that a row's draw depends only on its own seed.

transformers samples a batch with one `torch.multinomial` over the whole batch from the global generator: row r's
draw then depends on the rows beside it and on where the batch starts (a resume, a different `--batch-size`).
`RowSampler` draws each row with the Gumbel-max trick from its own `torch.Generator`, seeded with the row's seed:
token = argmax(log p - log E) with E ~ Exp(1) per token (an exponential race), which picks token t with
probability p(t) exactly. It then leaves only the chosen token possible, so greedy decoding takes it.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

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


def race(uniform: torch.Tensor) -> torch.Tensor:
    """Each uniform's Gumbel value -log E, with E = -log(1 - U) ~ Exp(1) its token's arrival time (float64)."""
    return -(-torch.log1p(-uniform)).clamp_min(1e-300).log()


def draw(logits: torch.Tensor, generators: Sequence[torch.Generator], config: GenerationConfig) -> torch.Tensor:
    """One token id per row (B,), row r drawn from `generators[r]` alone at the config's temperature, top-p, top-k:
    argmax over tokens of log p + race(U), U one uniform per token from the row's generator.

    The race needs two logarithms of every token's uniform; only tokens that can win are raced. The token with the
    row's smallest uniform has the largest race value R, and the larger of the exact values of that token and of
    the most likely one is a value B the winner reaches, so only tokens with log p >= B - R can win (about 3,150 of
    49,152 a row for the embedded model's letters at temperature 1; fewer where a model is surer). Their values come
    from the same float64 operations as the full race's, so the same token wins (tests/test_sampling.py races every
    token beside it).
    """
    log_p = log_probs(logits, config)
    uniform = uniforms(generators, logits.shape[-1]).to(log_p.device)
    smallest, at = uniform.min(-1)
    known = torch.stack([log_p.argmax(-1), at], 1)
    reached = (log_p.gather(1, known).double() + race(uniform.gather(1, known))).amax(-1)
    # A margin far above the logarithms' rounding, rounded down to float32 so the comparison keeps every contender.
    floor = (reached - race(smallest) - 1e-9).float()
    floor = torch.nextafter(floor, torch.full_like(floor, -torch.inf))
    rows, tokens = (log_p >= floor[:, None]).nonzero().unbind(1)
    value = log_p[rows, tokens].double() + race(uniform[rows, tokens])
    best = torch.full_like(reached, -torch.inf).scatter_reduce(0, rows, value, "amax")
    won = value == best[rows]
    # Every row raced its most likely token (log p >= B - R for it), unless its logits are not numbers: then it keeps
    # that token.
    return known[:, 0].scatter_reduce(0, rows[won], tokens[won], "amin", include_self=False)


def race_every_token(
    logits: torch.Tensor, generators: Sequence[torch.Generator], config: GenerationConfig
) -> torch.Tensor:
    """`draw` by its definition, every token raced: the reference that tests/test_sampling.py and
    benchmarks/sampled_draw.py hold `draw` to."""
    log_p = log_probs(logits, config)
    return torch.argmax(log_p.double() + race(uniforms(generators, logits.shape[-1]).to(log_p.device)), -1)


def log_probs(logits: torch.Tensor, config: GenerationConfig) -> torch.Tensor:
    """The rows' float32 log-probabilities (B, V) at the config's temperature, top-p and top-k (at temperature 1
    the logits as they are: dividing by 1.0 changes no bit and would cost a pass over them)."""
    scaled = logits.float() if config.temperature == 1.0 else logits.float() / config.temperature
    return nucleus(scaled, config.top_p, config.top_k).log_softmax(-1)


def uniforms(generators: Sequence[torch.Generator], width: int) -> torch.Tensor:
    """`width` float64 uniforms from each generator, one row each (B, width), on the generators' device.

    A generator fills its row alone (torch draws one stream on one thread), so on CPU runs of rows are filled side
    by side on as many threads as torch uses (`fillers`); each row is its own generator's stream either way."""
    out = torch.empty((len(generators), width), dtype=torch.float64, device=generators[0].device)
    threads = min(torch.get_num_threads(), len(generators)) if out.device.type == "cpu" else 1
    inference = torch.is_inference_mode_enabled()
    if threads <= 1:
        fill(out, generators, inference)
        return out
    bounds = [len(generators) * part // threads for part in range(threads + 1)]
    runs = [(out[a:b], generators[a:b], inference) for a, b in itertools.pairwise(bounds)]
    list(fillers(threads).map(lambda run: fill(*run), runs))
    return out


def fill(rows: torch.Tensor, generators: Sequence[torch.Generator], inference: bool) -> None:
    """Each row of `rows` with uniforms from its generator, in inference mode when the caller is in it (the mode is
    a thread's own, and a tensor made in it is written only in it)."""
    with torch.inference_mode(inference):
        for row, generator in zip(rows, generators, strict=True):
            torch.rand(row.shape, generator=generator, dtype=torch.float64, device=row.device, out=row)


@functools.cache
def fillers(threads: int) -> ThreadPoolExecutor:
    """The threads that fill uniforms side by side, `threads` of them (made once for each number)."""
    return ThreadPoolExecutor(threads, thread_name_prefix="fairprobe-uniforms")


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
