"""The table cost model prices the ops the CUDA executor runs in another op's step
(taso/epilogue.h: convolution and GEMM epilogues, GEMM scales, Transposes read as
strided views) at nothing and the ops that join an element-wise chain at a share of
their cost alone, as the executor runs them: every case of the rules, exact cost deltas
for rewrites that change which ops fuse, and search no longer credited for fusing what
the executor fuses anyway (tests/test_cuda_fusion.py checks on the GPU that the executor
runs each such op in a neighbour's step)."""

import random

import pytest
from graph_fixtures import (
    CONV_EPILOGUE_OPS,
    CONV_EPILOGUE_PATTERNS,
    CONV_PATTERN_CHAIN_OPS,
    chained_ops,
    conv_epilogue_graph,
    epilogue_free_ops,
)

import taso_env as te
from taso_env import shipped_data
from taso_env.gpu.cost_models import TableCostModel

TABLE = shipped_data.cost_tables()["h100_fp32"]
CHAIN_SHARE = 0.4  # taso/epilogue.h: kChainShare


@pytest.fixture(scope="module")
def models():
    return TableCostModel(TABLE), TableCostModel(TABLE, fused_epilogues=False)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pattern", CONV_EPILOGUE_PATTERNS)
def test_the_ops_a_convolution_runs_in_its_epilogue_cost_nothing(pattern, bias, models):
    g = conv_epilogue_graph(pattern, bias)
    free, fused, alone = epilogue_free_ops(g, *models)
    assert sorted(g.ops[i].type for i in free) == sorted(CONV_EPILOGUE_OPS[pattern])
    chained = chained_ops(fused, alone)
    assert sorted(g.ops[i].type for i in chained) == sorted(CONV_PATTERN_CHAIN_OPS.get(pattern, []))
    assert all(fused[i] == pytest.approx(CHAIN_SHARE * alone[i], abs=1e-12) for i in chained)
    assert all(fused[i] == pytest.approx(alone[i], abs=1e-12) for i in range(g.num_ops) if i not in free + chained)
    assert models[0].graph_cost(g) == pytest.approx(sum(fused))
    assert models[0].name.endswith(".h5") and models[1].name.endswith("+unfused")


def test_fusing_what_the_executor_fuses_anyway_saves_nothing(models):
    g = te.load_onnx(str(shipped_data.models()["resnet18"]))
    fused, alone = models
    cands = {m: [c for c in g.candidates(model=m) if c.rule_name == "fuse_conv_relu"] for m in models}
    assert cands[fused] and len(cands[fused]) == len(cands[alone])
    relu_ms = min(-c.cost_delta for c in cands[alone])
    assert relu_ms > 1e-3  # priced alone, each fusion saves a Relu kernel
    # run by the executor, the Relu was the convolution's epilogue already: what remains is
    # the measured difference of the two convolution kernels, a fraction of that
    assert all(abs(c.cost_delta) < 0.5 * relu_ms for c in cands[fused])
    assert te.search(g, "greedy", model=fused).speedup < 1.005 < te.search(g, "greedy", model=alone).speedup


def _transformer_block(pattern: str) -> tuple[te.Graph, dict]:
    """A small attention-and-MLP graph exercising one case of the GEMM / chain / view
    rules; returns the graph and {op name: how the table prices it: "free" (in an
    epilogue or a view), "chain" (a share of its cost alone) or "full"}."""
    b = te.GraphBuilder(f"steps_{pattern}", seed=0)
    x = b.input("x", [1, 16, 32])
    expect = {}
    if pattern == "bias_residual":  # MatMul -> Add(bias) -> Add(residual): both in the GEMM's epilogue
        y = b.op("MatMul", [x, b.weight("w", [32, 32])], name="mm")
        y = b.op("Add", [y, b.weight("bias_v", [32])], name="bias")
        y = b.op("Add", [y, x], name="residual")
        expect = {"mm": "full", "bias": "free", "residual": "free"}
    elif pattern == "gemm_read_twice":  # the result has two readers: nothing folds
        y = b.op("MatMul", [x, b.weight("w", [32, 32])], name="mm")
        y = b.op("Add", [b.op("Add", [y, b.weight("bias_v", [32])], name="bias"), y], name="sum")
        expect = {"mm": "full", "bias": "chain", "sum": "full"}  # the bias Add joins the sum's chain
    elif pattern == "relu_matmul":  # a MatMul with its own ReLU takes no epilogue
        y = b.op("MatMul", [x, b.weight("w", [32, 32])], activation=1, name="mm")
        y = b.op("Add", [y, b.weight("bias_v", [32])], name="bias")
        expect = {"bias": "full"}
    elif pattern == "out_transpose_and_views":  # heads split by a Transpose read by the GEMM
        q = b.reshape(b.op("MatMul", [x, b.weight("wq", [32, 32])], name="q"), [1, 16, 4, 8])
        q = b.op("Transpose", [q], perm=[0, 2, 1, 3], name="split_heads")
        k = b.op("Transpose", [q], perm=[0, 1, 3, 2], name="kt")
        s = b.op("MatMul", [b.op("Mul", [q, b.weight("scale_v", [1])], name="scale"), k], name="scores")
        p = b.softmax(b.op("Add", [s, b.weight("mask_v", [1, 1, 1, 16])], name="mask"), axis=-1)
        o = b.op("MatMul", [p, q], name="context")
        o = b.op("Transpose", [o], perm=[0, 2, 1, 3], name="merge_heads")
        y = b.reshape(o, [1, 16, 32])
        # (the [1, 1, 1, 16] mask is a bias of the scores along their last dim)
        expect = {"split_heads": "free", "kt": "free", "scale": "free", "mask": "free", "merge_heads": "free"}
    elif pattern == "gelu_chain":  # x * 0.5 * (1 + erf(x / c)): one kernel, ended by the last Mul
        h = b.op("Add", [b.op("MatMul", [x, b.weight("w", [32, 64])], name="mm"), b.weight("bias_v", [64])],
                 name="bias")
        d = b.op("Div", [h, b.weight("c_v", [1])], name="div")
        e = b.op("Erf", [d], name="erf")
        a = b.op("Add", [e, b.weight("one_v", [1])], name="plus1")
        y = b.op("Mul", [b.op("Mul", [h, a], name="times_x"), b.weight("half_v", [1])], name="half")
        expect = {"bias": "free", "div": "chain", "erf": "chain", "plus1": "chain", "times_x": "chain", "half": "full"}
    elif pattern == "broadcast_not_chained":  # a chain keeps one shape: a broadcast result starts its own
        r = b.op("Relu", [x], name="relu")
        y = b.op("Add", [r, b.input("z", [2, 16, 32])], name="wider")
        expect = {"relu": "full", "wider": "full"}
    elif pattern == "transpose_pair":  # a Transpose read by a Transpose read by a GEMM: both views
        t = b.op("Transpose", [b.op("Transpose", [x], perm=[0, 2, 1], name="t1")], perm=[0, 2, 1], name="t2")
        y = b.op("MatMul", [t, b.weight("w", [32, 8])], name="mm")
        expect = {"t1": "free", "t2": "free", "mm": "full"}
    elif pattern == "transpose_is_output":  # a graph output is written: no view
        t = b.op("Transpose", [x], perm=[0, 2, 1], name="t")
        b.output(t, "t")
        y = b.op("MatMul", [t, b.weight("w", [16, 8])], name="mm")
        expect = {"t": "full"}
    b.output(y, "y")
    return b.build(), expect


@pytest.mark.parametrize("pattern", ["bias_residual", "gemm_read_twice", "relu_matmul", "out_transpose_and_views",
                                     "gelu_chain", "broadcast_not_chained", "transpose_pair", "transpose_is_output"])
def test_gemm_epilogues_chains_scales_and_views_cost_nothing(pattern, models):
    g, expect = _transformer_block(pattern)
    free, fused, alone = epilogue_free_ops(g, *models)
    chained = chained_ops(fused, alone)
    by_name = {op.name: i for i, op in enumerate(g.ops)}
    for name, how in expect.items():
        i = by_name[name]
        assert ("free" if i in free else "chain" if i in chained else "full") == how, f"{pattern}: {name}"
    assert all(fused[i] == pytest.approx(CHAIN_SHARE * alone[i], abs=1e-12) for i in chained)
    assert all(fused[i] == pytest.approx(alone[i], abs=1e-12) for i in range(g.num_ops) if i not in free + chained)
    assert models[0].graph_cost(g) == pytest.approx(sum(fused))


def test_a_transformer_is_priced_near_its_measured_runtime(models):
    """bert_base (the ONNX export, 12 layers) measured 1.47 ms on the H100 with the
    executor's fusions (docs/gpu.md); pricing every op alone said 1.77 ms. Per layer its
    six bias Adds and two residual Adds run in GEMM epilogues, two head Transposes are
    views or written by a GEMM, and the GELU's Erf runs in a chain."""
    g = te.load_onnx(str(shipped_data.models()["bert_base"]))
    fused, alone = models
    assert fused.graph_cost(g) == pytest.approx(1.47, rel=0.12)
    assert alone.graph_cost(g) > 1.6
    free, fused_costs, alone_costs = epilogue_free_ops(g, fused, alone)
    chained = chained_ops(fused_costs, alone_costs)
    kinds = {t: sum(g.ops[i].type == t for i in free) for t in ("Add", "Transpose")}
    assert kinds["Add"] >= 12 * 6 and kinds["Transpose"] >= 12 * 2
    assert sum(g.ops[i].type == "Erf" for i in chained) == 12


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "mobilenet_v3_large", "squeezenet1_1", "bert_base",
                                  "coverage/qwen2_small", "coverage/distilbert", "coverage/gpt2",
                                  "coverage/t5_small_encoder", "coverage/bert_base_sdpa", "coverage/googlenet",
                                  "inception_v3"])
def test_cost_deltas_stay_exact_where_rewrites_change_what_fuses(name, models, models_dir):
    """A rewrite can make a kept op start or stop running in an epilogue (a merged
    convolution's readers, a reader removed or added): the candidates' deltas must still
    be the child's cost less the parent's, to the unit."""
    fused, alone = models
    g = te.load_onnx(str(models_dir / f"{name}.onnx"))
    rng = random.Random(0)
    differ = 0
    for _ in range(8):
        cands = g.candidates(model=fused)
        if not cands:
            break
        base = fused._model.graph_cost_units(g._core)
        by_place = {(c.rule_id, c.location): c.cost_delta for c in g.candidates(model=alone)}
        for c in rng.sample(cands, min(30, len(cands))):
            child = g.apply(c)
            assert fused._model.graph_cost_units(child._core) - base == round(c.cost_delta / 1e-12), c.rule_name
            differ += abs(by_place[(c.rule_id, c.location)] - c.cost_delta) > 1e-9
        g = g.apply(rng.choice(cands))
    assert differ >= 5  # the walk did exercise rewrites whose cost the fusion changes


def test_a_concat_its_producers_write_into_costs_nothing(models, models_dir):
    """SqueezeNet's Fire modules: each expand branch (convolution + ReLU) is read only by
    the channel Concat, so the executor writes it into its slice of the Concat's buffer
    and the Concat runs no kernel; the table prices those Concats at nothing. Where a
    branch is also read elsewhere (a graph output), the Concat is the copy it measures."""
    fused, alone = models
    g = te.load_onnx(str(models_dir / "squeezenet1_1.onnx"))
    costs, alone_costs = fused.op_costs(g), alone.op_costs(g)
    concats = [i for i, op in enumerate(g.ops) if op.type == "Concat"]
    assert len(concats) == 8 and all(costs[i] == 0 and alone_costs[i] > 0 for i in concats)

    def fire(branch_is_output: bool) -> float:  # the Concat's cost
        b = te.GraphBuilder("fire", seed=0)
        x = b.input("x", [1, 64, 27, 27])
        left, right = b.relu(b.conv2d(x, 128, [1, 1])), b.relu(b.conv2d(x, 128, [3, 3], padding=[1, 1]))
        b.output(b.concat([left, right], axis=1), "y")
        if branch_is_output:
            b.output(right, "branch")
        graph = b.build()
        return fused.op_costs(graph)[[op.type for op in graph.ops].index("Concat")]

    assert fire(False) == 0 and fire(True) > 0
