"""Constant folding at import (taso_env/onnx/folding.py): subgraphs computing constants
(masks, index tables, Shape of static tensors) load as weights with data, computing what
onnxruntime computes; weights without data and fed inputs are never folded."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import taso_env as te
from taso_env.engine import reference
from taso_env.onnx.check import run_onnxruntime


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "folding", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def test_a_window_mask_computed_from_constants_loads_as_one_weight():
    # Swin-like: zeros, a region written by ScatterND, compared with 0, selected by Where;
    # then added to the input.
    idx = np.array([[0, 2], [1, 3]], dtype=np.int64)
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["zeros"],
                              value=numpy_helper.from_array(np.zeros(1, np.float32))),
             helper.make_node("ScatterND", ["zeros", "idx", "fill"], ["marked"]),
             helper.make_node("Equal", ["marked", "zero"], ["same"]),
             helper.make_node("Not", ["same"], ["differs"]),
             helper.make_node("Where", ["differs", "minus", "zero"], ["mask"]),
             helper.make_node("Add", ["x", "mask"], ["y"])]
    inits = [numpy_helper.from_array(np.array([2, 4], np.int64), "shape"), numpy_helper.from_array(idx, "idx"),
             numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "fill"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(-100.0, np.float32), "minus")]
    m = _model(nodes, [_f32("x", [2, 4])], [_f32("y", [2, 4])], inits)
    g = te.load_onnx(m)
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == ["Add"]
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_array_equal(reference.run(g, {"x": x})["y"], run_onnxruntime(m, {"x": x})["y"])


def test_shape_of_a_static_tensor_is_a_constant():
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["rows"], axis=0),
             helper.make_node("Unsqueeze", ["rows", "axes"], ["rows1"]),
             helper.make_node("Concat", ["rows1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    m = _model(nodes, [_f32("x", [3, 2, 2])], [_f32("y", [3, 4])], inits)
    g = te.load_onnx(m)
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == ["Reshape"]
    x = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    np.testing.assert_array_equal(reference.run(g, {"x": x})["y"], x.reshape(3, 4))


def test_position_ids_gathered_from_a_buffer_fold_with_numpy_semantics():
    # GatherElements of 128 columns (onnx 1.23's reference implementation fails on it)
    table = np.arange(512, dtype=np.int64).reshape(1, 512) * 3
    cols = np.arange(128, dtype=np.int64).reshape(1, 128)[:, ::-1].copy()
    nodes = [helper.make_node("GatherElements", ["table", "cols"], ["ids"], axis=1),
             helper.make_node("Gather", ["emb", "ids"], ["y"], axis=0)]
    m = _model(nodes, [_f32("emb", [1536, 4])], [_f32("y", [1, 128, 4])],
               [numpy_helper.from_array(table, "table"), numpy_helper.from_array(cols, "cols")])
    g = te.load_onnx(m)
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == ["Gather"]
    emb = np.random.default_rng(1).standard_normal((1536, 4)).astype(np.float32)
    np.testing.assert_array_equal(reference.run(g, {"emb": emb})["y"], run_onnxruntime(m, {"emb": emb})["y"])


def test_what_depends_on_inputs_or_stripped_weights_is_not_folded():
    stripped = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    stripped.doc_string = "weight: initializer data stripped"
    nodes = [helper.make_node("Mul", ["w", "two"], ["w2"]), helper.make_node("Add", ["x", "w2"], ["y"])]
    m = _model(nodes, [_f32("x", [4]), stripped], [_f32("y", [4])],
               [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    g = te.load_onnx(m)
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == ["Mul", "Add"]


def test_a_learned_weight_gathered_at_constant_positions_stays_a_gather():
    table = np.random.default_rng(2).standard_normal((2, 32)).astype(np.float32)  # token-type embeddings
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], axis=0),
             helper.make_node("Add", ["x", "emb"], ["y"])]
    m = _model(nodes, [_f32("x", [1, 3, 32])], [_f32("y", [1, 3, 32])],
               [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.zeros((1, 3), np.int64), "ids")])
    assert [o.type for o in te.load_onnx(m).ops if o.type not in ("Input", "Weight")] == ["Gather", "Add"]
