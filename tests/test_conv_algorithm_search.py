"""Convolution algorithms searched in a child process (taso_env/gpu/conv_algorithm_search.py):
which signatures it takes, when it is skipped, and, on the GPU, that a fresh process
measures with the choices the child cached instead of searching again."""

import json
import os
import subprocess
import sys

import pytest

import taso_env as te
from taso_env.gpu import conv_algorithm_search as search
from taso_env.gpu import cost_table
from taso_env.gpu import cuda_backend as cb


def _fresh_conv_graph() -> te.Graph:
    b = te.GraphBuilder("child_search", seed=0)
    x = b.input("x", [1, 6, 9, 17])
    y = b.relu(b.add(b.conv2d(x, 10, [3, 3], padding=[1, 1], name="c"), b.weight("bias", [10, 1, 1])))
    b.output(y, "y")
    return b.build()


def _signatures(g: te.Graph) -> list[str]:
    return [sig for _, _, sig, _ in cost_table.op_configs(g)]


def test_only_convolution_signatures_are_searched_each_once():
    sigs = _signatures(_fresh_conv_graph())
    convs = search.conv_signatures(sigs + sigs)
    assert len(convs) == 1 and convs[0].startswith("Conv2D|")
    assert set(convs) < set(sigs)


def test_nothing_to_search_starts_no_child(monkeypatch):
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("a child was started"))
    sigs = [s for s in _signatures(_fresh_conv_graph()) if not s.startswith("Conv2D|")]
    assert sigs and search.search_in_child(sigs, "fp32") == {"searched": 0, "failed": 0, "seconds": 0.0}


def test_heuristic_choices_need_no_child_search(monkeypatch):
    monkeypatch.setenv("RLFLOW_CUDNN_FIND", "0")
    assert "heuristics" in search.child_search_skipped()


@pytest.mark.skipif(cb.available(), reason="checks the child's report where there is no GPU")
def test_the_child_reports_each_convolution_it_could_not_measure(tmp_path):
    sigs = tmp_path / "sigs.txt"
    sigs.write_text("\n".join(_signatures(_fresh_conv_graph())) + "\n")
    out = subprocess.run([sys.executable, "-m", "taso_env.gpu.conv_algorithm_search", "--math", "fp32", str(sigs)],
                         capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1])["failed"] == 1
    assert "Conv2D|" in out.stderr


def test_the_child_needs_signatures_or_graphs():
    with pytest.raises(SystemExit):
        search.main([])


@pytest.mark.skipif(cb.available(), reason="checks the child's report where there is no GPU")
def test_the_graph_child_loads_each_graph_and_runs_only_those_with_convolutions(models_dir):
    summary = search.graph_search_in_child([str(models_dir / "coverage" / "distilbert.onnx"), "squeezenet1_1",
                                            "no_such_graph"], "fp32")
    assert summary["searched"] == 1 and summary["failed"] == 2  # no GPU here to run squeezenet's


@pytest.mark.cuda
@pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))
def test_graphs_searched_in_a_child_are_measured_with_its_choices(tmp_path, monkeypatch):
    path = tmp_path / "algos.tsv"
    monkeypatch.setenv(cb.ALGO_CACHE_ENV, str(path))
    summary = search.graph_search_in_child(["squeezenet1_1"], "fp32")
    assert summary == {**summary, "searched": 1, "failed": 0}
    chosen = len(path.read_text().splitlines())
    assert chosen > 0
    code = "from taso_env.gpu import cuda_backend as cb; import taso_env as te; " \
           "print(cb.measure(te.graphs.load('squeezenet1_1'), opaque='host').median_ms)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "RLFLOW_TUNE_LOG": "1"})
    assert "cached 1" in out.stderr and "cached 0" not in out.stderr
    assert len(path.read_text().splitlines()) == chosen


@pytest.mark.cuda
@pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))
def test_a_fresh_process_measures_with_the_choices_the_child_cached(tmp_path, monkeypatch):
    path = tmp_path / "algos.tsv"
    monkeypatch.setenv(cb.ALGO_CACHE_ENV, str(path))
    sigs = _signatures(_fresh_conv_graph())
    summary = search.search_in_child(sigs, "fp32")
    assert summary["searched"] == 1 and summary["failed"] == 0
    assert len(path.read_text().splitlines()) == 1
    conv = search.conv_signatures(sigs)[0]
    code = f"from taso_env.gpu import cuda_backend as cb; print(cb.measure_signature({conv!r}, 'fp32'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "RLFLOW_TUNE_LOG": "1"})
    assert "cached 1" in out.stderr and "cached 0" not in out.stderr
    assert float(out.stdout) > 0
    assert len(path.read_text().splitlines()) == 1  # nothing searched again
