"""The CUDA backend on a GPU: outputs of every builder graph, every shipped ONNX model,
an all-ops graph and optimised graphs match the numpy reference executor (rtol 1e-3 of
the output scale, strict fp32); measurement, per-op costs and the `cuda` cost model.

Skipped cleanly where the backend is not built or there is no GPU.
"""

from pathlib import Path

import numpy as np
import pytest
from graph_fixtures import all_ops_graph

import taso_env as te
from taso_env.engine import reference

_cuda = pytest.importorskip("taso_env._cuda", reason="the CUDA backend is not built here")
from taso_env.gpu import cuda_backend as cb  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))]

MODELS = sorted((Path(__file__).resolve().parent.parent / "data" / "models").glob("*.onnx"))
RTOL = 1e-3


def assert_close(got: dict, want: dict, rtol: float = RTOL, what: str = ""):
    assert set(got) == set(want)
    for name, ref in want.items():
        out = got[name]
        assert out.shape == ref.shape and out.dtype == ref.dtype, f"{what} {name}"
        if not np.issubdtype(ref.dtype, np.floating):
            np.testing.assert_array_equal(out, ref, err_msg=f"{what} {name}")
            continue
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64))))
        assert np.all(np.isfinite(out)), f"{what} {name}: non-finite GPU output"
        assert err <= rtol * scale, f"{what} {name}: max abs diff {err:.3g} > {rtol} x scale {scale:.3g}"


def _check(g: te.Graph, rtol: float = RTOL, **kwargs):
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds, **kwargs)
    assert_close(got, want, rtol, g.name)


def test_device_info_names_the_gpu_and_libraries():
    info = cb.device_info()
    assert info["name"] and info["cudnn"] >= 90000 and info["cublas"] > 0
    free, total = cb.memory_info()
    assert 0 < free <= total


def test_all_ops_graph_covers_every_op_type_and_matches_the_reference():
    from taso_env import _core

    g = all_ops_graph()
    assert {o.type for o in g.ops} == set(_core.list_op_types()) - {"Opaque"}
    _check(g)


@pytest.mark.parametrize("name", te.graphs.names())
def test_builder_graph_matches_the_reference(name):
    _check(te.graphs.build(name, seed=0))


@pytest.mark.parametrize("path", MODELS, ids=[p.stem for p in MODELS])
def test_onnx_model_matches_the_reference(path):
    g = te.load_onnx(path)
    g = g.with_weights(g.random_weights(0))
    opaque = "host" if any(o.type == "Opaque" for o in g.ops) else "error"
    _check(g, opaque=opaque)


@pytest.mark.parametrize("name", ["wav2vec2_small", "squeezebert", "lraspp_mobilenet_v3_large", "fcn_resnet50"])
def test_exports_with_lowered_spatial_ops_match_the_reference(name):
    # 1-D convolutions, InstanceNormalization and bilinear Resize reach the executor as
    # unit-height Conv2Ds, reductions and interpolation MatMuls (onnx/lowering_spatial.py)
    g = te.load_onnx(MODELS[0].parent / "coverage" / f"{name}.onnx")
    g = g.with_weights(g.random_weights(0))
    assert not [o for o in g.ops if o.type == "Opaque"]
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    assert_close(cb.run(g, feeds), want, RTOL, name)
    assert_close(cb.run(te.optimize(g, "greedy"), feeds), want, RTOL, f"optimised {name}")


def test_opaque_ops_are_refused_with_a_clear_error():
    # GatherND with indices computed at run time is not lowered (onnx/lowering.py): opaque.
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("GatherND", ["x", "i"], ["g"]), helper.make_node("Relu", ["g"], ["y"])], "opaque",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    g = te.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    with pytest.raises(cb.UnsupportedGraphError, match="GatherND"):
        cb.Executor(g)
    m = cb.measure(g, opaque="host", warmup=2, repeats=3)  # evaluated on the host
    assert m.median_ms > 0


@pytest.mark.parametrize("name", ["squeezenet", "inception_v3", "nasrnn", "bert_base"])
def test_optimised_graph_matches_the_original(name):
    g = te.graphs.build(name, seed=0)
    best = te.optimize(g, "backtracking", budget=30)
    feeds = g.random_inputs(0)
    assert_close(cb.run(best, feeds), reference.run(g, feeds), RTOL, f"optimised {name}")


@pytest.mark.parametrize("math", ["fp32", "fp16"])
def test_large_feeds_have_arrived_before_the_first_kernel_reads_them(math):
    # set_source from pageable host memory must be ordered with the steps' stream: a plain
    # cudaMemcpy may return before its DMA lands, and the Relu read a half-written input
    # (found on 200k-element tensors)
    from taso_env.engine.builder import GraphBuilder

    b = GraphBuilder("big_relu")
    b.output(b.relu(b.input("x", [1, 1 << 22])), "y")
    g = b.build()
    stored = np.float16 if math == "fp16" else np.float32
    with cb.Executor(g, math=math) as ex:
        for seed in range(3):
            x = np.random.default_rng(seed).standard_normal((1, 1 << 22)).astype(np.float32)
            np.testing.assert_array_equal(ex.run({"x": x})["y"], np.maximum(x.astype(stored), 0).astype(np.float32))


@pytest.mark.parametrize("n", [1, 7, 128, 129, 768, 1024, 1025, 3000])
@pytest.mark.parametrize("math", ["fp32", "fp16"])
def test_layer_norm_rows_of_every_length(n, math):
    # rows shorter and longer than a block of threads, 70 of them
    from taso_env.engine.builder import GraphBuilder

    b = GraphBuilder("ln", seed=0)
    b.output(b.layer_norm(b.input("x", [2, 35, n])), "y")
    _check(b.build(), rtol=1e-2 if math == "fp16" else RTOL, math=math)


def test_tf32_mode_runs_and_stays_close():
    _check(te.graphs.build("resnet18", seed=0), rtol=2e-2, math="tf32")


def test_measurement_uses_cuda_graphs_and_is_stable():
    g = te.graphs.build("resnet18", seed=None)
    with cb.Executor(g) as ex:
        a = ex.measure(warmup=5, repeats=20)
        b = ex.measure(warmup=5, repeats=20)
    assert a.cuda_graph and a.math == "fp32" and a.device == cb.device_name()
    assert 0 < a.min_ms <= a.median_ms and len(a.samples_ms) == 20
    assert abs(a.median_ms - b.median_ms) < 0.5 * a.median_ms


def test_tensors_shifted_in_memory_compute_the_same_and_a_misaligned_shift_is_refused():
    g = te.graphs.build("squeezenet", seed=0)
    feeds = g.random_inputs(0)
    at_start = cb.run(g, feeds)
    for offset in (cb.ARENA_ALIGN, 4095 * cb.ARENA_ALIGN):
        assert_close(cb.run(g, feeds, arena_offset=offset), at_start, rtol=0, what=f"offset {offset}")
    with pytest.raises(ValueError, match="multiple of 256"):
        cb.Executor(g, arena_offset=100)


def test_graphs_measured_in_interleaved_rounds_each_get_every_round():
    from taso_env.gpu import interleaved_measurement as im

    graphs = [te.graphs.build("squeezenet", seed=None), te.graphs.build("resnet18", seed=None)]
    seen = []
    runs = im.measure_interleaved(graphs, rounds=3, repeats=5, on_measured=lambda i, r, ms: seen.append((i, r)))
    assert sorted(seen) == [(i, r) for i in range(2) for r in range(3)]
    assert [len(each) for each in runs] == [3, 3] and all(ms > 0 for each in runs for ms in each)
    # resnet18 does far more work than squeezenet in every round
    assert min(runs[1]) > max(runs[0])


def test_an_evaluation_measures_each_agents_graph_beside_the_original(tmp_path):
    pytest.importorskip("onnxruntime", reason="the evaluation checks every graph with onnxruntime")
    pytest.importorskip("gymnasium", reason="the evaluation's agents step a Gymnasium environment")
    from controller.evaluation import EvalConfig, evaluate

    rows = evaluate(EvalConfig(graphs=("nasrnn",), agents=("greedy", "random"), random_episodes=1, horizon=5,
                               cost_model="table:h100_fp32", measure="cuda"), None, tmp_path)
    for row in rows:
        assert row.measured_original_ms > 0 and row.measured_optimised_ms > 0
        assert row.measured_speedup == pytest.approx(row.measured_original_ms / row.measured_optimised_ms)
    greedy = next(r for r in rows if r.agent == "greedy")
    assert greedy.speedup > 1.5 and greedy.measured_speedup > 1.5  # merged matmuls: the GPU sees the gain too


def test_optimize_measured_writes_the_optimised_model_where_it_measures_faster(tmp_path):
    """`rlflow optimize --measure cuda -o`: nasrnn's merged MatMuls measure faster on the
    GPU, so the optimised model is written (test_installation.py has the other case)."""
    import json

    from rlflow.cli import main

    out, summary = tmp_path / "out.onnx", tmp_path / "summary.json"
    assert main(["optimize", "nasrnn", "--method", "greedy", "--measure", "cuda", "-o", str(out),
                 "--json", str(summary)]) == 0
    result = json.loads(summary.read_text())
    assert result["cost_model"] == "table:h100_fp32" and result["written"] == "optimised"
    assert result["measured_original_ms"] > 1.5 * result["measured_optimised_ms"]
    te.set_cost_model("table:h100_fp32")
    assert te.graphs.load(str(out)).hash() == te.optimize(te.graphs.load("nasrnn"), "greedy").hash()


def test_repeated_measurements_do_not_grow_device_memory():
    g = te.graphs.build("squeezenet", seed=None)
    cb.measure(g, warmup=1, repeats=1)  # caches and handles are created once
    before = cb.memory_info()[0]
    for _ in range(30):
        cb.measure(g, warmup=1, repeats=2)
    assert abs(cb.memory_info()[0] - before) < (4 << 20)


def test_per_op_costs_are_measured_and_cached():
    g = te.graphs.build("resnet18", seed=None)
    rows, skipped = cb.measure_op_costs(g)
    sigs = {s for _, _, s, _ in te._core.op_signatures(g._core)}
    assert not skipped and {r[0] for r in rows} == sigs
    assert all(ms > 0 for _, _, ms, _ in rows)
    again, _ = cb.measure_op_costs(g)
    assert again == rows  # cached per signature


def test_cuda_cost_model_measures_on_first_use_and_saves(tmp_path):
    from taso_env.engine.cost_model import make_cost_model
    from taso_env.gpu import cost_table

    path = tmp_path / "costs.h5"
    model = make_cost_model(f"cuda:fp32:{path}")
    g = te.graphs.build("squeezenet", seed=None)
    cost = model.graph_cost(g)
    assert cost > 0 and model.measured > 0 and model.misses == 0
    result = te.search(g, "greedy", model=model)
    assert result.final_cost <= result.initial_cost
    model.save()
    table = cost_table.load(path)
    assert table.device == cb.device_name() and table.math == "fp32" and len(table) >= model.measured
    replay = make_cost_model(f"table:{path}")
    assert replay.graph_cost(g) == pytest.approx(cost)
    assert replay.misses == 0


def _steps_fused_and_not(g: te.Graph, math: str, monkeypatch) -> dict[str, int]:
    """{RLFLOW_FUSE value: executor steps} with executor fusion off ("0") and on ("1"),
    the outputs of both checked against the reference executor."""
    feeds = g.random_inputs(0)
    steps = {}
    for fuse in ("0", "1"):
        monkeypatch.setenv("RLFLOW_FUSE", fuse)
        with cb.Executor(g, math=math, plan=None) as ex:
            assert_close(ex.run(feeds), reference.run(g, feeds), 1e-2 if math == "fp16" else RTOL,
                         f"{g.name} fuse={fuse}")
            steps[fuse] = ex.num_steps
    return steps


def _split_graph(rows: int, part: int) -> te.Graph:
    """A batch-`rows` RNN cell after merge_parallel_matmuls: one GEMM for three gates,
    Split into them; a part through a Reshape, a part as a graph output."""
    from taso_env.engine.builder import GraphBuilder

    b = GraphBuilder(f"split_{rows}x{part}", seed=0)
    x = b.input("x", [rows, 32])
    i, f, o = b.split(b.matmul(x, b.weight("w", [32, 3 * part])), 1, [part, part, part])
    h = b.mul(b.sigmoid(i), b.tanh(b.reshape(b.reshape(f, [rows, part, 1]), [rows, part])))
    b.output(b.add(h, b.input("c", [rows, part])), "h")
    b.output(o, "o")
    return b.build()


@pytest.mark.parametrize("math", ["fp32", "fp16"])
def test_contiguous_split_parts_are_slices_of_their_input(math, monkeypatch):
    # [1, 3P] split on axis 1: every part is a contiguous slice of the GEMM's output, no
    # kernel (with 16-bit storage too). Two rows: the parts are strided; P = 40: the
    # second part would start unaligned. Both keep the Split's step. Same results all.
    steps = {}
    for rows, part in [(1, 128), (2, 128), (1, 40)]:
        for fuse, n in _steps_fused_and_not(_split_graph(rows, part), math, monkeypatch).items():
            steps[rows, part, fuse] = n
    assert steps[1, 128, "1"] == steps[1, 40, "1"] - 1 == steps[2, 128, "1"] - 1
    assert steps[1, 128, "0"] == steps[1, 40, "0"]  # without fusion every Split runs


def _fire_graph(shared: bool, nested: bool) -> te.Graph:
    """SqueezeNet's fire module: squeeze, two expand convolutions + ReLU, channel Concat;
    `shared`: one expand branch is also a graph output (it cannot live in the Concat's
    buffer); `nested`: the Concat is itself one input of a second Concat."""
    from taso_env.engine.builder import GraphBuilder

    b = GraphBuilder(f"fire_{shared}_{nested}", seed=0)
    s = b.relu(b.conv2d(b.input("x", [1, 32, 14, 14]), 16, 1))
    e1 = b.relu(b.conv2d(s, 64, 1))
    e3 = b.relu(b.conv2d(s, 64, 3, padding=1))
    y = b.concat([e1, e3], 1)
    if nested:
        y = b.concat([y, b.relu(b.conv2d(s, 32, 1))], 1)
    b.output(b.relu(y), "y")
    if shared:
        b.output(e1, "e1")
    return b.build()


@pytest.mark.parametrize("math", ["fp32", "fp16"])
def test_channel_concat_inputs_are_written_in_place(math, monkeypatch):
    # Each expand branch writes straight into its slice of the Concat's buffer: the
    # Concat runs no kernel (nested: neither does the inner one). A branch that is also a
    # graph output keeps the Concat's copy. Same results with fusion on and off.
    steps = {}
    for shared, nested in [(False, False), (True, False), (False, True)]:
        for fuse, n in _steps_fused_and_not(_fire_graph(shared, nested), math, monkeypatch).items():
            steps[shared, nested, fuse] = n
    assert steps[False, False, "1"] == steps[True, False, "1"] - 1
    assert steps[False, True, "1"] == steps[False, False, "1"] + 1  # the extra branch's convolution only


def test_constants_that_compute_the_same_value_are_stored_once():
    from taso_env.engine.builder import GraphBuilder

    def build(second: str) -> te.Graph:
        """x @ Concat(Concat(w1, w2), w3) and relu(x) @ a second constant: the same Concat
        built again (one merge per RNN step), the same weights grouped the other way, the
        weights in another order (another value), or the first Concat read twice."""
        b = GraphBuilder(f"concats_{second}", seed=0)
        x = b.input("x", [1, 256])
        w1, w2, w3 = (b.weight(f"w{i}", [256, 256]) for i in (1, 2, 3))
        first = b.concat([b.concat([w1, w2], 1), w3], 1)
        other = {"same": lambda: b.concat([b.concat([w1, w2], 1), w3], 1),
                 "regrouped": lambda: b.concat([w1, b.concat([w2, w3], 1)], 1),
                 "reordered": lambda: b.concat([w3, b.concat([w1, w2], 1)], 1),
                 "none": lambda: first}[second]()
        b.output(b.add(b.matmul(x, first), b.matmul(b.relu(x), other)), "y")
        return b.build()

    arena = {}
    for kind in ("same", "regrouped", "reordered", "none"):
        g = build(kind)
        feeds = g.random_inputs(0)
        with cb.Executor(g) as ex:
            assert_close(ex.run(feeds), reference.run(g, feeds), RTOL, kind)
            arena[kind] = ex.arena_bytes
    assert arena["same"] == arena["regrouped"] == arena["none"]
    assert arena["reordered"] == arena["none"] + 256 * 768 * 4


def test_nasrnn_greedy_graph_stores_each_merged_weight_once_and_computes_the_same():
    g = te.graphs.build("nasrnn", seed=0)
    best = te.search(g, "greedy", model="table:h100_fp32").graph
    feeds = g.random_inputs(0)
    assert_close(cb.run(best, feeds), reference.run(g, feeds), RTOL, "nasrnn greedy")
    weights = sum(int(np.prod(o.outputs[0].shape)) * 4 for o in g.weight_ops)  # 16 MiB
    with cb.Executor(best) as ex:
        # the merges fold 191 MiB of constants (Concats of weights, one per step, and the
        # Concats inside them), 62 MiB of them distinct values, fewer once nested Concats
        # are opened; activations take < 2 MiB
        assert ex.arena_bytes < weights + 64 * 2**20
