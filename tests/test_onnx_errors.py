"""Bad ONNX input gets a typed error naming the file and node; unknown operators load
as opaque ops and survive the round trip."""

import numpy as np
import onnx
import pytest
from conftest import MODELS
from onnx import TensorProto, helper

import taso_env as te
from taso_env import errors
from taso_env.engine import reference
from taso_env.onnx.check import check_equivalent, random_feeds


def _model(nodes, inputs, outputs, initializers=(), value_info=(), opsets=(("", 17),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers),
                              value_info=list(value_info))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    return model


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def test_truncated_file_is_a_malformed_error_naming_the_file(tmp_path):
    data = (MODELS / "resnet18.onnx").read_bytes()
    path = tmp_path / "truncated.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.MalformedOnnxError, match="truncated.onnx"):
        te.load_onnx(path)


def test_garbage_and_empty_files_are_malformed(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(errors.MalformedOnnxError, match="garbage.onnx"):
        te.load_onnx(garbage)
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    with pytest.raises(errors.MalformedOnnxError, match="no graph or no nodes"):
        te.load_onnx(empty)
    with pytest.raises(errors.OnnxImportError, match="no such file"):
        te.load_onnx(tmp_path / "missing.onnx")


def test_model_failing_the_checker_is_malformed():
    node = helper.make_node("Relu", ["x", "extra"], ["y"], name="relu_two_inputs")
    model = _model([node], [_vi("x", [2]), _vi("extra", [2])], [_vi("y", [2])])
    with pytest.raises(errors.MalformedOnnxError, match="checker"):
        te.load_onnx(model)


def test_shape_mismatch_is_a_shape_error():
    node = helper.make_node("Add", ["a", "b"], ["y"], name="bad_add")
    model = _model([node], [_vi("a", [1, 3]), _vi("b", [1, 4])], [_vi("y", [1, 3])])
    with pytest.raises(errors.ShapeError, match="in-memory model"):
        te.load_onnx(model)


def test_conv_weight_mismatch_caught_by_core_names_the_node():
    # ONNX shape inference does not check Conv channel counts; the core does.
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv_wrong_channels")
    model = _model([node], [_vi("x", [1, 3, 8, 8]), _vi("w", [4, 5, 3, 3])], [_vi("y", [1, 4, 6, 6])])
    with pytest.raises(errors.ShapeError, match="conv_wrong_channels"):
        te.load_onnx(model)


def test_dynamic_dimension_is_a_dynamic_shape_error_naming_the_tensor(tmp_path):
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = _model([node], [_vi("x", ["batch", 3])], [_vi("y", ["batch", 3])])
    path = tmp_path / "dynamic.onnx"
    onnx.save(model, path)
    with pytest.raises(errors.DynamicShapeError, match=r"dynamic.onnx.*x\[0\] \('batch'\).*--dims batch=N"):
        te.load_onnx(path)
    fixed = te.load_onnx(path, dims={"batch": 5})
    assert fixed.tensor(fixed.outputs[0]).shape == (5, 3)


def test_custom_op_without_shape_is_a_missing_shape_error_naming_the_node():
    nodes = [helper.make_node("Mystery", ["x"], ["m"], name="mystery_node", domain="com.example"),
             helper.make_node("Relu", ["m"], ["y"], name="relu")]
    model = _model(nodes, [_vi("x", [2, 3])], [_vi("y", [2, 3])], opsets=(("", 17), ("com.example", 1)))
    with pytest.raises(errors.MissingShapeError, match="mystery_node"):
        te.load_onnx(model)


def test_cycle_is_a_cycle_error_naming_nodes():
    a = helper.make_node("Relu", ["y2"], ["y1"], name="first")
    b = helper.make_node("Relu", ["y1"], ["y2"], name="second")
    model = _model([a, b], [_vi("x", [2])], [_vi("y2", [2])])
    with pytest.raises(errors.CycleError, match="'first'.*'second'"):
        te.load_onnx(model)


def test_unsorted_nodes_are_sorted():
    a = helper.make_node("Relu", ["x"], ["h"], name="first")
    b = helper.make_node("Sigmoid", ["h"], ["y"], name="second")
    g = te.load_onnx(_model([b, a], [_vi("x", [4])], [_vi("y", [4])]))
    assert [o.type for o in g.ops] == ["Input", "Relu", "Sigmoid"]


def test_unmodelled_standard_op_loads_as_opaque_and_round_trips():
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.2),
        helper.make_node("Softsign", ["l"], ["h"], name="softsign"),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    source = _model(nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 8, 8, 8])], initializers=[w])
    g = te.load_onnx(source)
    compute = [o.type for o in g.ops if o.type not in ("Input", "Weight")]
    assert compute == ["Conv2D", "Opaque", "Opaque", "Relu"]
    leaky = next(o for o in g.ops if o.type == "Opaque")
    assert leaky.attrs["onnx_op_type"] == b"LeakyRelu"
    assert g.cost() > 0 and all(c > 0 for o, c in zip(g.ops, g.op_costs()) if o.type == "Opaque")
    exported = g.export_onnx()
    kept = next(n for n in exported.graph.node if n.op_type == "LeakyRelu")
    assert helper.get_attribute_value(kept.attribute[0]) == pytest.approx(0.2)
    feeds = random_feeds(g, 0)
    assert check_equivalent(source, exported, feeds).equivalent
    # the reference executor runs opaque ops through onnx.reference
    y = reference.run(g, feeds)["y"]
    c = np.asarray(reference.run(g, feeds, outputs=[te.TensorRef(2, 0)])[te.TensorRef(2, 0)])
    leaky_ref = np.where(c > 0, c, 0.2 * c)
    expected = np.maximum(leaky_ref / (1 + np.abs(leaky_ref)), 0)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_custom_domain_op_with_shapes_loads_as_opaque_and_exports_unchanged():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("FancyOp", ["r"], ["f"], name="fancy", domain="com.example", mode="fast"),
        helper.make_node("Sigmoid", ["f"], ["y"], name="sig"),
    ]
    model = _model(nodes, [_vi("x", [2, 5])], [_vi("y", [2, 7])], value_info=[_vi("f", [2, 7])],
                   opsets=(("", 17), ("com.example", 1)))
    g = te.load_onnx(model)
    fancy = next(o for o in g.ops if o.type == "Opaque")
    assert fancy.outputs[0].shape == (2, 7)
    exported = g.export_onnx()
    node = next(n for n in exported.graph.node if n.op_type == "FancyOp")
    assert node.domain == "com.example" and helper.get_attribute_value(node.attribute[0]) == b"fast"
    assert {(o.domain, o.version) for o in exported.opset_import} >= {("com.example", 1)}
    with pytest.raises(errors.UnsupportedOpError, match="FancyOp"):
        reference.run(g, g.random_inputs())


def test_graph_input_that_is_also_an_initializer_is_a_weight_with_data():
    b = onnx.numpy_helper.from_array(np.arange(4, dtype=np.float32), "b")
    node = helper.make_node("Add", ["x", "b"], ["y"], name="add")
    g = te.load_onnx(_model([node], [_vi("x", [4]), _vi("b", [4])], [_vi("y", [4])], initializers=[b]))
    assert [o.type for o in g.ops[:2]] == ["Input", "Weight"]
    np.testing.assert_array_equal(g.weights["b"], np.arange(4, dtype=np.float32))
