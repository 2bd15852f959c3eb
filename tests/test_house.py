"""The layout rules a newcomer relies on: modules of one job, kernels behind ops/, a package that
points to nothing outside itself."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "icml26"
MAX_LINES = 600


def _modules():
    return sorted(p for p in PKG.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_module_over_600_lines():
    big = {str(p.relative_to(ROOT)): n for p in _modules() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines (split them along their jobs): {big}"


def test_methods_call_kernels_through_ops_only():
    pat = re.compile(
        r"^\s*(from\s+icml26\.ops\._ref\b|from\s+icml26\.ops\s+import\s+_ref\b|import\s+icml26\.ops\._ref)"
    )
    leaks = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _modules()
        if "ops" not in p.relative_to(PKG).parts[:1]
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pat.match(line)
    ]
    assert not leaks, f"import icml26.ops.<op> instead of its _ref twin: {leaks}"


def test_package_cites_nothing_outside_the_repository():
    pat = re.compile(r"shared/(methods|DATA|DESIGN|PAPERS)|\.\./shared")
    refs = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in _modules()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pat.search(line)
    ]
    assert not refs, f"cite the paper or the official code, not files users do not have: {refs}"


def test_module_docstrings_are_short():
    import ast

    long = {}
    for p in _modules():
        doc = ast.get_docstring(ast.parse(p.read_text()), clean=False)
        if doc and len(doc.splitlines()) > 25:
            long[str(p.relative_to(ROOT))] = len(doc.splitlines())
    assert not long, f"module docstrings over 25 lines (history belongs in docs/<command>.md): {long}"
