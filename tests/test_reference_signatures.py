"""docs/reference.md reads on GitHub too (issue 33, item 5): a plain list of the API's signatures, each with its
docstring's first line, checked against the functions themselves (the `:::` blocks render on the docs site only)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fairprobe.api

API_FUNCTIONS = ("run", "compare", "sweep", "tune", "score", "check", "load", "report")
REFERENCE = Path(__file__).parents[1] / "docs" / "reference.md"


def plain_signature(name: str, function: Callable[..., Any]) -> str:
    """`run(model='smollm2-135m-instruct', *, suite='paper', ...)`: names and defaults, no annotations."""
    parts, starred = [], False
    for p in inspect.signature(function).parameters.values():
        if p.kind == p.KEYWORD_ONLY and not starred:
            parts.append("*")
            starred = True
        parts.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return f"{name}({', '.join(parts)})"


def first_line(function: Callable[..., Any]) -> str:
    """A function's docstring summary (its first paragraph) on one line."""
    return " ".join(inspect.getdoc(function).split("\n\n")[0].split())  # type: ignore[union-attr]


def test_the_reference_lists_every_function_with_its_signature_in_plain_markdown() -> None:
    page = REFERENCE.read_text()
    plain = page.split(":::", 1)[0]  # what GitHub shows readably: everything before the docs site's blocks
    for name in API_FUNCTIONS:
        function = getattr(fairprobe.api, name)
        line = f"- `fairprobe.{plain_signature(name, function)}`: {first_line(function)}"
        assert line in plain.splitlines(), f"docs/reference.md lacks or misstates {name}: {line}"
    assert set(API_FUNCTIONS) == {n for n in fairprobe.api.__all__ if inspect.isfunction(getattr(fairprobe.api, n))}
