"""The CUDA executor's convolution epilogue fusion (csrc/gpu/fusion.h) and its timed
algorithm choice: every fused pattern, and every pattern that must not fuse, matches
the numpy reference executor in strict fp32, with fusion on and off.

Skipped cleanly where the backend is not built or there is no GPU.
"""

import numpy as np
import pytest

import taso_env as te
from taso_env.engine import reference

pytest.importorskip("taso_env._cuda", reason="the CUDA backend is not built here")
from graph_fixtures import CONV_EPILOGUE_PATTERNS, chained_ops, conv_epilogue_graph, epilogue_free_ops  # noqa: E402

from taso_env.gpu import cuda_backend as cb  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))]


def _close(g: te.Graph, monkeypatch, fuse: bool, rtol: float = 1e-4):
    monkeypatch.setenv("RLFLOW_FUSE", "1" if fuse else "0")
    g = g.with_weights(g.random_weights(0))
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds)
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        err = float(np.max(np.abs(got[name].astype(np.float64) - ref)))
        assert err <= rtol * scale, f"{g.name} {name}: {err:.3g} > {rtol} x {scale:.3g}"


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pattern", CONV_EPILOGUE_PATTERNS)
def test_fused_conv_epilogues_match_the_reference(pattern, bias, fuse, monkeypatch):
    _close(conv_epilogue_graph(pattern, bias), monkeypatch, fuse)


def test_fusion_removes_steps(monkeypatch):
    g = conv_epilogue_graph("add_relu")
    monkeypatch.setenv("RLFLOW_FUSE", "0")
    with cb.Executor(g) as ex:
        plain = ex.num_steps
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    with cb.Executor(g) as ex:
        assert ex.num_steps == plain - 2


def test_resnet_blocks_fused_match_the_reference_in_tf32(monkeypatch):
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    g = te.graphs.build("resnet50", seed=0) if "resnet50" in te.graphs.names() else conv_epilogue_graph("add_relu")
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds, math="tf32")
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        assert float(np.max(np.abs(got[name] - ref))) <= 2e-2 * scale


def test_algorithm_choices_persist_in_the_cache_file(tmp_path, monkeypatch):
    path = tmp_path / "algos.tsv"
    monkeypatch.setenv("RLFLOW_CONV_ALGO_CACHE", str(path))
    # The file is read once per process; choices of configurations new to this process
    # are appended. A configuration no earlier test used:
    b = te.GraphBuilder("fresh", seed=0)
    y = b.conv2d(b.input("x", [1, 5, 11, 13]), 7, [3, 5], padding=[1, 2], name="c")
    b.output(y, "y")
    cb.run(b.build(), {"x": np.ones((1, 5, 11, 13), np.float32)})
    lines = path.read_text().splitlines()
    assert lines and all(len(line.split("\t")) == 2 and "x1x5x11x13" in line for line in lines)


@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "bert_base",
                                   "vit_b_16", "coverage/distilbert", "coverage/gpt2", "coverage/t5_small_encoder",
                                   "coverage/bert_base_sdpa", "coverage/qwen2_small"])
def test_the_table_prices_at_nothing_only_ops_the_executor_runs_in_another_ops_step(model, models_dir, monkeypatch):
    """taso/epilogue.h is one set of rules for both: every op the table cost model charges
    nothing for runs, in the executor, in the step of a producer or reader of it (a
    convolution or GEMM epilogue) or as a strided view, so search is never credited for
    a kernel the executor launches; the convolution epilogues are exactly the
    executor's; and the ops it prices as joining their reader's element-wise chain do
    join it, but where the chain kernel's limits (16 ops, 8 inputs) split a chain."""
    from taso_env import shipped_data
    from taso_env.gpu.cost_models import TableCostModel

    monkeypatch.setenv("RLFLOW_FUSE", "1")
    g = te.load_onnx(str(models_dir / f"{model}.onnx"))
    table = shipped_data.cost_tables()["h100_fp32"]
    free, fused, alone = epilogue_free_ops(g, TableCostModel(table), TableCostModel(table, fused_epilogues=False))
    chained = chained_ops(fused, alone)
    readers = [[] for _ in g.ops]
    for i, op in enumerate(g.ops):
        for r in op.inputs:
            readers[r.op].append(i)
    with cb.Executor(g, opaque="host") as ex:
        steps = ex.fused_steps
        conv = set(ex.conv_epilogue_ops)

    def step_of(i):
        return steps[i][0] if steps[i] else i

    for i in free:
        neighbours = [r.op for r in g.ops[i].inputs] + readers[i]
        assert (steps[i] and steps[i][1] == "view") or any(step_of(q) == step_of(i) for q in neighbours), \
            f"{model}: {g.ops[i].type} op {g.ops[i].name} priced at nothing, but the executor runs it alone"
    assert conv <= set(free)
    assert free
    joined = [i for i in chained if any(step_of(r) == step_of(i) for r in readers[i])]
    assert len(joined) >= 0.9 * len(chained), f"{model}: {len(joined)} of {len(chained)} chained ops join their reader"


@pytest.mark.parametrize("model", ["squeezenet1_1", "inception_v3", "coverage/googlenet", "densenet121",
                                   "coverage/shufflenet_v2_x1_0", "coverage/maxvit_t"])
def test_the_table_prices_at_nothing_exactly_the_concats_the_executor_runs_in_place(model, models_dir, monkeypatch):
    """The in-place-Concat rule of taso/epilogue.h is the executor's: the run-time Concats
    the table charges nothing for are those whose producers write into their slices, in
    the export and in its greedy graph (rewrites that merge, enlarge and split)."""
    from taso_env import shipped_data
    from taso_env.gpu.cost_models import TableCostModel

    monkeypatch.setenv("RLFLOW_FUSE", "1")
    table = TableCostModel(shipped_data.cost_tables()["h100_fp32"])
    g = te.load_onnx(str(models_dir / f"{model}.onnx"))
    for graph in (g, te.search(g, "greedy", model=table).graph):
        constant = graph._core.structure()[1]
        costs = table.op_costs(graph)
        free = [i for i, op in enumerate(graph.ops) if op.type == "Concat" and not constant[i] and costs[i] == 0]
        with cb.Executor(graph, opaque="host") as ex:
            assert ex.in_place_concats == free, model
