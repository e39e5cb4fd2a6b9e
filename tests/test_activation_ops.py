"""Clip, HardSigmoid and HardSwish (and Squeeze/Unsqueeze, which load as Reshape):
ONNX import, reference semantics against onnxruntime, shape inference, work counts and
ONNX export."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import taso_env as te
from taso_env.engine import reference
from taso_env.errors import TasoEnvError
from taso_env.onnx.check import check_equivalent, run_onnxruntime

SHAPE = [2, 3, 4, 5]


def _model(node: onnx.NodeProto, out_shape=SHAPE, inits=(), opset=17) -> onnx.ModelProto:
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


CASES = {
    "relu6": (helper.make_node("Clip", ["x", "lo", "hi"], ["y"]), [_const("lo", 0.0), _const("hi", 6.0)],
              "Clip"),
    "clip_min_only": (helper.make_node("Clip", ["x", "lo"], ["y"]), [_const("lo", -0.5)], "Clip"),
    "clip_no_bounds": (helper.make_node("Clip", ["x"], ["y"]), [], "Clip"),
    "hard_sigmoid": (helper.make_node("HardSigmoid", ["x"], ["y"], alpha=0.3, beta=0.4), [], "HardSigmoid"),
    "hard_sigmoid_default": (helper.make_node("HardSigmoid", ["x"], ["y"]), [], "HardSigmoid"),
    "hard_swish": (helper.make_node("HardSwish", ["x"], ["y"]), [], "HardSwish"),
}


@pytest.mark.parametrize("case", CASES)
def test_imports_as_a_modelled_op_and_matches_onnxruntime(case):
    node, inits, op_type = CASES[case]
    model = _model(node, inits=inits)
    g = te.load_onnx(model)
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == [op_type]
    x = (np.random.default_rng(0).standard_normal(SHAPE) * 8).astype(np.float32)
    want = run_onnxruntime(model, {"x": x})["y"]
    got = reference.run(g, {"x": x})["y"]
    assert got.dtype == np.float32 and got.shape == tuple(SHAPE)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # the export is the same function in onnxruntime
    assert check_equivalent(model, g, {"x": x}).equivalent


def test_clip_with_run_time_bounds_stays_opaque():
    node = helper.make_node("Clip", ["x", "lo"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE),
                                            helper.make_tensor_value_info("lo", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)])
    g = te.load_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))
    assert [o.type for o in g.ops if o.type not in ("Input", "Weight")] == ["Opaque"]


@pytest.mark.parametrize("op", ["Squeeze", "Unsqueeze"])
def test_squeeze_and_unsqueeze_load_as_reshape(op):
    if op == "Squeeze":
        node = helper.make_node("Unsqueeze", ["x", "ax"], ["u"])
        node2 = helper.make_node("Squeeze", ["u", "ax"], ["y"])
        nodes, out = [node, node2], SHAPE
    else:
        nodes, out = [helper.make_node("Unsqueeze", ["x", "ax"], ["y"])], [2, 1, 3, 4, 5]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
                              initializer=[numpy_helper.from_array(np.array([1], np.int64), "ax")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    g = te.load_onnx(model)
    assert {o.type for o in g.ops if o.type not in ("Input", "Weight")} == {"Reshape"}
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(reference.run(g, {"x": x})["y"], run_onnxruntime(model, {"x": x})["y"])


@pytest.mark.parametrize("op_type,attrs,flops", [("Clip", {"min": 0.0, "max": 6.0}, 2), ("HardSigmoid", {}, 3),
                                                  ("HardSwish", {}, 4)])
def test_shape_inference_defaults_and_work(op_type, attrs, flops):
    b = te.GraphBuilder("one", seed=0)
    y = b.op(op_type, [b.input("x", SHAPE)], **attrs)
    b.output(y, "y")
    g = b.build()
    op = next(o for o in g.ops if o.type == op_type)
    assert list(op.outputs[0].shape) == SHAPE
    if op_type == "HardSigmoid":
        assert op.attrs["alpha"] == pytest.approx(0.2) and op.attrs["beta"] == pytest.approx(0.5)
    assert g.op_work(op.id)[0] == flops * int(np.prod(SHAPE))


@pytest.mark.parametrize("op_type", ["Clip", "HardSigmoid", "HardSwish"])
def test_integer_inputs_are_refused(op_type):
    b = te.GraphBuilder("bad", seed=0)
    with pytest.raises(TasoEnvError, match=op_type):
        b.op(op_type, [b.input("x", SHAPE, te.dtypes.INT64)])
