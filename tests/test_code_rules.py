"""House rules the test suite enforces (CI runs only pytest): the layer contract, ruff, and small functions."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "src" / "fairprobe"
MAX_LINES = 60
# Nothing may grow past MAX_LINES.
ALLOWED_LONG: set[str] = set()


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.skip(f"{name} is not installed beside {sys.executable} (pip install -e '.[dev]')")
    return found


def long_functions(root: Path, limit: int) -> dict[str, int]:
    """Every function or method longer than `limit` lines, as 'path:Qualified.name' -> lines. Its docstring does
    not count: a public function's documented arguments are reference, not code."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                lines = (child.end_lineno or child.lineno) - child.lineno + 1
                if ast.get_docstring(child) is not None:
                    doc = child.body[0]
                    lines -= (doc.end_lineno or doc.lineno) - doc.lineno + 1
                if lines > limit:
                    found[f"{path}:{name}"] = lines
                visit(child, path, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, path, prefix + child.name + ".")

    for file in sorted(root.rglob("*.py")):
        visit(ast.parse(file.read_text(encoding="utf-8")), file.relative_to(root).as_posix(), "")
    return found


def test_no_function_is_over_60_lines() -> None:
    long = long_functions(SRC, MAX_LINES)
    assert {k: v for k, v in long.items() if k not in ALLOWED_LONG} == {}
    stale = ALLOWED_LONG - set(long)
    assert not stale, f"split already: remove {sorted(stale)} from ALLOWED_LONG"


def test_the_length_rule_counts_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    (tmp_path / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n\n\ndef g():\n    return 1\n")
    assert long_functions(tmp_path, MAX_LINES) == {"m.py:C.f": 61}
    doc = "\n".join(f"    line {i}" for i in range(40))
    code = "\n".join(f"    x{i} = {i}" for i in range(55))
    (tmp_path / "m.py").write_text(f'def h():\n    """What h does.\n\n{doc}\n    """\n{code}\n')
    assert long_functions(tmp_path, MAX_LINES) == {}  # 56 lines of code under a 43-line docstring


def test_layer_contract_holds() -> None:
    done = subprocess.run(
        [_tool("lint-imports"), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=ROOT / "src",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 kept, 0 broken" in done.stdout


def test_ruff_check_and_format_are_clean() -> None:
    ruff = _tool("ruff")
    paths = ["src", "tests", "benchmarks"]
    check = subprocess.run([ruff, "check", *paths], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout[-3000:]
    form = subprocess.run([ruff, "format", "--check", *paths], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert form.returncode == 0, form.stdout[-3000:]
