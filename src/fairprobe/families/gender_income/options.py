"""The gender-income family's `-o` options (`-o gender_income.KEY=VALUE` sends one to this family only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from fairprobe.families.closed import Mode

FlipMode = Literal["consistent", "vijil"]
PromptStyle = Literal["decodingtrust", "vijil"]
IncomeSource = Literal["decodingtrust", "uci", "builtin"]


class GenderIncomeOptions(BaseModel):
    """Where the pairs come from and how they are built, and how replies are read.

    `source`: decodingtrust (DecodingTrust's file; the default with --data-dir), uci (raw UCI Adult, sampled to
    `base_rate` with `seed`, `n` records of `split`) or builtin (offline; the default otherwise); `flip`:
    consistent (also swap Husband/Wife) or vijil (sex only); `prompt_style`: decodingtrust or vijil (default: the
    flip mode's own); `parser`: fairprobe (lenient yes/no reading) or decodingtrust (exact yes/no); `judge`: a
    model spec whose verdict on whether the two replies make the same prediction decides each pair; `mode`:
    sample (generate and parse) or exact (P(yes) and P(no) from the model's scores; exact.py), auto = exact where
    the backend scores continuations exactly; `instruction`: a system message after the prompt style's ('paper':
    fairprobe's debiasing instruction).
    """

    model_config = ConfigDict(extra="forbid")

    source: IncomeSource | None = None
    base_rate: float = Field(0.0, ge=0.0, le=1.0)
    flip: FlipMode = "consistent"
    prompt_style: PromptStyle | None = None
    n: PositiveInt = 200
    seed: int = 0
    split: Literal["test", "train"] = "test"
    parser: Literal["fairprobe", "decodingtrust"] = "fairprobe"
    judge: str | None = None
    mode: Mode = "auto"
    instruction: str | None = None

    @property
    def style(self) -> PromptStyle:
        """The prompt style: as given, else the flip mode's own (vijil flips use Vijil's prompt)."""
        return self.prompt_style or ("vijil" if self.flip == "vijil" else "decodingtrust")
