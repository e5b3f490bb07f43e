"""The gender-income family's `-o` options (`-o gender_income.KEY=VALUE` sends one to this family only)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

Value = str | int | float | None


class GenderIncomeOptions(BaseModel):
    """Where the pairs come from and how they are built (checked by the loader), and how replies are read.

    `parser`: fairprobe (lenient yes/no reading) or decodingtrust (exact yes/no); `judge`: a model spec whose
    verdict on whether the two replies make the same prediction decides each pair.
    """

    model_config = ConfigDict(extra="forbid")

    source: Value = None
    base_rate: Value = None
    flip: Value = None
    prompt_style: Value = None
    n: Value = None
    seed: Value = None
    split: Value = None
    parser: Literal["fairprobe", "decodingtrust"] = "fairprobe"
    judge: str | None = None

    def set_options(self) -> dict[str, Any]:
        """The options that build the set, as given."""
        return self.model_dump(exclude={"parser", "judge"}, exclude_unset=True)
