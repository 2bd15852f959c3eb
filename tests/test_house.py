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


# --- one door per method package ------------------------------------------------------------------
# A command file (icml26/commands/*.py) reaches a method package only through the package's ``api``
# module (``from icml26.methods.<pkg> import api``, ``from icml26.methods.<pkg>.api import <name>``)
# and, for its settings, through the package's torch-free config modules (``config.py``,
# ``*_config.py``), so ``--set`` values are checked before any heavy import.

METHODS = PKG / "methods"


def _is_config(mod: str) -> bool:
    return mod == "config" or mod.endswith("_config")


def _method_packages():
    return sorted({p.parent.name for p in METHODS.glob("*/*.py")})


def _method_imports(path: Path):
    """(line, module in icml26.methods reached, how) for every import in ``path``, at any depth."""
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("icml26.methods."):
                    yield node.lineno, a.name, f"import {a.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("icml26.methods"):
            parts = node.module.split(".")
            if len(parts) == 3:  # from icml26.methods.<pkg> import <module>
                for a in node.names:
                    yield node.lineno, f"{node.module}.{a.name}", f"from {node.module} import {a.name}"
            else:
                yield node.lineno, node.module, f"from {node.module} import ..."


def test_every_method_package_has_an_api_module():
    missing = [p for p in _method_packages() if not (METHODS / p / "api.py").is_file()]
    assert not missing, f"method packages without an api.py (the names their command calls): {missing}"


def test_commands_reach_method_packages_through_api_only():
    bad, configs = [], set()
    for f in sorted((PKG / "commands").glob("*.py")):
        for line, mod, how in _method_imports(f):
            parts = mod.split(".")
            if len(parts) < 4:
                bad.append(f"{f.name}:{line}: {how}")
            elif parts[3] == "api" and len(parts) == 4:
                continue
            elif _is_config(parts[3]) and len(parts) == 4:
                configs.add(mod)
            else:
                bad.append(f"{f.name}:{line}: {how}")
    assert not bad, f"command files reach method packages through <pkg>.api or a config module only: {bad}"
    assert configs, "no config module imported by any command: the scan found nothing"


def test_config_modules_that_commands_import_load_no_torch():
    import subprocess
    import sys

    mods = sorted(
        {
            mod
            for f in (PKG / "commands").glob("*.py")
            for _, mod, _ in _method_imports(f)
            if _is_config(mod.split(".")[-1])
        }
    )
    code = (
        "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint('torch' in sys.modules)"
    )
    r = subprocess.run([sys.executable, "-c", code, *mods], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False", f"importing {mods} loads torch"


def test_api_modules_name_what_they_export():
    import importlib

    for p in _method_packages():
        api = importlib.import_module(f"icml26.methods.{p}.api")
        names = getattr(api, "__all__", None)
        assert names, f"icml26.methods.{p}.api has no __all__"
        for n in names:
            assert getattr(api, n, None) is not None, f"icml26.methods.{p}.api.{n} does not resolve"


# --- no import circles ----------------------------------------------------------------------------


def _import_graph(prefix: str = "icml26.methods") -> dict[str, set[str]]:
    """Module -> modules of ``prefix`` it imports, at module level or inside functions (imports
    under ``if TYPE_CHECKING:`` are left out: they never run)."""
    import ast

    def name_of(p: Path) -> str:
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    mods = {name_of(p): p for p in _modules()}
    graph: dict[str, set[str]] = {}
    for name, p in mods.items():
        if not name.startswith(prefix):
            continue
        tree = ast.parse(p.read_text())
        skip = {
            id(n)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for b in node.body
            for n in ast.walk(b)
        }
        out: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in mods}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    pkg = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
                    pkg = pkg[: len(pkg) - node.level + 1]
                    base = ".".join(pkg + ([base] if base else []))
                for a in node.names:
                    full = f"{base}.{a.name}"
                    out.add(full if full in mods else base)
        graph[name] = {t for t in out if t.startswith(prefix) and t != name and t in mods}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_circle_finder_finds_a_function_level_circle():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(g) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


# Circles not opened yet (strict: one that is opened must leave this list): modules -> what closes them.
KNOWN_CIRCLES: dict[frozenset, str] = {}


def test_no_import_circles_in_methods():
    graph = _import_graph()
    assert "icml26.methods.exploration.mcts_config" in graph["icml26.methods.exploration.trees"]
    circles = {frozenset(c) for c in _circles(graph)}
    new = [sorted(c) for c in circles - set(KNOWN_CIRCLES)]
    assert not new, f"import circles (move the shared piece to the module both need): {new}"
    opened = [sorted(c) for c in set(KNOWN_CIRCLES) - circles]
    assert not opened, f"opened circles still listed in KNOWN_CIRCLES (remove them): {opened}"


def test_stream_takes_a_run_and_four_display_options():
    """core.output.stream(records, run, *, quiet, columns, plot, extra_config): where the records go
    (command, config, seed, --out, resume state) travels as one Run, not as keyword arguments."""
    import inspect

    from icml26.core.output import stream

    params = inspect.signature(stream).parameters
    assert list(params) == ["records", "run", "quiet", "columns", "plot", "extra_config"]
    assert all(p.kind is not inspect.Parameter.VAR_KEYWORD for p in params.values())
