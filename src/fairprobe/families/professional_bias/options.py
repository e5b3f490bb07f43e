"""The professional-bias family's `-o` options (`-o professional_bias.KEY=VALUE` sends one to this family only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class ProfessionalBiasOptions(BaseModel):
    """`source`: builtin (fairprobe's 15 frames), vijil (Vijil's JSONL, needs --data-dir) or winobias;
    `split`: WinoBias dev or test; `instruction`: a system message before every question ('paper': fairprobe's
    debiasing instruction)."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["builtin", "vijil", "winobias"] = "builtin"
    split: Literal["dev", "test"] = "test"
    instruction: str | None = None
