"""Export covers every modelled op: graphs exported to ONNX compute in onnxruntime what
the numpy reference executor computes — for an all-ops graph and every builder."""

import pytest

import taso_env as te
from taso_env import dtypes
from taso_env.onnx_check import round_trip_check


def _all_ops_graph() -> te.Graph:
    b = te.GraphBuilder("all_ops", seed=0)
    x = b.input("x", [1, 4, 8, 8])
    ids = b.input("ids", [2, 3], dtypes.INT64)
    y = b.conv2d(x, 8, 1, activation="relu", name="c1x1")
    w3 = b.weight("w3", [8, 4, 1, 1])
    big = b.op("Enlarge", [w3], kernel=[3, 3])
    y = b.add(y, b.op("Conv2D", [x, big], pads=[1, 1, 1, 1], activation=2))
    y = b.batch_norm(y)
    y = b.op("Sub", [y, b.op("Tanh", [y])])
    one = b.op("Constant", [], value=1.0, shape=[1])
    y = b.op("Div", [y, b.op("Add", [b.op("Exp", [b.op("Sigmoid", [y])]), one])])
    left, right = b.split(y, axis=1, sizes=[3, 5])
    y = b.concat([b.op("Sqrt", [b.op("Relu", [right])]), left], axis=1)
    y = b.max_pool(y, 3, 2, padding=1, ceil_mode=True)
    y = b.avg_pool(b.pad(y, [0, 0, 1, 0, 0, 0, 0, 1], value=0.5), 2, 1, count_include_pad=True)
    pooled = b.global_avg_pool(y)
    t = b.transpose(b.reshape(y, [1, 8, -1]), [0, 2, 1])  # [1, 16, 8]
    t = b.layer_norm(t)
    t = b.op("MatMul", [t, b.weight("wm", [8, 8])], activation=3)
    t = b.gelu(b.op("Erf", [t]))
    t = b.softmax(b.op("Mul", [t, b.op("Identity", [t])]), axis=-1)
    flat = b.flatten(pooled)
    g = b.op("Gemm", [flat, b.weight("wg", [6, 8]), b.weight("bg", [6])], trans_b=1, alpha=0.5, beta=2.0)
    emb = b.op("Gather", [b.weight("table", [10, 6]), ids], axis=0)  # [2, 3, 6]
    mask = b.op("Cast", [ids], to=dtypes.BOOL)
    sel = b.op("Where", [b.reshape(mask, [2, 3, 1]), emb, b.op("Add", [emb, emb])])
    b.output(b.reduce_mean(t, axes=[1], keepdims=False), "attention")
    b.output(g, "logits")
    b.output(b.op("ReduceSum", [sel], axes=[0, 2], keepdims=1), "selected")
    return b.build()


def _compare(g: te.Graph):
    report = round_trip_check(g, seed=7)
    assert report.ok, f"{g.name}: {report}"
    assert report.checked_against == "the numpy reference executor"


def test_all_ops_graph_uses_every_modelled_op_type():
    from taso_env import _core

    used = {o.type for o in _all_ops_graph().ops}
    assert used == set(_core.list_op_types()) - {"Opaque"}


def test_all_ops_graph_exports_and_matches_the_reference_executor():
    g = _all_ops_graph()
    model = g.export_onnx()
    assert model.opset_import[0].version == 20  # Gelu needs opset 20
    _compare(g)


@pytest.mark.parametrize("name", te.graphs.names())
def test_builder_graph_exports_and_matches_the_reference_executor(name):
    kwargs = {"num_layers": 2} if name == "bert_base" else {}
    if name == "vit_base":
        kwargs = {"num_layers": 2}
    _compare(te.graphs.build(name, **kwargs))
