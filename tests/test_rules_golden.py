"""Golden tests: each rule family fires on a small graph and gives the expected result."""

import numpy as np
import pytest

import taso_env as te
from taso_env.engine import reference
from taso_env.onnx.check import random_feeds


def _apply_named(g: te.Graph, name: str) -> te.Graph:
    cands = [c for c in g.candidates() if c.rule_name == name]
    assert cands, f"{name} did not fire; candidates: {sorted({c.rule_name for c in g.candidates()})}"
    return g.apply(cands[0])


def _same_outputs(a: te.Graph, b: te.Graph, seed: int = 0):
    feeds = random_feeds(a, seed)
    want, got = reference.run(a, feeds), reference.run(b, feeds)
    for name in want:
        scale = float(np.abs(want[name]).max())
        np.testing.assert_allclose(got[name], want[name], atol=1e-5 + 1e-4 * scale, rtol=0)


def _compute_types(g):
    return sorted(o.type for o in g.ops if o.type not in ("Input", "Weight"))


def test_activation_fusion_fuses_conv_relu():
    b = te.GraphBuilder("g")
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.relu(b.conv2d(x, 8, 3, padding=1)), "y")
    g = b.build()
    g2 = _apply_named(g, "fuse_conv_relu")
    assert _compute_types(g2) == ["Conv2D"]
    assert next(o for o in g2.ops if o.type == "Conv2D").attrs["activation"] == 1
    assert g2.cost() < g.cost()
    _same_outputs(g, g2)


def test_folding_removes_batchnorm_at_no_run_time_cost():
    b = te.GraphBuilder("g")
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.batch_norm(b.conv2d(x, 8, 3, padding=1), epsilon=1e-3), "y")
    g = b.build()
    g2 = _apply_named(g, "fold_conv_batchnorm")
    assert "BatchNorm" not in _compute_types(g2)
    conv = next(o for o in g2.ops if o.type == "Conv2D")
    runtime_ops = [o for o, c in zip(g2.ops, g2.op_costs()) if c > 0]
    assert runtime_ops == [conv]  # the weight arithmetic is folded away
    _same_outputs(g, g2)


def test_merging_fuses_the_three_attention_projections():
    b = te.GraphBuilder("g")
    x = b.input("x", [1, 16, 32])
    outs = [b.linear(x, 32, bias=False, name=n) for n in ("q", "k", "v")]
    for i, o in enumerate(outs):
        b.output(o, f"y{i}")
    g = b.build()
    g2 = _apply_named(g, "merge_parallel_matmuls_3way")
    assert _compute_types(g2) == ["Concat", "MatMul", "Split"]
    assert g2.cost() < g.cost()
    _same_outputs(g, g2)


def test_kernel_enlargement_enables_merging_1x1_and_3x3_siblings():
    b = te.GraphBuilder("fire")
    x = b.input("x", [1, 16, 13, 13])
    e1 = b.conv2d(x, 32, 1, activation="relu", name="e1")
    e3 = b.conv2d(x, 32, 3, padding=1, activation="relu", name="e3")
    b.output(b.concat([e1, e3], axis=1), "y")
    g = b.build()
    g2 = _apply_named(g, "enlarge_conv_1x1_to_3x3")
    g3 = _apply_named(g2, "merge_parallel_convs")
    g4 = _apply_named(g3, "concat_of_split")
    assert [o.type for o in g4.ops if o.type not in ("Input", "Weight")] == ["Enlarge", "Concat", "Concat", "Conv2D"]
    runtime = [o.type for o, c in zip(g4.ops, g4.op_costs()) if c > 0]
    assert runtime == ["Conv2D"]  # one convolution left at run time
    assert g4.cost() < g.cost()
    _same_outputs(g, g4)


def test_split_concat_elimination_removes_both_ops():
    b = te.GraphBuilder("g")
    x = b.input("x", [1, 6, 4])
    parts = b.split(x, axis=1, sizes=[2, 4])
    b.output(b.relu(b.concat(parts, axis=1)), "y")
    g = b.build()
    g2 = _apply_named(g, "concat_of_split")
    assert _compute_types(g2) == ["Relu"]
    _same_outputs(g, g2)


def test_elementwise_across_split_hoists_the_activation():
    b = te.GraphBuilder("g")
    x = b.input("x", [1, 6, 4])
    p, q = b.split(x, axis=1, sizes=[2, 4])
    b.output(b.relu(p), "a")
    b.output(b.relu(q), "b")
    g = b.build()
    g2 = _apply_named(g, "relu_after_split")
    assert _compute_types(g2) == ["Relu", "Split"]
    _same_outputs(g, g2)


def test_transpose_pair_cancels():
    b = te.GraphBuilder("g")
    x = b.input("x", [2, 3, 4])
    t = b.transpose(b.transpose(x, [1, 2, 0]), [2, 0, 1])
    b.output(b.relu(t), "y")
    g = b.build()
    g2 = _apply_named(g, "cancel_transpose_pair")
    assert _compute_types(g2) == ["Relu"]
    _same_outputs(g, g2)


def test_algebra_sums_matmuls_of_the_same_input():
    b = te.GraphBuilder("g")
    x = b.input("x", [4, 8])
    w1, w2 = b.weight("w1", [8, 8]), b.weight("w2", [8, 8])
    b.output(b.add(b.matmul(x, w1), b.matmul(x, w2)), "y")
    g = b.build()
    g2 = _apply_named(g, "merge_matmuls_summed")
    assert [o.type for o, c in zip(g2.ops, g2.op_costs()) if c > 0] == ["MatMul"]
    _same_outputs(g, g2)


def test_unsound_matches_are_not_offered():
    # the conv output is also read by another op: fusing the relu would lose it
    b = te.GraphBuilder("g")
    x = b.input("x", [1, 4, 8, 8])
    c = b.conv2d(x, 4, 3, padding=1)
    b.output(b.relu(c), "y")
    b.output(b.sigmoid(c), "z")
    g = b.build()
    assert not [c for c in g.candidates() if c.rule_name.startswith("fuse_conv")]
    # merging two matmuls where one's weight depends on the other would create a cycle
    b = te.GraphBuilder("g")
    x = b.input("x", [8, 8])
    m1 = b.matmul(x, b.weight("w", [8, 8]))
    m2 = b.matmul(x, b.relu(m1))
    b.output(m2, "y")
    b.output(m1, "z")
    assert not [c for c in b.build().candidates() if c.rule_name == "merge_parallel_matmuls"]


def test_stale_candidate_is_refused():
    g = te.graphs.load("data/models/squeezenet1_1.onnx")
    c = g.candidates()[0]
    g2 = g.apply(c)
    with pytest.raises(ValueError, match="does not apply"):
        g2.apply(te.Candidate(c.rule_id, (0,) * len(c.location), 0.0))
