"""The packages' import order (pyproject.toml's import-linter contracts) holds, both as
import-linter sees it and as an AST walk that also reads the imports inside functions
sees it; and both checks fail when an upward import is inserted."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from layering import layers_contracts, violations

REPO = Path(__file__).resolve().parent.parent
PYPROJECT = REPO / "pyproject.toml"
PACKAGES = ["taso_env", "worldmodel", "controller", "tuner_agents", "rlflow"]


def _lint_imports() -> str:
    beside = Path(sys.executable).parent / "lint-imports"
    found = str(beside) if beside.exists() else shutil.which("lint-imports")
    if found is None:
        pytest.fail("lint-imports not found: pip install -r requirements-test.txt")
    return found


def test_lint_imports_keeps_every_contract():
    res = subprocess.run([_lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 broken" in res.stdout


def test_every_import_runs_down_the_layers_even_inside_functions():
    assert violations(REPO, PACKAGES) == []


def _taso_env_tree(root: Path) -> None:
    """A package `taso_env` under `root` with one empty module per layer of the real
    taso_env contract, and the engine and gpu as packages."""
    contract = next(c for c in layers_contracts(PYPROJECT) if c.container == "taso_env")
    pkg = root / "taso_env"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for row in contract.rows:
        for name in row:
            (pkg / f"{name}.py").write_text("")
    for name in ("engine", "gpu"):
        (pkg / f"{name}.py").unlink()
        (pkg / name).mkdir()
        (pkg / name / "__init__.py").write_text("")
    (pkg / "gpu" / "cost_models.py").write_text("from taso_env.engine import graph\n")
    (pkg / "engine" / "graph.py").write_text(textwrap.dedent("""\
        from taso_env import errors


        def export():
            from taso_env.gpu import cost_models  # upward, inside a function

            return cost_models
        """))


def test_the_walk_flags_an_upward_import_inside_a_function(tmp_path):
    _taso_env_tree(tmp_path)
    assert violations(tmp_path, ["taso_env"], PYPROJECT) == [
        f"{tmp_path / 'taso_env' / 'engine' / 'graph.py'}:5 (inside a function): taso_env.engine.graph "
        "(taso_env.engine) imports taso_env.gpu.cost_models (taso_env.gpu), a higher layer"]


def test_the_walk_flags_the_public_face_and_a_module_in_no_layer(tmp_path):
    _taso_env_tree(tmp_path)
    (tmp_path / "taso_env" / "engine" / "graph.py").write_text("def f():\n    import taso_env as te\n")
    (tmp_path / "taso_env" / "stray.py").write_text("from taso_env import errors\n")
    found = violations(tmp_path, ["taso_env"], PYPROJECT)
    assert any("taso_env.engine.graph imports the public face taso_env" in m for m in found), found
    assert any(m.startswith("taso_env.stray is in no layer") for m in found), found


def test_the_walk_places_the_compiled_modules(tmp_path):
    _taso_env_tree(tmp_path)
    (tmp_path / "taso_env" / "engine" / "graph.py").write_text("from taso_env import _cuda\n")
    (tmp_path / "taso_env" / "errors.py").write_text("from taso_env import _core\n")
    found = violations(tmp_path, ["taso_env"], PYPROJECT)
    assert len(found) == 2, found
    assert "imports taso_env._cuda (taso_env.gpu), a higher layer" in found[0] + found[1]
    assert "imports taso_env._core (taso_env.engine), a higher layer" in found[0] + found[1]


def test_lint_imports_flags_an_upward_import_inside_a_function(tmp_path):
    _taso_env_tree(tmp_path)
    contract = next(c for c in layers_contracts(PYPROJECT) if c.container == "taso_env")
    rows = "\n".join(f"    {(' : ' if not ind else ' | ').join(row)}"
                     for row, ind in zip(contract.rows, contract.independent))
    (tmp_path / ".importlinter").write_text(
        "[importlinter]\nroot_package = taso_env\n\n"
        "[importlinter:contract:layers]\nname = taso_env layers\ntype = layers\ncontainers = taso_env\n"
        f"layers =\n{rows}\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    res = subprocess.run([_lint_imports(), "--no-cache"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode != 0, res.stdout + res.stderr
    assert "taso_env.engine is not allowed to import taso_env.gpu" in res.stdout, res.stdout
