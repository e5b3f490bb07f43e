"""The documentation: MkDocs builds it strictly (no broken link or anchor, no page outside the navigation) and
the README's first screen points only at pages that exist."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    # Offline like the report: nothing is loaded from another host (a plain link to one is fine).
    loads = re.compile(
        r"""<(?:script|img|iframe)[^>]+src=["'](?:https?:)?//|<link[^>]+href=["'](?:https?:)?//|"""
        r"""@import\s+(?:url\()?["']?(?:https?:)?//|url\(["']?(?:https?:)?//"""
    )
    remote = [
        str(f.relative_to(site))
        for f in site.rglob("*")
        if f.suffix in (".html", ".css", ".js") and loads.search(f.read_text(encoding="utf-8", errors="replace"))
    ]
    assert remote == []
    # The API reference is generated from the docstrings: every public function with its arguments.
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    for name in ("run", "compare", "sweep", "tune", "score", "check", "load"):
        assert f'id="fairprobe.api.{name}"' in reference, name
    assert "prompts per set, drawn with a fixed seed" in reference  # run()'s `limit`, from its docstring
    assert (site / "python-api.ipynb").is_file()
    metrics = (site / "metrics" / "index.html").read_text(encoding="utf-8")
    # The formulas live in the repository, not in a file beside it.
    for formula in ("GLD           = mean over x of |F(x) - M(x)| / (F(x) + M(x))", "Delta  = |GAS(F) - GAS(M)|"):
        assert formula in metrics


def test_nav_lists_every_page_including_the_other_developers_pages() -> None:
    nav = re.findall(r"^\s+- [^:]+: (\S+\.md)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert sorted(nav) == pages
    assert {"vllm.md", "failures.md", "metrics.md"} <= set(nav)


def test_the_docs_home_lists_every_page() -> None:
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([a-z0-9-]+\.md)", home))
    assert linked == {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}


def test_readme_starts_with_five_minutes_and_links_only_existing_pages() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first_screen = readme[: readme.index("\n## ", readme.index("## The first five minutes") + 5)]
    for step in ("make run", "report.html", "--model hf:", "--model openai:"):
        assert step in first_screen
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links and all((ROOT / link).is_file() for link in links), links
    assert "../shared/design.md" not in readme and "What is partial" not in readme
    assert len(readme.split()) < 1500
