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


def _unary(op_type: str, shape, out_shape=None, inputs=(), initializers=(), dtype=TensorProto.FLOAT, **attrs):
    return _model([helper.make_node(op_type, ["x", *inputs], ["y"], **attrs)],
                  [helper.make_tensor_value_info("x", dtype, list(shape))],
                  [helper.make_tensor_value_info("y", dtype, list(out_shape or shape))], initializers)


def _modelled(g: te.Graph) -> list[str]:
    assert "Opaque" not in {o.type for o in g.ops}
    return [o.type for o in g.ops if o.type not in ("Input", "Weight")]


@pytest.mark.parametrize("exponent, ops", [
    (1.0, ["Identity"]), (2.0, ["Mul"]), (3.0, ["Mul", "Mul"]), (4.0, ["Mul", "Mul"]), (0.5, ["Sqrt"]),
    (-1.0, ["Div"]), (-0.5, ["Sqrt", "Div"]),
])
def test_pow_of_a_constant_exponent_loads_as_products_roots_and_divisions(exponent, ops):
    m = _unary("Pow", [3, 5], inputs=["e"], initializers=[numpy_helper.from_array(np.array(exponent, np.float32), "e")])
    x = np.random.default_rng(2).uniform(0.5, 2.0, (3, 5)).astype(np.float32)
    g = te.load_onnx(m)
    assert _modelled(g) == ops
    np.testing.assert_allclose(reference.run(g, {"x": x})["y"], run_onnxruntime(m, {"x": x})["y"], rtol=1e-6)


def test_pow_of_another_exponent_and_a_computed_one_stay_opaque():
    odd = _unary("Pow", [3], inputs=["e"], initializers=[numpy_helper.from_array(np.array(1.7, np.float32), "e")])
    fed = _model([helper.make_node("Pow", ["x", "e"], ["y"])],
                 [helper.make_tensor_value_info(n, TensorProto.FLOAT, [3]) for n in ("x", "e")],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    for m in (odd, fed):
        assert [o.attrs["onnx_op_type"] for o in te.load_onnx(m).ops if o.type == "Opaque"] == [b"Pow"]


def test_reciprocal_loads_as_a_division():
    x = np.random.default_rng(3).uniform(0.5, 2.0, (2, 4)).astype(np.float32)
    assert _modelled(_same_as_onnxruntime(_unary("Reciprocal", [2, 4]), {"x": x})) == ["Div"]


def _slice(shape, starts, ends, axes=None, steps=None):
    x = np.zeros(shape)
    index = [slice(None)] * len(shape)
    for k, axis in enumerate(axes if axes is not None else range(len(starts))):
        index[axis] = slice(starts[k], ends[k], steps[k] if steps is not None else None)
    out_shape = x[tuple(index)].shape
    names, inits = ["starts", "ends"], [numpy_helper.from_array(np.asarray(starts, np.int64), "starts"),
                                        numpy_helper.from_array(np.asarray(ends, np.int64), "ends")]
    for name, value in (("axes", axes), ("steps", steps)):
        if value is not None:
            names.append(name)
            inits.append(numpy_helper.from_array(np.asarray(value, np.int64), name))
        elif name == "axes" and steps is not None:
            names.append("")
    return _unary("Slice", shape, out_shape, inputs=names, initializers=inits)


@pytest.mark.parametrize("shape, starts, ends, axes, steps", [
    ((4, 6), [1], [3], [0], None),                              # the middle rows
    ((4, 6), [0, -2], [2, 2 ** 62], [0, 1], None),              # a head and a tail, negative start, end past it
    ((2, 8, 8, 3), [1, 0], [2 ** 62, 2 ** 62], [1, 2], [2, 2]),  # Swin's patch merging x[:, 1::2, 0::2]
    ((2, 7, 5), [-3, 1], [100, 5], [1, 2], [1, 2]),             # a clamped end, a step not dividing the dim
    ((1, 9), [2], [9], [1], [3]),                               # elements 2, 5, 8: the block ends at the end
    ((3, 5), [0], [5], [1], None),                              # everything: an Identity
])
def test_slices_with_constant_bounds_load_as_splits(shape, starts, ends, axes, steps):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    m = _slice(shape, starts, ends, axes, steps)
    g = _same_as_onnxruntime(m, {"x": x})
    assert set(_modelled(g)) <= {"Split", "Reshape", "Identity"}
    # and back out to ONNX: the exported graph computes the same in onnxruntime
    np.testing.assert_array_equal(run_onnxruntime(g.export_onnx(), {"x": x})["y"], run_onnxruntime(m, {"x": x})["y"])


def test_negative_steps_and_blocks_that_do_not_fit_stay_opaque():
    for m in (_slice((4, 6), [3], [0], [0], [-1]), _slice((2, 5), [1], [5], [1], [3])):  # 1, 4: 6 > 5 elements
        assert [o.attrs["onnx_op_type"] for o in te.load_onnx(m).ops if o.type == "Opaque"] == [b"Slice"]


@pytest.mark.parametrize("axes, keepdims", [([1], 1), ([0, 2], 0), (None, 1)])
def test_reduce_l2_loads_as_the_root_of_a_sum_of_squares(axes, keepdims):
    shape = (2, 3, 4)
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    want = np.sqrt(np.sum(x * x, axis=tuple(axes) if axes else None, keepdims=bool(keepdims)))
    m = _model([helper.make_node("ReduceL2", ["x"], ["y"], keepdims=keepdims, **({"axes": axes} if axes else {}))],
               [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want.shape))])
    g = te.load_onnx(m)
    assert _modelled(g) == ["Mul", "ReduceSum", "Sqrt"]
    np.testing.assert_allclose(reference.run(g, {"x": x})["y"], run_onnxruntime(m, {"x": x})["y"], rtol=1e-5)


def test_expand_with_a_constant_shape_loads_as_a_product_with_ones():
    m = _unary("Expand", [4, 3, 1], [2, 4, 3, 5], inputs=["shape"],
               initializers=[numpy_helper.from_array(np.array([2, 4, 3, 5], np.int64), "shape")])
    x = np.random.default_rng(6).standard_normal((4, 3, 1)).astype(np.float32)
    g = _same_as_onnxruntime(m, {"x": x})
    assert _modelled(g) == ["Mul"]
    assert [w.shape for w in g.weights.values()] == [(2, 1, 1, 5)]


@pytest.mark.parametrize("equation, a_shape, b_shape", [
    ("bghid,bghjd->bghij", (1, 2, 3, 4, 5), (1, 2, 3, 6, 5)),   # MaxViT's q k^T
    ("bghij,bghjd->bghid", (1, 2, 3, 4, 6), (1, 2, 3, 6, 5)),   # its p v: a plain MatMul
    ("ik,kj->ji", (3, 4), (4, 5)),                              # a transposed result
    ("kbi,bkj->bij", (4, 2, 3), (2, 4, 5)),                     # operands in other layouts
])
def test_einsum_matrix_products_load_as_matmuls(equation, a_shape, b_shape):
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal(a_shape).astype(np.float32), rng.standard_normal(b_shape).astype(np.float32)
    want = np.einsum(equation, a, b)
    m = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)],
               [helper.make_tensor_value_info("a", TensorProto.FLOAT, a_shape),
                helper.make_tensor_value_info("b", TensorProto.FLOAT, b_shape)],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(want.shape))])
    g = te.load_onnx(m)
    assert set(_modelled(g)) <= {"MatMul", "Transpose"} and _modelled(g).count("MatMul") == 1
    np.testing.assert_allclose(reference.run(g, {"a": a, "b": b})["y"], run_onnxruntime(m, {"a": a, "b": b})["y"],
                               rtol=1e-5, atol=1e-5)


def test_other_einsums_stay_opaque():
    for equation, shapes, out in (("ij,ij->i", [(3, 4), (3, 4)], [3]), ("bij,jk->bik", [(2, 3, 4), (4, 5)], [2, 3, 5])):
        m = _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation=equation)],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip("ab", shapes)],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
        assert [o.attrs["onnx_op_type"] for o in te.load_onnx(m).ops if o.type == "Opaque"] == [b"Einsum"]


def test_is_nan_of_a_softmax_loads_as_a_self_difference_and_keeps_nan_rows_zeroed():
    # The Hugging Face SDPA export: Where(IsNaN(Softmax(s)), 0, Softmax(s)); a fully
    # masked row (all -inf) is NaN after the Softmax and 0 after the Where.
    nodes = [helper.make_node("Softmax", ["x"], ["p"], axis=-1), helper.make_node("IsNaN", ["p"], ["nan"]),
             helper.make_node("Where", ["nan", "zero", "p"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
               [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    x = np.random.default_rng(8).standard_normal((3, 4)).astype(np.float32)
    x[1] = -np.inf
    g = te.load_onnx(m)
    assert _modelled(g) == ["Softmax", "Sub", "Cast", "Where"]
    got, want = reference.run(g, {"x": x})["y"], run_onnxruntime(m, {"x": x})["y"]
    assert np.all(got[1] == 0) and np.all(want[1] == 0)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_is_nan_of_other_tensors_stays_opaque():  # x - x is NaN for an infinite x too
    m = _unary("IsNaN", [4], dtype=TensorProto.FLOAT)
    m.graph.output[0].type.tensor_type.elem_type = TensorProto.BOOL
    assert [o.attrs["onnx_op_type"] for o in te.load_onnx(m).ops if o.type == "Opaque"] == [b"IsNaN"]


def test_gather_elements_of_computed_indices_loads_as_a_core_op():
    # RoBERTa's position ids gather with indices computed from the input: the core op
    # GatherElements (negative indices wrap; onnx 1.23's reference implementation fails on
    # 128 columns, the reference executor's numpy kernel does not)
    m = _model([helper.make_node("GatherElements", ["table", "i"], ["y"], axis=1)],
               [helper.make_tensor_value_info("i", TensorProto.INT64, [1, 128])],
               [helper.make_tensor_value_info("y", TensorProto.INT64, [1, 128])],
               [numpy_helper.from_array(np.arange(512, dtype=np.int64).reshape(1, 512) * 7, "table")])
    g = te.load_onnx(m)
    assert [o.type for o in g.ops if o.type in ("Opaque", "GatherElements")] == ["GatherElements"]
    i = np.random.default_rng(9).integers(-512, 512, (1, 128))
    np.testing.assert_array_equal(reference.run(g, {"i": i})["y"], run_onnxruntime(m, {"i": i})["y"])


@pytest.mark.parametrize("opset", [10, 11, 13])
def test_slices_lower_in_the_split_form_of_their_opset(opset):  # Split's sizes: attribute before 13
    m = _slice((2, 8, 6), [1, 0], [2 ** 62, 5], [1, 2], [2, 1])
    m.opset_import[0].version = opset
    x = np.random.default_rng(10).standard_normal((2, 8, 6)).astype(np.float32)
    g = _same_as_onnxruntime(m, {"x": x})
    assert set(_modelled(g)) <= {"Split", "Reshape"}


def test_not_and_neg_load_as_where_and_mul():
    rng = np.random.default_rng(11)
    b = rng.random((2, 3)) > 0.5
    not_model = _unary("Not", [2, 3], dtype=TensorProto.BOOL)
    assert _modelled(_same_as_onnxruntime(not_model, {"x": b})) == ["Where", "Cast"]
    x = rng.standard_normal((2, 3)).astype(np.float32)
    assert _modelled(_same_as_onnxruntime(_unary("Neg", [2, 3]), {"x": x})) == ["Mul"]
