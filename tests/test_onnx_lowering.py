"""ONNX nodes lowered at import into modelled ops (taso_env/onnx/lowering.py): GatherND
with constant indices and And load with no opaque op and compute what onnxruntime
computes on the original node; configurations the lowering does not cover stay opaque."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import taso_env as te
from taso_env.engine import reference
from taso_env.onnx.check import run_onnxruntime


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "lowering", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _gather_nd(data_shape, indices: np.ndarray) -> onnx.ModelProto:
    k = indices.shape[-1]
    out_shape = list(indices.shape[:-1]) + list(data_shape[k:])
    return _model([helper.make_node("GatherND", ["x", "idx"], ["y"])],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                  [numpy_helper.from_array(indices.astype(np.int64), "idx")])


def _same_as_onnxruntime(model: onnx.ModelProto, feeds) -> te.Graph:
    g = te.load_onnx(model)
    want = run_onnxruntime(model, feeds)
    got = reference.run(g, feeds)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    return g


@pytest.mark.parametrize("data_shape, indices", [
    ((4, 5), np.array([[1], [3], [-1]])),                       # whole rows, a negative index
    ((3, 4, 5), np.array([[[0, 1], [2, 3]], [[1, 0], [-1, -2]]])),  # two leading dims
    ((2, 3), np.array([[0, 2], [1, 1]])),                        # single elements
    ((1, 128), np.stack([np.zeros(128), np.arange(128)], -1).reshape(1, 1, 1, 128, 2)),  # BERT's mask
])
def test_gather_nd_with_constant_indices_loads_as_reshape_and_gather(data_shape, indices):
    x = np.random.default_rng(0).standard_normal(data_shape).astype(np.float32)
    g = _same_as_onnxruntime(_gather_nd(data_shape, indices.astype(np.int64)), {"x": x})
    assert {o.type for o in g.ops} >= {"Reshape", "Gather"} and "Opaque" not in {o.type for o in g.ops}


def test_and_loads_as_where_on_uint8():
    shape = [2, 1, 4]
    m = _model([helper.make_node("And", ["a", "b"], ["y"])],
               [helper.make_tensor_value_info("a", TensorProto.BOOL, shape),
                helper.make_tensor_value_info("b", TensorProto.BOOL, [3, 1])],
               [helper.make_tensor_value_info("y", TensorProto.BOOL, [2, 3, 4])])
    rng = np.random.default_rng(1)
    g = _same_as_onnxruntime(m, {"a": rng.random(shape) > 0.5, "b": rng.random((3, 1)) > 0.5})
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == ["Cast", "Where", "Cast"]


def test_uncovered_gather_nd_stays_opaque():
    runtime_indices = _model([helper.make_node("GatherND", ["x", "i"], ["y"])],
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 5]),
                              helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])])
    batched = _gather_nd((2, 3), np.array([[0], [2]]))
    batched.graph.node[0].attribute.append(helper.make_attribute("batch_dims", 1))
    del batched.graph.output[:]
    batched.graph.output.append(helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]))
    for m in (runtime_indices, batched):
        g = te.load_onnx(m)
        assert [o.attrs["onnx_op_type"] for o in g.ops if o.type == "Opaque"] == [b"GatherND"]
