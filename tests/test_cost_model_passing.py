"""The cost model is passed, not set: a graph is priced by the model passed, else its own,
else the process default (analytic H100 unless the command line chose another); only
the command line, the benchmarks and tests set that default."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import taso_env as te
from taso_env.engine.cost_model import AnalyticCostModel, CostModelError, get_cost_model, make_cost_model

REPO = Path(__file__).resolve().parent.parent
MAY_SET_THE_DEFAULT = ("rlflow", "benchmarks", "tests")


@pytest.fixture
def default_restored():
    saved = get_cost_model()
    yield
    te.set_cost_model(saved)


def _set_cost_model_calls(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", getattr(node.func, "attr", None)) == "set_cost_model"]


def test_only_the_command_line_benchmarks_and_tests_set_the_default():
    found = []
    for path in sorted(REPO.rglob("*.py")):
        rel = path.relative_to(REPO)
        if rel.parts[0].startswith(".") or rel.parts[0] in ("build", *MAY_SET_THE_DEFAULT):
            continue
        found += [f"{rel}:{line}" for line in _set_cost_model_calls(path)]
    assert found == [], f"library code sets the process-wide cost model (pass the model instead): {found}"


def test_the_check_sees_a_call(tmp_path):
    snippet = tmp_path / "library.py"
    snippet.write_text("import taso_env as te\n\n\ndef f():\n    te.set_cost_model('analytic:h100')\n")
    assert _set_cost_model_calls(snippet) == [5]


def test_two_graphs_under_two_models_in_one_process_each_get_their_own(default_restored):
    g = te.graphs.build("squeezenet", seed=None)
    analytic = g.with_cost_model("analytic:h100")
    table = g.with_cost_model("table:h100_fp32")
    assert analytic.cost() == g.cost("analytic:h100")
    assert table.cost() == g.cost("table:h100_fp32")
    assert analytic.cost() != pytest.approx(table.cost(), rel=1e-3)
    te.set_cost_model("analytic:h100-tf32")  # the default moves; graphs with their own model do not
    assert analytic.cost() == g.cost("analytic:h100") and table.cost() == g.cost("table:h100_fp32")
    assert g.cost() == g.cost("analytic:h100-tf32")
    assert table.cost("analytic:h100") == analytic.cost()  # a model passed wins over the graph's own


def test_the_graph_s_model_is_searched_with_and_carried_on(default_restored):
    g = te.graphs.build("squeezenet", seed=None)
    table = g.with_cost_model("table:h100_fp32")
    assert [c.cost_delta for c in table.candidates()] == [c.cost_delta for c in g.candidates(model=table.cost_model)]
    result = te.search(table, "greedy")
    assert result.graph.cost_model is table.cost_model
    assert result.final_cost == pytest.approx(result.graph.cost("table:h100_fp32"))
    assert result.final_cost == pytest.approx(te.search(g, "greedy", model="table:h100_fp32").final_cost)
    child = table.apply(table.candidates()[0])
    assert child.cost_model is table.cost_model and child.with_weights({}).cost_model is table.cost_model
    assert table.with_cost_model(None).cost_model is None


def test_the_default_is_analytic_h100():
    code = ("import taso_env as te; from taso_env.engine.cost_model import get_cost_model; "
            "g = te.graphs.build('squeezenet', seed=None); "
            "print(get_cost_model().name, g.cost() == g.cost('analytic:h100'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["analytic:h100", "True"]
    assert isinstance(make_cost_model("analytic"), AnalyticCostModel)


def test_the_gpu_layer_registers_the_measured_models():
    assert set(te.engine.cost_model.registered_cost_models()) >= {"analytic", "table", "table+residency", "cuda"}
    assert make_cost_model("table:h100_fp32").name.startswith("table:")
    usage = "use 'analytic[:profile]', 'table[+residency]:<path.h5>' or 'cuda'"
    with pytest.raises(CostModelError, match=re.escape(usage)):
        make_cost_model("roofline")
