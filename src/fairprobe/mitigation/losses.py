"""Debias Tuning losses (design.md, paper Section 5.3) on next-word probabilities of shape (B, N, 2).

Column 0 of the last axis is the female word of a pair, column 1 the male word. Every loss is a sum
over the batch, as the paper states it, and is exact and differentiable: the probabilities come from
the backend's `continuation_log_probs(...)` of the pair words, reshaped (B, N, 2) and exponentiated (chain rule for
words of several tokens: the numbers `loglikelihood` gives).

Beyond the paper, `loss_kl` keeps the tuned model close to the frozen base model on everything but the
attribute words (KL(base || tuned) of the renormalised non-attribute next-token distributions over the
first continuation positions), so the fix does not buy its GAS drop by leaving the subject.
"""

from __future__ import annotations

import torch

from fairprobe.families.paper.metrics import ADD_EPSILON
from fairprobe.mitigation.loss_weights import LossWeights


def loss_d(probs: torch.Tensor, eps: float = ADD_EPSILON) -> torch.Tensor:
    """L_d: the ADD expression summed over the batch, without the 1/(2|X|) factor.

    sum_x sum_i (P_f+e) ln(2(P_f+e)/(P_f+P_m+2e)) + (P_m+e) ln(2(P_m+e)/(P_f+P_m+2e)).
    """
    p = probs.double() + eps
    both = p.sum(-1, keepdim=True)
    return (p * torch.log(2 * p / both)).sum()


def loss_g(probs: torch.Tensor) -> torch.Tensor:
    """L_g: the summed probability of every gendered next word; lowering it pushes them down."""
    return probs.double().sum()


def loss_l(probs: torch.Tensor) -> torch.Tensor:
    """L_l: the GLD expression |F - M| / (F + M) per prompt, summed over the batch (0 where F + M = 0)."""
    sums = probs.double().sum(-2)
    f, m = sums[..., 0], sums[..., 1]
    total = f + m
    safe = torch.where(total > 0, total, torch.ones_like(total))
    return torch.where(total > 0, (f - m).abs() / safe, torch.zeros_like(total)).sum()


def loss_kl(base_lp: torch.Tensor, tuned_lp: torch.Tensor, excluded: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """L_kl: KL(base || tuned) of the next-token distributions without the attribute tokens, renormalised.

    `base_lp` and `tuned_lp` are log-probabilities (B, K, V) over K continuation positions, `excluded` the
    attribute words' first tokens, `valid` (B, K) the positions before the continuation ended. Mean over
    each prompt's valid positions, summed over the batch like the paper's losses.
    """
    keep = torch.ones(base_lp.shape[-1], dtype=torch.bool, device=base_lp.device)
    keep[excluded.to(base_lp.device)] = False
    b = base_lp[..., keep].double()
    t = tuned_lp[..., keep].double()
    b = b - torch.logsumexp(b, -1, keepdim=True)
    t = t - torch.logsumexp(t, -1, keepdim=True)
    per_position = (b.exp() * (b - t)).sum(-1)
    weights = valid.to(per_position.dtype)
    return ((per_position * weights).sum(-1) / weights.sum(-1).clamp(min=1.0)).sum()


_LOSSES = {"d": loss_d, "g": loss_g, "l": loss_l}


def debias_loss(
    probs: torch.Tensor, weights: LossWeights, kl: torch.Tensor | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """L = w_d L_d + w_g L_g + w_l L_l (+ w_kl L_kl when `kl` is given) over the batch, and each term's value."""
    parts = {name: fn(probs) for name, fn in _LOSSES.items()}
    if kl is not None:
        parts["kl"] = kl
    total = sum(w * parts[name] for name, w in weights.as_dict().items() if w and name in parts)
    return total, {name: float(v.detach()) for name, v in parts.items()}  # type: ignore[return-value]
