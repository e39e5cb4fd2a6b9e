"""CumSum, Equal and GatherElements as core ops (issue 44, item 5): each reference
kernel against onnxruntime on random inputs over axes and attributes, the ONNX import
and export round trip, and the position ids of RoBERTa- and OPT-like exports loading
with no opaque op and optimising onnxruntime-equal."""

import collections

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from position_id_models import opt_position_ids_model, roberta_position_ids_model, token_feeds

import taso_env as te
from taso_env import dtypes, errors
from taso_env.engine import reference
from taso_env.engine.reference_ops import OP_REGISTRY
from taso_env.onnx.check import check_equivalent, run_onnxruntime

NUMPY_TO_ONNX = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int32: TensorProto.INT32,
                 np.int64: TensorProto.INT64, np.bool_: TensorProto.BOOL}


def _one_node_model(op_type: str, inputs: dict[str, np.ndarray], constants: dict[str, np.ndarray],
                    out_dtype, out_shape: tuple[int, ...], **attrs) -> onnx.ModelProto:
    """A model of one `op_type` node reading graph inputs `inputs` then initializers
    `constants`, in that order, with output "y"."""
    node = helper.make_node(op_type, [*inputs, *constants], ["y"], **attrs)
    graph = helper.make_graph(
        [node], op_type,
        [helper.make_tensor_value_info(n, NUMPY_TO_ONNX[v.dtype.type], v.shape) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", NUMPY_TO_ONNX[np.dtype(out_dtype).type], out_shape)],
        [numpy_helper.from_array(v, n) for n, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def _loaded(model: onnx.ModelProto) -> te.Graph:
    g = te.load_onnx(model)
    assert not [o for o in g.ops if o.type == "Opaque"], [o.attrs["onnx_op_type"] for o in g.ops if o.type == "Opaque"]
    return g


def _random(rng, shape, dtype) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-5, 6, shape).astype(dtype)


# -- CumSum ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.float64])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_onnxruntime(dtype, axis, exclusive, reverse):
    rng = np.random.default_rng(axis % 3 + 4 * exclusive + 8 * reverse)
    x = _random(rng, (3, 4, 5), dtype)
    model = _one_node_model("CumSum", {"x": x}, {"axis": np.array(axis, np.int64)}, dtype, x.shape, exclusive=exclusive,
                            reverse=reverse)
    want = run_onnxruntime(model, {"x": x})["y"]
    got = OP_REGISTRY["CumSum"]({"axis": axis, "exclusive": exclusive, "reverse": reverse}, [x])[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    g = _loaded(model)
    (op,) = [o for o in g.ops if o.type == "CumSum"]
    assert op.attrs["axis"] == axis % 3 and op.attrs["exclusive"] == exclusive and op.attrs["reverse"] == reverse
    np.testing.assert_allclose(reference.run(g, {"x": x})["y"], want, rtol=1e-5, atol=1e-5)
    assert check_equivalent(model, g, {"x": x}).equivalent


def test_cumsum_refuses_bools_and_a_computed_axis_loads_opaque():
    b = te.GraphBuilder("cumsum_bool")
    with pytest.raises(errors.ShapeError, match="cannot sum bools"):
        b.op("CumSum", [b.input("m", [2, 3], dtypes.BOOL)], axis=1)
    node = helper.make_node("CumSum", ["x", "axis"], ["y"])
    graph = helper.make_graph([node], "computed_axis",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
                               helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    g = te.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10))
    assert [o.attrs["onnx_op_type"] for o in g.ops if o.type == "Opaque"] == [b"CumSum"]


# -- Equal -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_])
@pytest.mark.parametrize("shapes", [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((3, 4), ())])
def test_equal_matches_onnxruntime(dtype, shapes):
    rng = np.random.default_rng(len(shapes[1]))
    # Few distinct values, so that both outcomes occur.
    a, b = (rng.integers(0, 2, s).astype(dtype) for s in shapes)
    model = _one_node_model("Equal", {"a": a, "b": b}, {}, np.bool_, np.broadcast_shapes(*shapes))
    want = run_onnxruntime(model, {"a": a, "b": b})["y"]
    got = OP_REGISTRY["Equal"]({}, [a, b])[0]
    assert got.dtype == np.bool_ and want.any() and not want.all()
    np.testing.assert_array_equal(got, want)
    g = _loaded(model)
    assert g.tensor(g.outputs[0]).dtype == dtypes.BOOL
    np.testing.assert_array_equal(reference.run(g, {"a": a, "b": b})["y"], want)
    assert check_equivalent(model, g, {"a": a, "b": b}).equivalent


def test_equal_refuses_operands_of_two_dtypes():
    b = te.GraphBuilder("equal_dtypes")
    with pytest.raises(errors.ShapeError):
        b.op("Equal", [b.input("a", [2], dtypes.INT64), b.input("b", [2], dtypes.INT32)])
    with pytest.raises(errors.ShapeError):
        b.op("Equal", [b.input("c", [2, 3]), b.input("d", [4])])


# -- GatherElements --------------------------------------------------------------------
@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("index_shape", ["same", "smaller"])
def test_gather_elements_matches_onnxruntime(index_dtype, axis, index_shape):
    rng = np.random.default_rng(axis % 3 + 7)
    data = rng.standard_normal((3, 4, 5)).astype(np.float32)
    shape = [3, 4, 5] if index_shape == "same" else [2, 3, 4]
    shape[axis] = 6  # the axis itself may be longer than data's
    dim = data.shape[axis]
    indices = rng.integers(-dim, dim, shape).astype(index_dtype)  # negative indices wrap
    model = _one_node_model("GatherElements", {"data": data, "indices": indices}, {}, np.float32, indices.shape,
                            axis=axis)
    want = run_onnxruntime(model, {"data": data, "indices": indices})["y"]
    got = OP_REGISTRY["GatherElements"]({"axis": axis}, [data, indices])[0]
    np.testing.assert_array_equal(got, want)
    g = _loaded(model)
    assert g.tensor(g.outputs[0]).shape == tuple(shape)
    np.testing.assert_array_equal(reference.run(g, {"data": data, "indices": indices})["y"], want)
    assert check_equivalent(model, g, {"data": data, "indices": indices}).equivalent


def test_gather_elements_refuses_bad_indices():
    b = te.GraphBuilder("gather_elements")
    data = b.input("data", [3, 4])
    with pytest.raises(errors.ShapeError, match="rank of data"):
        b.op("GatherElements", [data, b.input("i1", [3], dtypes.INT64)], axis=0)
    with pytest.raises(errors.ShapeError, match="exceed data"):
        b.op("GatherElements", [data, b.input("i2", [2, 5], dtypes.INT64)], axis=0)
    with pytest.raises(errors.ShapeError, match="int32 or int64"):
        b.op("GatherElements", [data, b.input("i3", [3, 4])], axis=0)
    with pytest.raises(errors.ShapeError, match="out of range"):
        OP_REGISTRY["GatherElements"]({"axis": 1}, [np.zeros((3, 4), np.float32), np.full((3, 4), 4, np.int64)])


# -- import / export round trip --------------------------------------------------------
def test_the_three_ops_export_and_load_again_unchanged(tmp_path):
    b = te.GraphBuilder("three_ops", seed=0)
    ids = b.input("ids", [2, 6], dtypes.INT64)
    eq = b.op("Equal", [ids, b.weight("pad", [], dtypes.INT64, value=np.int64(1))])
    count = b.op("CumSum", [b.op("Cast", [eq], to=dtypes.INT64)], axis=-1, exclusive=1, reverse=1)
    table = b.weight("table", [2, 9], value=np.arange(18, dtype=np.float32).reshape(2, 9))
    b.output(b.op("GatherElements", [table, count], axis=1), "picked")
    b.output(count, "count")
    g = b.build()
    path = tmp_path / "three_ops.onnx"
    model = g.export_onnx(path)
    counts = collections.Counter(n.op_type for n in model.graph.node)
    assert (counts["Equal"], counts["CumSum"], counts["GatherElements"]) == (1, 1, 1)
    again = te.load_onnx(path)
    ops = {o.type: o for o in again.ops}
    assert ops["CumSum"].attrs["axis"] == 1 and ops["CumSum"].attrs["exclusive"] == 1
    assert ops["CumSum"].attrs["reverse"] == 1 and ops["GatherElements"].attrs["axis"] == 1
    feeds = {"ids": np.array([[1, 0, 1, 1, 0, 1], [0, 0, 0, 1, 1, 1]], np.int64)}
    want = run_onnxruntime(model, feeds)
    got = reference.run(g, feeds)
    np.testing.assert_array_equal(got["count"], want["count"])
    np.testing.assert_array_equal(got["count"], [[3, 3, 2, 1, 1, 0], [3, 3, 3, 2, 1, 0]])
    np.testing.assert_array_equal(got["picked"], want["picked"])
    np.testing.assert_array_equal(got["picked"], [[3, 3, 2, 1, 1, 0], [12, 12, 12, 11, 10, 9]])
    assert check_equivalent(model, again, feeds).equivalent


# -- position ids of Hugging Face exports ----------------------------------------------
@pytest.mark.parametrize("make, expected", [
    (roberta_position_ids_model, {"Equal": 1, "CumSum": 1, "GatherElements": 1}),
    (opt_position_ids_model, {"CumSum": 1}),
], ids=["roberta", "opt"])
def test_position_ids_load_with_no_opaque_op_and_optimise_equal(make, expected):
    model = make()
    g = _loaded(model)
    counts = collections.Counter(o.type for o in g.ops)
    assert {t: counts[t] for t in expected} == expected
    feeds = token_feeds(model)
    report = check_equivalent(model, g, feeds)
    assert report.equivalent, report
    np.testing.assert_allclose(reference.run(g, feeds)["hidden"], run_onnxruntime(model, feeds)["hidden"],
                               rtol=1e-4, atol=1e-4)
    result = te.search(g, "greedy")
    report = check_equivalent(model, result.graph, feeds)
    assert report.equivalent, report


def test_roberta_position_ids_count_the_tokens_that_are_not_padding():
    model = roberta_position_ids_model()
    g = _loaded(model)
    (add,) = [o for o in g.ops if o.type == "GatherElements"]
    feeds = token_feeds(model)
    ids = feeds["input_ids"]
    want = np.cumsum(ids != 1, axis=1) * (ids != 1) + 1
    positions = reference.run(g, feeds, outputs=[add.inputs[1]])
    np.testing.assert_array_equal(next(iter(positions.values())), want)
