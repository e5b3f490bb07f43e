"""How much each Debias Tuning loss counts (`--losses`): parsed and checked without torch, so a bad `--losses` or
any other tuning option is refused before the second that importing torch takes (losses.py computes the terms)."""

from __future__ import annotations

from dataclasses import dataclass

from fairprobe.errors import ConfigError
from fairprobe.io import parse_pairs

LOSS_NAMES = ("d", "g", "l", "kl")


@dataclass(frozen=True)
class LossWeights:
    """Weight of each loss term; 0 switches a term off (the paper's ablations drop one at a time).

    `kl` (default off) weighs the KL term against the frozen base model, which is not one of the paper's.
    """

    d: float = 1.0
    g: float = 1.0
    l: float = 1.0  # noqa: E741  (the paper's name)
    kl: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LossWeights:
        """'d,g,l' (each weight 1), 'g,l' (drop L_d) or 'd=1,g=10,l=1'; unknown names are a ConfigError."""
        weights = dict.fromkeys(LOSS_NAMES, 0.0)
        items = [t if "=" in t else f"{t}=1" for t in (t.strip() for t in text.split(",")) if t]
        for key, value in parse_pairs(items, "a loss", "NAME or NAME=WEIGHT").items():
            name, item = key.lower().removeprefix("l_"), key if value == "1" else f"{key}={value}"
            if name not in weights:
                raise ConfigError(
                    f"unknown loss {item!r} in {text!r}: use d, g, l and kl (e.g. 'd,g,l', 'g=2,l=1' or 'd,g,l,kl=0.5')"
                )
            try:
                weights[name] = float(value)
            except ValueError:
                raise ConfigError(f"loss weight {item!r} in {text!r} is not a number") from None
            if weights[name] < 0:
                raise ConfigError(f"loss weight {item!r} in {text!r} must be 0 or more")
        if not any(weights[name] for name in ("d", "g", "l")):
            raise ConfigError(f"losses {text!r} switch every debiasing term off: keep at least one of d, g, l")
        return cls(**weights)

    def as_dict(self) -> dict[str, float]:
        """{'d': w, 'g': w, 'l': w} for manifests, with 'kl' only when the KL term is on (older adapters match)."""
        return {"d": self.d, "g": self.g, "l": self.l, **({"kl": self.kl} if self.kl else {})}

    def label(self) -> str:
        """The `--losses` text of these weights ('d,g,l', 'g,l', 'd,g,l,kl=0.5')."""
        return ",".join(k if v == 1.0 and k != "kl" else f"{k}={v:g}" for k, v in self.as_dict().items() if v)
