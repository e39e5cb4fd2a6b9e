"""The architecture stays easy to see: no source file over 500 lines, and no import
circle among the product's modules at module level (imports inside functions and under
TYPE_CHECKING are the deliberate way to reach up a layer)."""

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("taso_env", "worldmodel", "controller", "rlflow")
MAX_LINES = 500


def _sources(suffixes):
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*")):
            if path.suffix in suffixes and "__pycache__" not in path.parts:
                yield path


@pytest.mark.parametrize("suffixes", [(".py", ".pyx"), (".cc", ".h", ".cu", ".cuh")], ids=["python", "c++"])
def test_no_source_file_over_500_lines(suffixes):
    long = {str(p.relative_to(REPO)): n for p in _sources(suffixes)
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concept: {long}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module, module: str, is_package: bool, known: set[str]) -> set[str]:
    """Modules imported when `module` is imported (function bodies and TYPE_CHECKING
    blocks excluded); `from pkg import name` counts as pkg.name where that is a module."""
    found: set[str] = set()

    def visit(nodes):
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                for block in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, block, []):
                        visit(child.body if isinstance(child, ast.ExceptHandler) else [child])
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in known else base)

    visit(tree.body)
    return {m for m in found if m in known and m != module}


def test_no_module_level_import_circle():
    paths = list(_sources((".py",)))
    known = {_module_name(p) for p in paths}
    graph = {}
    for path in paths:
        name = _module_name(path)
        graph[name] = _top_level_imports(ast.parse(path.read_text()), name, path.name == "__init__.py", known)
        # A package's __init__ runs before its modules: an edge to a parent package only
        # matters when the parent imports back, which the search below sees as a cycle.
        graph[name] = {m for m in graph[name] if not name.startswith(m + ".")}

    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("module-level import circle: " + " -> ".join(cycle))
            if nxt not in state:
                dfs(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            dfs(node)
