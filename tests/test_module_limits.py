"""Size limits of the code (issue #33): no module over 600 lines and no class over 25 methods
unless its docstring states why, in a paragraph that starts with ``Size:``.

A stated reason is a decision someone can revisit; a module that grows past the limit without
one fails here, so the growth is noticed when it happens, not sessions later."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rtroute"
MAX_LINES = 600
MAX_METHODS = 25


def _reasoned(docstring: str | None) -> bool:
    return any(paragraph.lstrip().startswith("Size:")
               for paragraph in (docstring or "").split("\n\n"))


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_is_where_the_test_looks():
    assert len(_modules()) > 50, PACKAGE


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_long_modules_and_large_classes_say_why(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    problems = []
    lines = len(text.splitlines())
    if lines > MAX_LINES and not _reasoned(ast.get_docstring(tree)):
        problems.append(f"{lines} lines (limit {MAX_LINES}) and no 'Size:' paragraph in the "
                        "module docstring")
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = sum(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
                          for item in node.body)
            if methods > MAX_METHODS and not _reasoned(ast.get_docstring(node)):
                problems.append(f"class {node.name}: {methods} methods (limit {MAX_METHODS}) "
                                "and no 'Size:' paragraph in its docstring")
    assert not problems, f"{path}: " + "; ".join(problems)


def test_a_reason_is_a_paragraph_of_its_own():
    assert _reasoned("Summary.\n\nSize: one method per endpoint.")
    assert not _reasoned("Summary. Size: hidden in a sentence.")
    assert not _reasoned(None)
