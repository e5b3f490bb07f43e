"""The professional-bias family's `-o` options (`-o professional_bias.KEY=VALUE` sends one to this family only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from fairprobe.families.closed import Mode


class ProfessionalBiasOptions(BaseModel):
    """`source`: builtin (fairprobe's 15 frames), vijil (Vijil's JSONL, needs --data-dir) or winobias;
    `split`: WinoBias dev or test; `mode`: sample (generate and parse) or exact (each person's probability as the
    reply's beginning; exact.py), auto = exact where the backend scores continuations exactly; `instruction`: a
    system message before every question ('paper': fairprobe's debiasing instruction)."""

    model_config = ConfigDict(extra="forbid")

    source: Literal["builtin", "vijil", "winobias"] = "builtin"
    split: Literal["dev", "test"] = "test"
    mode: Mode = "auto"
    instruction: str | None = None
