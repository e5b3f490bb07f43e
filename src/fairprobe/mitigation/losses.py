"""Debias Tuning losses (design.md, paper Section 5.3) on next-word probabilities of shape (B, N, 2).

Column 0 of the last axis is the female word of a pair, column 1 the male word. Every loss is a sum
over the batch, as the paper states it, and is exact and differentiable: the probabilities come from
`fairprobe.models.hf.word_log_probs(...).exp()` (chain rule for words of several tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fairprobe.errors import ConfigError
from fairprobe.families.paper.metrics import ADD_EPSILON

LOSS_NAMES = ("d", "g", "l")


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


_LOSSES = {"d": loss_d, "g": loss_g, "l": loss_l}


@dataclass(frozen=True)
class LossWeights:
    """Weight of each loss term; 0 switches a term off (the paper's ablations drop one at a time)."""

    d: float = 1.0
    g: float = 1.0
    l: float = 1.0  # noqa: E741  (the paper's name)

    @classmethod
    def parse(cls, text: str) -> LossWeights:
        """'d,g,l' (each weight 1), 'g,l' (drop L_d) or 'd=1,g=10,l=1'; unknown names are a ConfigError."""
        weights = dict.fromkeys(LOSS_NAMES, 0.0)
        for item in (t.strip() for t in text.split(",")):
            if not item:
                continue
            name, sep, value = item.partition("=")
            name = name.strip().lower().removeprefix("l_")
            if name not in weights:
                raise ConfigError(f"unknown loss {item!r} in {text!r}: use d, g and l (e.g. 'd,g,l' or 'g=2,l=1')")
            try:
                weights[name] = float(value) if sep else 1.0
            except ValueError:
                raise ConfigError(f"loss weight {item!r} in {text!r} is not a number") from None
            if weights[name] < 0:
                raise ConfigError(f"loss weight {item!r} in {text!r} must be 0 or more")
        if not any(weights.values()):
            raise ConfigError(f"losses {text!r} switch every term off: keep at least one of d, g, l")
        return cls(**weights)

    def as_dict(self) -> dict[str, float]:
        """{'d': w, 'g': w, 'l': w} for manifests."""
        return {"d": self.d, "g": self.g, "l": self.l}


def debias_loss(probs: torch.Tensor, weights: LossWeights) -> tuple[torch.Tensor, dict[str, float]]:
    """L = w_d L_d + w_g L_g + w_l L_l over the batch, and each term's value (for logs)."""
    parts = {name: fn(probs) for name, fn in _LOSSES.items()}
    total = sum(w * parts[name] for name, w in weights.as_dict().items() if w)
    return total, {name: float(v.detach()) for name, v in parts.items()}  # type: ignore[return-value]
