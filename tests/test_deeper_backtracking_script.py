"""benchmarks/deeper_backtracking.py: one row per (graph, alpha, budget) job in the
--out JSON lines, a rerun skips the jobs already there, and its default graph list is
the set of graphs the 2026-11-27 raw output names."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "deeper_backtracking.py"
RESULT = REPO / "benchmarks" / "results" / "2026-11-28_tied_deeper_backtracking.jsonl"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("deeper_backtracking", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the pool pickles run_job by its module's name
    spec.loader.exec_module(module)
    return module


def test_rows_and_resume(script, tmp_path, capsys, monkeypatch):
    out = tmp_path / "rows.jsonl"
    args = ["--graphs", "squeezenet", "--alphas", "1.05", "1.2", "--budgets", "20", "--out", str(out)]
    assert script.main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["graph"], r["alpha"], r["budget"]) for r in rows] == [("squeezenet", 1.05, 20), ("squeezenet", 1.2, 20)]
    for r in rows:
        for key in ("ops", "greedy_speedup", "backtracking_speedup", "initial_cost", "final_cost",
                    "final_over_initial", "expansions", "graphs_seen", "complete", "seconds"):
            assert key in r
        assert r["expansions"] <= 20
        assert r["final_over_initial"] == pytest.approx(r["final_cost"] / r["initial_cost"])
        assert r["backtracking_speedup"] >= r["greedy_speedup"] * (1 - 1e-9)  # backtracking starts from more
    stdout = capsys.readouterr().out.splitlines()
    summary = json.loads(stdout[0])
    assert summary["graphs"] == 1 and summary["jobs"] == 2
    assert any(line.startswith("| squeezenet |") for line in stdout)

    # a rerun with the same --out runs nothing it has; a new budget runs only its jobs
    def must_not_run(job):
        raise AssertionError(f"reran {job}")

    with monkeypatch.context() as m:
        m.setattr(script, "run_job", must_not_run)
        assert script.main(args) == 0
    assert len(out.read_text().splitlines()) == 2
    assert json.loads(capsys.readouterr().out.splitlines()[0])["jobs"] == 2

    assert script.main(["--graphs", "squeezenet", "--alphas", "1.05", "--budgets", "20", "10", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["alpha"], r["budget"]) for r in rows] == [(1.05, 20), (1.2, 20), (1.05, 10)]


def test_pool_of_workers(script, tmp_path):
    out = tmp_path / "rows.jsonl"
    assert script.main(["--graphs", "squeezenet", "--alphas", "1.05", "1.2", "--budgets", "10", "--workers", "2",
                        "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["alpha"] for r in rows) == [1.05, 1.2]
    assert rows[0]["greedy_speedup"] == rows[1]["greedy_speedup"]


def test_default_graphs_are_those_of_the_committed_run(script):
    """TIED is the graph set of the committed run that results.md cites, each graph once."""
    rows = [json.loads(line) for line in RESULT.read_text().splitlines()]
    assert len(script.TIED) == len(set(script.TIED))
    assert set(script.TIED) == {r["graph"] for r in rows}
    assert len(rows) == 2 * len(script.TIED)  # alphas 1.05 and 1.2, budget 5000
