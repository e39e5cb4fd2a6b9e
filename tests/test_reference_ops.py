"""Tests of the numpy reference executor against onnxruntime, op by op.

Each op is compared with a one-node ONNX model (or a tiny chain, for fused
activations) run on onnxruntime's CPU provider. `run()` is tested on a minimal
duck-typed fake graph, since only the graph interface matters to it.
"""

from __future__ import annotations

import math
import re
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from taso_env.engine import reference, reference_ops
from taso_env.engine.reference import execute_op
from taso_env.errors import (
    ExecutionError,
    MissingFeedError,
    OpAttributeError,
    ShapeError,
    UnsupportedOpError,
)

RTOL, ATOL = 1e-4, 1e-5


def _rand(rng: np.random.Generator, shape, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def _ort(nodes, feeds: dict[str, np.ndarray], out_dtypes, opset: int = 17,
         consts: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Runs ONNX `nodes` (outputs y0, y1, ...) on onnxruntime CPU."""
    inputs = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for k, v in feeds.items()]
    outputs = [helper.make_tensor_value_info(f"y{i}", helper.np_dtype_to_tensor_dtype(np.dtype(d)),
                                             None) for i, d in enumerate(out_dtypes)]
    inits = [numpy_helper.from_array(v, k) for k, v in (consts or {}).items()]
    graph = helper.make_graph(nodes, "one_op", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _compare(op_type: str, attrs: dict, inputs: list[np.ndarray], nodes, feeds, opset: int = 17,
             consts=None) -> None:
    """Runs `execute_op` and the ONNX model and checks shapes, dtypes and values agree."""
    ours = execute_op(op_type, attrs, inputs)
    theirs = _ort(nodes, feeds, [o.dtype for o in ours], opset, consts)
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs):
        assert got.shape == want.shape
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _node(op: str, inputs: list[str], n_out: int = 1, **attrs):
    return helper.make_node(op, inputs, [f"y{i}" for i in range(n_out)], **attrs)


# ------------------------------------------------------------------------ Conv / matmul
CONV_CASES = [
    # x shape, w shape, strides, pads (t, l, b, r), dilations, group, activation, bias
    ((2, 3, 9, 9), (4, 3, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 1, 0, True),
    ((1, 3, 10, 11), (5, 3, 3, 3), [2, 2], [0, 1, 2, 1], [1, 1], 1, 1, True),
    ((1, 2, 12, 12), (3, 2, 3, 3), [1, 1], [2, 2, 2, 2], [2, 2], 1, 2, False),
    ((2, 4, 8, 8), (6, 2, 3, 3), [1, 2], [1, 0, 1, 2], [1, 1], 2, 3, True),
    ((1, 6, 7, 7), (6, 1, 3, 3), [1, 1], [1, 1, 1, 1], [1, 1], 6, 1, True),   # depthwise
    ((1, 4, 9, 9), (8, 1, 5, 5), [2, 2], [2, 2, 2, 2], [1, 1], 4, 0, False),  # depthwise x2
    ((2, 8, 5, 5), (16, 8, 1, 1), [1, 1], [0, 0, 0, 0], [1, 1], 1, 0, False),
    ((1, 3, 11, 13), (4, 3, 3, 5), [2, 1], [0, 2, 1, 0], [1, 2], 1, 2, True),
    ((1, 3, 224, 224), (8, 3, 7, 7), [2, 2], [3, 3, 3, 3], [1, 1], 1, 1, True),
]
ACT_NODES = {1: "Relu", 2: "Sigmoid", 3: "Tanh"}


@pytest.mark.parametrize("xs, ws, strides, pads, dil, group, act, bias", CONV_CASES)
def test_conv2d(xs, ws, strides, pads, dil, group, act, bias):
    rng = np.random.default_rng(0)
    x, w, b = _rand(rng, xs), _rand(rng, ws), _rand(rng, (ws[0],))
    attrs = {"strides": strides, "pads": pads, "dilations": dil, "group": group, "activation": act}
    names = ["x", "w", "b"] if bias else ["x", "w"]
    conv_out = "c" if act else "y0"
    nodes = [helper.make_node("Conv", names, [conv_out], strides=strides, pads=pads,
                              dilations=dil, group=group, kernel_shape=list(ws[2:]))]
    if act:
        nodes.append(helper.make_node(ACT_NODES[act], ["c"], ["y0"]))
    inputs = [x, w, b] if bias else [x, w]
    _compare("Conv2D", attrs, inputs, nodes, dict(zip(names, inputs)))


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 6)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3)),
    ((7, 1, 2, 8), (1, 3, 8, 2)),
])
@pytest.mark.parametrize("act", [0, 1, 2, 3])
def test_matmul(a_shape, b_shape, act):
    rng = np.random.default_rng(1)
    a, b = _rand(rng, a_shape), _rand(rng, b_shape)
    nodes = [helper.make_node("MatMul", ["a", "b"], ["m" if act else "y0"])]
    if act:
        nodes.append(helper.make_node(ACT_NODES[act], ["m"], ["y0"]))
    _compare("MatMul", {"activation": act}, [a, b], nodes, {"a": a, "b": b})


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape, alpha, beta", [
    (None, 1.0, 1.0), ((3, 5), 1.0, 1.0), ((5,), 0.5, 2.0), ((1, 5), 2.0, -1.0), ((3, 1), 1.0, 0.0),
])
def test_gemm(trans_a, trans_b, c_shape, alpha, beta):
    rng = np.random.default_rng(2)
    a = _rand(rng, (4, 3) if trans_a else (3, 4))
    b = _rand(rng, (5, 4) if trans_b else (4, 5))
    inputs, names = [a, b], ["a", "b"]
    if c_shape is not None:
        inputs.append(_rand(rng, c_shape))
        names.append("c")
    attrs = {"trans_a": trans_a, "trans_b": trans_b, "alpha": alpha, "beta": beta}
    node = _node("Gemm", names, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    _compare("Gemm", attrs, inputs, [node], dict(zip(names, inputs)))


# ------------------------------------------------------------------------- element-wise
@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("a_shape, b_shape", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)),
                                              ((2, 1, 4), (3, 1)), ((), (5, 2))])
def test_binary(op, a_shape, b_shape):
    rng = np.random.default_rng(3)
    a, b = _rand(rng, a_shape), _rand(rng, b_shape)
    _compare(op, {}, [a, b], [_node(op, ["a", "b"])], {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_binary_integer(op, dtype):
    rng = np.random.default_rng(4)
    a = rng.integers(-50, 50, (3, 4)).astype(dtype)
    b = rng.choice([-7, -3, -1, 1, 2, 5], (3, 4)).astype(dtype)
    _compare(op, {}, [a, b], [_node(op, ["a", "b"])], {"a": a, "b": b})


@pytest.mark.parametrize("op", ["Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Identity"])
def test_unary(op):
    rng = np.random.default_rng(5)
    x = _rand(rng, (3, 4, 5)) * 3
    x.flat[:4] = [-80.0, 80.0, 0.0, -1e-3]
    if op == "Sqrt":
        x = np.abs(x)
    _compare(op, {}, [x], [_node(op, ["x"])], {"x": x})


@pytest.mark.parametrize("shape", [(7,), (2, 64, 33)])
@pytest.mark.parametrize("use_scipy", [True, False])
def test_gelu(shape, use_scipy, monkeypatch):
    if not use_scipy:  # exercise the rational-approximation fallback
        monkeypatch.setattr(reference_ops, "_scipy_erf", None)
    elif reference_ops._scipy_erf is None:
        pytest.skip("scipy is not installed")
    rng = np.random.default_rng(6)
    x = _rand(rng, shape) * 4
    _compare("Gelu", {}, [x], [_node("Gelu", ["x"])], {"x": x}, opset=20)


def test_erf_fallback_accuracy():
    x = np.concatenate([np.linspace(-6, 6, 20001), [0.0, 1e-9, -1e-9, 0.4999, 0.5, 30.0]])
    want = np.array([math.erf(v) for v in x])
    got = reference_ops._erf_fallback(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=2e-7)


# -------------------------------------------------------------------------- data movement
@pytest.mark.parametrize("axis, n", [(0, 1), (1, 3), (2, 2)])
def test_concat(axis, n):
    rng = np.random.default_rng(7)
    xs = [_rand(rng, (2, 3, 4)) for _ in range(n)]
    names = [f"x{i}" for i in range(n)]
    _compare("Concat", {"axis": axis}, xs, [_node("Concat", names, axis=axis)], dict(zip(names, xs)))


@pytest.mark.parametrize("axis, sizes", [(0, [1, 3]), (1, [2, 2, 1]), (2, [6]), (2, [0, 4, 2])])
def test_split(axis, sizes):
    x = _rand(np.random.default_rng(8), (4, 5, 6))
    node = _node("Split", ["x", "s"], len(sizes), axis=axis)
    _compare("Split", {"axis": axis, "split": sizes}, [x], [node], {"x": x},
             consts={"s": np.array(sizes, np.int64)})


def test_split_bad_sizes():
    with pytest.raises(ShapeError, match="do not add up"):
        execute_op("Split", {"axis": 0, "split": [1, 1]}, [np.zeros((3, 2), np.float32)])


@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [3, 2, 1, 0], None])
def test_transpose(perm):
    x = _rand(np.random.default_rng(9), (2, 3, 4, 5))
    attrs = {} if perm is None else {"perm": perm}
    node = _node("Transpose", ["x"]) if perm is None else _node("Transpose", ["x"], perm=perm)
    _compare("Transpose", attrs, [x], [node], {"x": x})


@pytest.mark.parametrize("shape", [[6, 20], [2, 3, 4, 5], [120], [1, 6, 1, 20]])
def test_reshape(shape):
    x = _rand(np.random.default_rng(10), (2, 3, 4, 5))
    _compare("Reshape", {"shape": shape}, [x], [_node("Reshape", ["x", "s"])], {"x": x},
             consts={"s": np.array(shape, np.int64)})


def test_reshape_bad_size():
    with pytest.raises(ShapeError, match="cannot reshape"):
        execute_op("Reshape", {"shape": [7]}, [np.zeros((2, 3), np.float32)])


@pytest.mark.parametrize("axis", [0, 1, 2, 4])
def test_flatten(axis):
    x = _rand(np.random.default_rng(11), (2, 3, 4, 5))
    _compare("Flatten", {"axis": axis}, [x], [_node("Flatten", ["x"], axis=axis)], {"x": x})


# --------------------------------------------------------------------------------- pooling
POOL_CASES = [
    # x shape, kernel, strides, pads, ceil_mode
    ((1, 2, 8, 8), [2, 2], [2, 2], [0, 0, 0, 0], 0),
    ((2, 3, 9, 9), [3, 3], [2, 2], [1, 1, 1, 1], 0),
    ((1, 2, 10, 7), [3, 2], [2, 1], [0, 1, 2, 0], 0),
    ((1, 2, 6, 6), [3, 3], [2, 2], [0, 0, 0, 0], 1),
    ((1, 2, 4, 4), [2, 2], [2, 2], [0, 0, 1, 1], 1),   # last window would start in the pad
    ((1, 1, 7, 8), [3, 3], [3, 2], [1, 1, 1, 0], 1),
    ((1, 64, 112, 112), [3, 3], [2, 2], [1, 1, 1, 1], 0),
]


@pytest.mark.parametrize("xs, kernel, strides, pads, ceil_mode", POOL_CASES)
def test_max_pool(xs, kernel, strides, pads, ceil_mode):
    x = _rand(np.random.default_rng(12), xs) - 5.0  # all negative: a 0 pad would win
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode}
    node = _node("MaxPool", ["x"], kernel_shape=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode)
    _compare("MaxPool2D", attrs, [x], [node], {"x": x})


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("xs, kernel, strides, pads, ceil_mode", POOL_CASES)
def test_avg_pool(xs, kernel, strides, pads, ceil_mode, count_include_pad):
    x = _rand(np.random.default_rng(13), xs)
    attrs = {"kernel": kernel, "strides": strides, "pads": pads, "ceil_mode": ceil_mode,
             "count_include_pad": count_include_pad}
    node = _node("AveragePool", ["x"], kernel_shape=kernel, strides=strides, pads=pads,
                 ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    _compare("AvgPool2D", attrs, [x], [node], {"x": x})


def test_global_avg_pool():
    x = _rand(np.random.default_rng(14), (2, 5, 7, 3))
    _compare("GlobalAvgPool", {}, [x], [_node("GlobalAveragePool", ["x"])], {"x": x})


# ---------------------------------------------------------------------------- normalisation
@pytest.mark.parametrize("shape, eps", [((2, 4, 5, 5), 1e-5), ((3, 4), 1e-3), ((2, 4, 6), 0.1)])
def test_batch_norm(shape, eps):
    rng = np.random.default_rng(15)
    x = _rand(rng, shape)
    scale, bias, mean = (_rand(rng, (shape[1],)) for _ in range(3))
    var = np.abs(_rand(rng, (shape[1],))) + 0.1
    names = ["x", "scale", "bias", "mean", "var"]
    inputs = [x, scale, bias, mean, var]
    node = _node("BatchNormalization", names, epsilon=eps)
    _compare("BatchNorm", {"epsilon": eps}, inputs, [node], dict(zip(names, inputs)))


@pytest.mark.parametrize("shape, axis, with_bias", [
    ((2, 5, 16), 2, True), ((2, 5, 16), 1, True), ((3, 8), 1, False), ((2, 3, 4, 5), 3, False),
])
def test_layer_norm(shape, axis, with_bias):
    rng = np.random.default_rng(16)
    x = _rand(rng, shape) * 3 + 1
    scale, bias = _rand(rng, shape[axis:]), _rand(rng, shape[axis:])
    names = ["x", "scale", "bias"] if with_bias else ["x", "scale"]
    inputs = [x, scale, bias] if with_bias else [x, scale]
    node = _node("LayerNormalization", names, axis=axis, epsilon=1e-5)
    _compare("LayerNorm", {"axis": axis, "epsilon": 1e-5}, inputs, [node], dict(zip(names, inputs)))


@pytest.mark.parametrize("shape, axis", [((2, 5), 1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((3, 4), -1)])
def test_softmax(shape, axis):
    x = _rand(np.random.default_rng(17), shape) * 20  # large values: needs the max shift
    _compare("Softmax", {"axis": axis}, [x], [_node("Softmax", ["x"], axis=axis)], {"x": x})


# --------------------------------------------------------------------------------- others
@pytest.mark.parametrize("old, new", [((3, 3), (5, 5)), ((1, 1), (3, 3)), ((1, 3), (5, 3)),
                                      ((3, 3), (3, 3))])
def test_enlarge(old, new):
    w = _rand(np.random.default_rng(18), (4, 2) + old)
    (got,) = execute_op("Enlarge", {"kernel": list(new)}, [w])
    dh, dw = (new[0] - old[0]) // 2, (new[1] - old[1]) // 2
    want = np.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw)))
    assert got.dtype == w.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel", [[4, 3], [1, 3], [3]])
def test_enlarge_bad_kernel(kernel):
    with pytest.raises(OpAttributeError):
        execute_op("Enlarge", {"kernel": kernel}, [np.zeros((2, 2, 3, 3), np.float32)])


@pytest.mark.parametrize("pads, value", [([0, 1, 2, 0, 0, 3], 0.0), ([1, 1, 1, 1, 1, 1], -2.5),
                                         ([0, 0, 0, 0, 0, 0], 0.0)])
def test_pad(pads, value):
    x = _rand(np.random.default_rng(19), (2, 3, 4))
    consts = {"p": np.array(pads, np.int64), "v": np.array(value, np.float32)}
    _compare("Pad", {"pads": pads, "value": value}, [x], [_node("Pad", ["x", "p", "v"])], {"x": x},
             consts=consts)


@pytest.mark.parametrize("axes", [[1], [0, 2], [3], None])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
def test_reduce(op, axes, keepdims):
    x = _rand(np.random.default_rng(20), (2, 3, 4, 5))
    attrs = {"keepdims": keepdims} if axes is None else {"axes": axes, "keepdims": keepdims}
    consts, names, onnx_attrs = {}, ["x"], {"keepdims": keepdims}
    if axes is not None and op == "ReduceSum":  # ReduceSum takes axes as an input from opset 13
        consts, names = {"a": np.array(axes, np.int64)}, ["x", "a"]
    elif axes is not None:
        onnx_attrs["axes"] = axes
    _compare(op, attrs, [x], [_node(op, names, **onnx_attrs)], {"x": x}, consts=consts)


def test_reduce_integer_keeps_dtype():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    (got,) = execute_op("ReduceSum", {"axes": [1], "keepdims": 0}, [x])
    assert got.dtype == np.int32 and got.tolist() == [6, 22, 38]


@pytest.mark.parametrize("axis, indices", [(0, [[0, -1], [2, -3]]), (1, [-1, 0, 3]), (2, 1),
                                           (1, [[-4]])])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather(axis, indices, idx_dtype):
    data = _rand(np.random.default_rng(21), (3, 4, 5))
    idx = np.array(indices, idx_dtype)
    node = _node("Gather", ["d", "i"], axis=axis)
    _compare("Gather", {"axis": axis}, [data, idx], [node], {"d": data, "i": idx})


def test_gather_errors():
    data = np.zeros((3, 2), np.float32)
    with pytest.raises(ShapeError, match="out of range"):
        execute_op("Gather", {"axis": 0}, [data, np.array([3], np.int64)])
    with pytest.raises(ShapeError, match="int32 or int64"):
        execute_op("Gather", {"axis": 0}, [data, np.array([0.0], np.float32)])


def test_where():
    rng = np.random.default_rng(22)
    cond = rng.random((3, 1, 4)) > 0.5
    x, y = _rand(rng, (2, 4)), _rand(rng, (3, 2, 1))
    _compare("Where", {}, [cond, x, y], [_node("Where", ["c", "x", "y"])], {"c": cond, "x": x, "y": y})


@pytest.mark.parametrize("src, to", [(np.float32, 6), (np.float32, 7), (np.int64, 1),
                                     (np.float32, 10), (np.float32, 11), (np.float32, 9),
                                     (np.int32, 1)])
def test_cast(src, to):
    x = (_rand(np.random.default_rng(23), (3, 5)) * 10).astype(src)
    _compare("Cast", {"to": to}, [x], [_node("Cast", ["x"], to=to)], {"x": x})


# ---------------------------------------------------------------------------- op errors
def test_every_documented_op_is_supported():
    doc = (Path(__file__).resolve().parents[1] / "docs" / "operators.md").read_text()
    documented = {name for row in re.findall(r"^\| (`.*?) \|", doc, re.M)
                  for name in re.findall(r"`(\w+)`", row)}
    assert "Conv2D" in documented and "Opaque" in documented
    assert documented - {"Opaque"} == reference.supported_op_types()
    assert set(reference.OP_REGISTRY) == documented - {"Opaque", "Input", "Weight"}


def test_unknown_op_type():
    with pytest.raises(UnsupportedOpError, match="'NoSuchOp'"):
        execute_op("NoSuchOp", {}, [np.zeros(2, np.float32)])


def test_opaque_names_onnx_type():
    with pytest.raises(UnsupportedOpError, match="'Opaque'.*'NonMaxSuppression'"):
        execute_op("Opaque", {"onnx_op_type": b"NonMaxSuppression"}, [np.zeros(2, np.float32)])


def test_source_op_is_not_executable():
    with pytest.raises(UnsupportedOpError, match="fed by name"):
        execute_op("Input", {}, [])


def test_missing_required_attribute():
    with pytest.raises(OpAttributeError, match="'axis'"):
        execute_op("Concat", {}, [np.zeros(2, np.float32)])


def test_bad_activation():
    with pytest.raises(OpAttributeError, match="activation"):
        execute_op("MatMul", {"activation": 7}, [np.ones((2, 2), np.float32)] * 2)


@pytest.mark.parametrize("ws, group", [((4, 2, 3, 3), 1), ((4, 3, 3, 3), 2), ((3, 1, 3, 3), 2)])
def test_conv_group_mismatch(ws, group):
    x, w = np.zeros((1, 4, 5, 5), np.float32), np.zeros(ws, np.float32)
    with pytest.raises(ShapeError, match="group"):
        execute_op("Conv2D", {"group": group}, [x, w])


def test_conv_window_too_large():
    with pytest.raises(ShapeError, match="does not fit"):
        execute_op("Conv2D", {}, [np.zeros((1, 1, 2, 2), np.float32), np.zeros((1, 1, 3, 3), np.float32)])


def test_numpy_shape_failure_becomes_shape_error():
    with pytest.raises(ShapeError, match="MatMul"):
        execute_op("MatMul", {}, [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)])


# ------------------------------------------------------------------ run() on a fake graph
class FakeRef(NamedTuple):
    """Stand-in for graph.TensorRef."""
    op: int
    index: int


@dataclass(frozen=True)
class FakeTensor:
    """Stand-in for graph.TensorInfo."""
    shape: tuple[int, ...]
    dtype: int = 1

    @property
    def np_dtype(self) -> np.dtype:
        return reference.ONNX_TO_NUMPY_DTYPE[self.dtype]


@dataclass(frozen=True)
class FakeOp:
    """Stand-in for graph.OpInfo."""
    id: int
    type: str
    name: str
    inputs: tuple[FakeRef, ...]
    outputs: tuple[FakeTensor, ...]
    attrs: dict = field(default_factory=dict)


@dataclass
class FakeGraph:
    """The minimal duck-typed graph `reference.run` needs."""
    ops: tuple[FakeOp, ...]
    outputs: tuple[FakeRef, ...]
    output_names: tuple[str, ...]
    weights: dict[str, Any] = field(default_factory=dict)


def _mlp_graph(weights=None) -> FakeGraph:
    """x[2,3] @ w[3,4] -> relu -> y; also an unused Opaque op fed by input 'z'."""
    t23, t34, t24 = FakeTensor((2, 3)), FakeTensor((3, 4)), FakeTensor((2, 4))
    ops = (
        FakeOp(0, "Input", "x", (), (t23,)),
        FakeOp(1, "Weight", "w", (), (t34,)),
        FakeOp(2, "MatMul", "mm", (FakeRef(0, 0), FakeRef(1, 0)), (t24,), {"activation": 0}),
        FakeOp(3, "Relu", "act", (FakeRef(2, 0),), (t24,)),
        FakeOp(4, "Input", "z", (), (t24,)),
        FakeOp(5, "Opaque", "nms", (FakeRef(4, 0),), (t24,), {"onnx_op_type": "NonMaxSuppression"}),
    )
    return FakeGraph(ops, (FakeRef(3, 0),), ("y",), dict(weights or {}))


def test_run_outputs_and_weight_fallback():
    rng = np.random.default_rng(30)
    x, w = _rand(rng, (2, 3)), _rand(rng, (3, 4))
    result = reference.run(_mlp_graph({"w": w}), {"x": x}, outputs=[FakeRef(3, 0), FakeRef(2, 0)])
    np.testing.assert_allclose(result[FakeRef(3, 0)], np.maximum(x @ w, 0), rtol=RTOL)
    np.testing.assert_allclose(result[FakeRef(2, 0)], x @ w, rtol=RTOL)
    w2 = _rand(rng, (3, 4))  # a feed wins over graph.weights
    assert list(reference.run(_mlp_graph({"w": w}), {"x": x, "w": w2}, outputs=[FakeRef(3, 0)])
                .values())[0] == pytest.approx(np.maximum(x @ w2, 0))


def test_run_graph_outputs_reach_opaque():
    x, w = np.ones((2, 3), np.float32), np.ones((3, 4), np.float32)
    graph = _mlp_graph({"w": w})
    graph.outputs, graph.output_names = (FakeRef(3, 0), FakeRef(5, 0)), ("y", "boxes")
    with pytest.raises(UnsupportedOpError, match="'nms'.*NonMaxSuppression"):
        reference.run(graph, {"x": x, "z": np.zeros((2, 4), np.float32)})
    graph.outputs, graph.output_names = (FakeRef(3, 0),), ("y",)
    assert list(reference.run(graph, {"x": x})) == ["y"]


def test_run_missing_feed():
    with pytest.raises(MissingFeedError, match=r"Weight 'w'.*\(3, 4\).*float32"):
        reference.run(_mlp_graph(), {"x": np.ones((2, 3), np.float32)})


@pytest.mark.parametrize("bad", [np.ones((3, 2), np.float32), np.ones((2, 3), np.float64)])
def test_run_bad_feed(bad):
    graph = _mlp_graph({"w": np.ones((3, 4), np.float32)})
    with pytest.raises(ShapeError, match=r"Input 'x': expected (shape|dtype)"):
        reference.run(graph, {"x": bad})


def test_run_checks_inferred_types_and_refs():
    graph = _mlp_graph({"w": np.ones((3, 4), np.float32)})
    ops = list(graph.ops)
    ops[3] = FakeOp(3, "Relu", "act", (FakeRef(2, 0),), (FakeTensor((4, 2)),))
    graph.ops = tuple(ops)
    with pytest.raises(ShapeError, match="'act'.*graph says"):
        reference.run(graph, {"x": np.ones((2, 3), np.float32)})
    with pytest.raises(ExecutionError, match="not in the graph"):
        reference.run(graph, {}, outputs=[FakeRef(9, 0)])


def test_run_frees_intermediates():
    n, depth = 1 << 20, 8  # a chain of 8 Tanh ops on 4 MiB tensors
    t = FakeTensor((n,))
    ops = [FakeOp(0, "Input", "x", (), (t,))]
    ops += [FakeOp(i, "Tanh", f"t{i}", (FakeRef(i - 1, 0),), (t,)) for i in range(1, depth + 1)]
    graph = FakeGraph(tuple(ops), (FakeRef(depth, 0),), ("y",))
    x = np.zeros(n, np.float32)
    tracemalloc.start()
    try:
        result = reference.run(graph, {"x": x})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result["y"].shape == (n,)
    assert peak < 3.5 * x.nbytes, f"peak {peak} bytes: intermediates are kept alive"
