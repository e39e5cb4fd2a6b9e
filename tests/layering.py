"""The import order of pyproject.toml's import-linter layers contracts, checked by walking
the source: every import statement, at module level or inside a function or class,
must run down the order, and every module of a layered container must sit in a layer.

import-linter checks the same contracts on its own import graph; this walk adds what it
cannot see: the compiled modules (`taso_env._core` belongs to the engine layer,
`taso_env._cuda` to the gpu layer), an import of the public face (`import taso_env`)
from inside a layer, and modules that no layer names.

    problems = violations(REPO, ["taso_env", "controller", ...])   # [] when the order holds
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import tomllib

# Modules the walk cannot read as source, placed with the module they belong to.
NON_SOURCE_MODULES = {
    "taso_env._core": "taso_env.engine",
    "taso_env._cuda": "taso_env.gpu",
    "taso_env.data": "taso_env.shipped_data",
}


@dataclass(frozen=True)
class Import:
    """One import statement's target, as the module that runs it sees it."""

    importer: str
    imported: str
    path: Path
    line: int
    in_function: bool


@dataclass(frozen=True)
class Layers:
    """A layers contract: `rows` highest first, each row's names either independent
    (`a | b`: may not import each other) or not (`a : b`)."""

    name: str
    container: str | None
    rows: tuple[tuple[str, ...], ...]
    independent: tuple[bool, ...]

    def place(self, module: str) -> tuple[int, str] | None:
        """(rank, layer name) of `module` (rank 0 is the top layer), or None where no
        layer holds it. A compiled module is placed as the module it belongs to."""
        module = NON_SOURCE_MODULES.get(module, module)
        for rank, row in enumerate(self.rows):
            for name in row:
                full = f"{self.container}.{name}" if self.container else name
                if module == full or module.startswith(full + "."):
                    return rank, full
        return None


def layers_contracts(pyproject: Path) -> list[Layers]:
    """The layers contracts of `pyproject`'s [tool.importlinter] section."""
    config = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]
    out = []
    for contract in config["contracts"]:
        if contract["type"] != "layers":
            continue
        containers = contract.get("containers") or [None]
        if len(containers) != 1:
            raise ValueError(f"contract {contract['name']!r}: one container at most is supported")
        rows, independent = [], []
        for row in contract["layers"]:
            sep = ":" if ":" in row else "|"
            rows.append(tuple(name.strip() for name in row.split(sep)))
            independent.append(sep == "|")
        out.append(Layers(contract["name"], containers[0], tuple(rows), tuple(independent)))
    return out


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_modules(root: Path, packages: list[str]) -> dict[str, Path]:
    """{module name: file} of every .py file of `packages` under `root`."""
    return {module_name(p, root): p for pkg in packages for p in sorted((root / pkg).rglob("*.py"))}


def _resolve(node: ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> list[str]:
    if node.level:
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    # `from pkg import name` imports the module pkg.name where there is one, else pkg
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]


def imports_in(path: Path, module: str, known: set[str]) -> list[Import]:
    """Every import of `path` (module `module`), wherever it stands in the file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend(Import(module, a.name, path, child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                found.extend(Import(module, target, path, child.lineno, inner)
                             for target in _resolve(child, module, is_package, known))
            visit(child, inner)

    visit(tree, False)
    return found


def _check(contract: Layers, imp: Import) -> str | None:
    where = f"{imp.path}:{imp.line}{' (inside a function)' if imp.in_function else ''}"
    if contract.container is not None:
        inside = contract.container + "."
        if not imp.importer.startswith(inside):  # the container itself is the public face, above all
            return None
        mine = contract.place(imp.importer)
        if mine is None:
            return f"{imp.importer} is in no layer of {contract.name!r}: add it to pyproject.toml"
        if imp.imported == contract.container:
            return f"{where}: {imp.importer} imports the public face {contract.container} (above every layer)"
        if not imp.imported.startswith(inside):
            return None
    else:
        mine = contract.place(imp.importer)
        if mine is None:
            return None
    theirs = contract.place(imp.imported)
    if theirs is None:
        if contract.container is not None:
            return f"{where}: {imp.importer} imports {imp.imported}, which is in no layer of {contract.name!r}"
        return None  # outside the packages this contract orders (the standard library, ...)
    if theirs[0] < mine[0]:
        return f"{where}: {imp.importer} ({mine[1]}) imports {imp.imported} ({theirs[1]}), a higher layer"
    if theirs[0] == mine[0] and theirs[1] != mine[1] and contract.independent[mine[0]]:
        return f"{where}: {imp.importer} imports {imp.imported}: independent layers {mine[1]} | {theirs[1]}"
    return None


def violations(root: Path, packages: list[str], pyproject: Path | None = None) -> list[str]:
    """Every import of `packages` (folders under `root`) that breaks a layers contract of
    `pyproject` (default: root/pyproject.toml), one message each."""
    contracts = layers_contracts(pyproject or root / "pyproject.toml")
    modules = source_modules(root, packages)
    known = set(modules) | set(NON_SOURCE_MODULES)
    problems = []
    for module, path in modules.items():
        for imp in imports_in(path, module, known):
            problems.extend(msg for c in contracts if (msg := _check(c, imp)) is not None)
    return sorted(set(problems))
