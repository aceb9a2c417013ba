"""Every Python snippet of the README and of docs/ runs as written, and the values its comments
state are the values it computes, so a snippet cannot drift from the code.

A comment line right before a snippet's fence says what it needs:
``<!-- snippet-test: excerpt -->`` (a fragment, not run: listed by the test),
``<!-- snippet-test: sidecar NAME -->`` (run against the broker under test while a sidecar
serves NAME). A line ``EXPR  # VALUE...`` checks EXPR == VALUE when VALUE (or its part before
``:`` or ``;``) is a Python value.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from .conftest import BROKER_URI, DEFAULT_URI
from .sidecar.conftest import delete_layouts, sidecars  # noqa: F401 - sidecars: the fixture

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"(?:<!-- snippet-test: (?P<need>[^>]*?) -->\n)?```python\n(?P<code>.*?)```",
                    re.DOTALL)


def _snippets() -> list:
    found = []
    for page in PAGES:
        text = page.read_text()
        for n, match in enumerate(_FENCE.finditer(text), 1):
            need = (match["need"] or "").split()
            marks = [pytest.mark.broker] if need[:1] == ["sidecar"] else []
            found.append(pytest.param(match["code"], need, id=f"{page.relative_to(ROOT)}#{n}",
                                      marks=marks))
    return found


SNIPPETS = _snippets()


def _stated_value(comment: str):
    """The Python value a comment states, or a sentinel when it states none."""
    cuts = [m.start() for m in re.finditer(r"[:;]\s", comment)]
    for candidate in (comment, *(comment[:cut] for cut in cuts)):
        candidate = candidate.strip()
        try:
            ast.parse(candidate, mode="eval")
            return eval(candidate, {"__builtins__": {"frozenset": frozenset, "set": set}})
        except Exception:  # noqa: BLE001, S112 - prose, not a value
            continue
    return _NOTHING


_NOTHING = object()


def _run(code: str) -> int:
    """Runs the snippet statement by statement; returns how many stated values were checked."""
    namespace: dict = {"__name__": "__snippet__"}
    checked = 0
    tree = ast.parse(code)
    lines = code.splitlines()
    for node in tree.body:
        source = ast.get_source_segment(code, node)
        if isinstance(node, ast.Expr) and node.end_lineno == node.lineno:
            line = lines[node.lineno - 1]
            comment = line[node.end_col_offset:].strip()
            value = eval(compile(ast.Expression(node.value), "<snippet>", "eval"), namespace)
            if comment.startswith("#"):
                stated = _stated_value(comment[1:])
                if stated is not _NOTHING:
                    assert value == stated, f"{source} is {value!r}, the comment says {comment}"
                    checked += 1
            continue
        exec(compile(ast.Module([node], []), "<snippet>", "exec"), namespace)  # noqa: S102
    return checked


def test_every_page_with_python_has_its_snippets_found():
    assert len(SNIPPETS) >= 3, [p.id for p in SNIPPETS]


@pytest.mark.parametrize(("code", "need"), SNIPPETS)
def test_the_snippet_runs_as_written(code, need, request):
    if need[:1] == ["excerpt"]:
        pytest.skip("an excerpt (marked so on its page)")
    if need[:1] == ["sidecar"]:
        if BROKER_URI != DEFAULT_URI:
            pytest.skip("the snippet names the local broker, 127.0.0.1:5672 (the 3.10 leg)")
        name = need[1]
        request.addfinalizer(lambda: delete_layouts([name]))
        sc = request.getfixturevalue("sidecars")("--rtopic", name)
        sc.wait_running(name)
    _run(code)

