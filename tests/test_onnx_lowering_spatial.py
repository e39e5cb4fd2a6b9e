"""Spatial ONNX ops lowered at import (taso_env/onnx/lowering_spatial.py): 1-D Conv as a
unit-height 2-D Conv, 3-D Conv as a sum over its temporal taps of 2-D Convs on frames
folded into the batch, GlobalAveragePool of rank 3 or 5 as a ReduceMean,
InstanceNormalization as reductions and arithmetic, Resize as MatMuls with
interpolation matrices. Each loads with no opaque op and computes what onnxruntime
computes on the original node, over the configurations real exports use; what is not
covered (3-D pooling windows, auto_pad on a 3-D kernel, cubic resizing) loads as opaque
ops, never an error."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import taso_env as te
from taso_env.engine import reference
from taso_env.onnx.check import run_onnxruntime
from taso_env.onnx.lowering_spatial import interpolation_matrix


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "spatial", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def _computes_what_onnxruntime_does(model, feeds, rtol=1e-5, atol=1e-6) -> te.Graph:
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    g = te.load_onnx(model)
    assert "Opaque" not in {o.type for o in g.ops}, [o.attrs for o in g.ops if o.type == "Opaque"]
    want = run_onnxruntime(model, feeds)
    got = reference.run(g, feeds)
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=rtol, atol=atol, err_msg=name)
    return g


def _conv_computes_what_onnxruntime_does(x, w, b, attrs, atol) -> te.Graph:
    """One ONNX Conv of x by weight w (and bias b, if given), its output shape from ONNX
    shape inference, loaded and checked against onnxruntime."""
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if b is not None else [])
    node = helper.make_node("Conv", ["x", "w", "b"] if b is not None else ["x", "w"], ["y"], **attrs)
    unshaped = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    probe = onnx.shape_inference.infer_shapes(_model([node], [_value("x", x.shape)], [unshaped], inits))
    out_shape = [d.dim_value for d in probe.graph.output[0].type.tensor_type.shape.dim]
    return _computes_what_onnxruntime_does(_model([node], [_value("x", x.shape)], [_value("y", out_shape)], inits),
                                           {"x": x}, rtol=1e-5, atol=atol)


def _op_types(g):
    return [o.type for o in g.ops if o.type not in ("Input", "Weight")]


@pytest.mark.parametrize("attrs, bias", [
    ({}, False),
    ({"strides": [2], "pads": [1, 2]}, True),
    ({"dilations": [3], "pads": [3, 3]}, True),
    ({"group": 4, "strides": [5]}, False),       # wav2vec2's grouped positional convolution has groups
    ({"auto_pad": "SAME_UPPER"}, True),
    ({"kernel_shape": [3], "auto_pad": "VALID"}, False),
])
def test_a_1d_conv_loads_as_a_unit_height_2d_conv(attrs, bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 8, 37)).astype(np.float32)
    w = rng.standard_normal((12, 8 // attrs.get("group", 1), 3)).astype(np.float32)
    b = rng.standard_normal(12).astype(np.float32) if bias else None
    g = _conv_computes_what_onnxruntime_does(x, w, b, attrs, atol=1e-5)
    assert _op_types(g).count("Conv2D") == 1 and "Reshape" in _op_types(g)


@pytest.mark.parametrize("kernel, attrs, bias", [
    ((3, 3, 3), {"pads": [1, 1, 1, 1, 1, 1]}, False),                              # r3d_18's blocks
    ((3, 7, 7), {"strides": [1, 2, 2], "pads": [1, 3, 3, 1, 3, 3]}, True),           # the stem
    ((1, 3, 3), {"pads": [0, 1, 1, 0, 1, 1]}, True),                                 # mc3 / (2+1)D spatial
    ((3, 1, 1), {"strides": [2, 1, 1], "pads": [1, 0, 0, 1, 0, 0]}, False),          # (2+1)D temporal, stride 2
    ((1, 1, 1), {"strides": [2, 2, 2]}, True),                                       # downsampling shortcut
    ((2, 3, 3), {"dilations": [2, 1, 2], "pads": [0, 1, 2, 3, 1, 2], "group": 2}, True),  # asymmetric, grouped
])
def test_a_3d_conv_loads_as_2d_convs_over_its_temporal_taps(kernel, attrs, bias):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 7, 9, 10)).astype(np.float32)
    w = rng.standard_normal((6, 4 // attrs.get("group", 1), *kernel)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32) if bias else None
    # atol: outputs reach ~30 (sums of up to 588 products), summed tap by tap here
    g = _conv_computes_what_onnxruntime_does(x, w, b, attrs, atol=1e-4)
    assert _op_types(g).count("Conv2D") == kernel[0]
    assert ("Pad" in _op_types(g)) == bool(attrs.get("pads", [0])[0] or attrs.get("pads", [0] * 6)[3])


@pytest.mark.parametrize("shape", [(1, 6, 50), (2, 3, 4, 5, 6)])
def test_global_average_pool_of_other_ranks_loads_as_a_reduce_mean(shape):
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    out = shape[:2] + (1,) * (len(shape) - 2)
    g = _computes_what_onnxruntime_does(_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])],
                                               [_value("x", shape)], [_value("y", out)]), {"x": x})
    assert _op_types(g) == ["ReduceMean"]


@pytest.mark.parametrize("shape", [(1, 6, 50), (2, 3, 5, 7)])
def test_instance_normalization_loads_as_reductions_and_arithmetic(shape):
    rng = np.random.default_rng(1)
    channels = shape[1]
    inits = [numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "scale"),
             numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "bias")]
    node = helper.make_node("InstanceNormalization", ["x", "scale", "bias"], ["y"], epsilon=1e-3)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    g = _computes_what_onnxruntime_does(_model([node], [_value("x", shape)], [_value("y", shape)], inits), {"x": x})
    assert "ReduceMean" in _op_types(g) and "Sqrt" in _op_types(g)


_RESIZES = [
    # (mode, coordinate transformation, nearest mode, in HxW, out HxW, given as scales)
    ("linear", "half_pixel", None, (7, 9), (14, 18), True),             # bilinear x2 (torch, align_corners=False)
    ("linear", "pytorch_half_pixel", None, (28, 28), (224, 224), False),  # FCN's head back to the image
    ("linear", "align_corners", None, (5, 6), (11, 13), False),
    ("linear", "asymmetric", None, (6, 6), (9, 4), False),              # one axis down
    ("linear", "half_pixel", None, (8, 10), (3, 10), False),            # H only
    ("nearest", "asymmetric", "floor", (5, 7), (10, 21), True),         # torch's nearest upsampling
    ("nearest", "half_pixel", "round_prefer_floor", (6, 5), (9, 8), False),
    ("nearest", "align_corners", "round_prefer_ceil", (6, 5), (13, 2), False),
    ("nearest", "half_pixel", "ceil", (4, 4), (7, 6), False),
]


@pytest.mark.parametrize("mode, coordinates, nearest, size_in, size_out, by_scales", _RESIZES)
def test_resize_loads_as_matmuls_with_interpolation_matrices(mode, coordinates, nearest, size_in, size_out,
                                                              by_scales):
    shape_in, shape_out = (1, 3, *size_in), (1, 3, *size_out)
    attrs = {"mode": mode, "coordinate_transformation_mode": coordinates}
    if nearest:
        attrs["nearest_mode"] = nearest
    if by_scales:
        scales = np.array([1, 1, size_out[0] / size_in[0], size_out[1] / size_in[1]], np.float32)
        inits, inputs = [numpy_helper.from_array(scales, "scales")], ["x", "", "scales"]
    else:
        inits, inputs = [numpy_helper.from_array(np.array(shape_out, np.int64), "sizes")], ["x", "", "", "sizes"]
    m = _model([helper.make_node("Resize", inputs, ["y"], **attrs)], [_value("x", shape_in)],
               [_value("y", shape_out)], inits)
    x = np.random.default_rng(2).standard_normal(shape_in).astype(np.float32)
    g = _computes_what_onnxruntime_does(m, {"x": x})
    resized_axes = sum(a != b for a, b in zip(size_in, size_out, strict=True))
    assert _op_types(g).count("MatMul") == resized_axes


def test_interpolation_rows_sum_to_one_and_read_at_most_two_neighbours():
    for coordinates in ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric"):
        m = interpolation_matrix(7, 23, 23 / 7, "linear", coordinates, "round_prefer_floor")
        np.testing.assert_allclose(m.sum(axis=1), 1.0)
        assert ((m > 0).sum(axis=1) <= 2).all() and (m >= 0).all()
    nearest = interpolation_matrix(4, 8, 2.0, "nearest", "asymmetric", "floor")
    assert (nearest.argmax(axis=1) == np.repeat(np.arange(4), 2)).all()


def test_uncovered_spatial_ops_load_as_opaque_ops():
    kernel = numpy_helper.from_array(np.ones((3, 2, 3, 3, 3), np.float32), "w")
    conv3d = _model([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")],
                    [_value("x", (1, 2, 4, 5, 5))], [_value("y", (1, 3, 4, 5, 5))], [kernel])
    pool3d = _model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2, 2])],
                    [_value("x", (1, 2, 4, 5, 5))], [_value("y", (1, 2, 3, 4, 4))])
    cubic = _model([helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic")],
                   [_value("x", (1, 1, 4, 4))], [_value("y", (1, 1, 8, 8))],
                   [numpy_helper.from_array(np.array([1, 1, 8, 8], np.int64), "sizes")])
    for m, op in ((conv3d, b"Conv"), (pool3d, b"MaxPool"), (cubic, b"Resize")):
        g = te.load_onnx(m)
        assert [o.attrs["onnx_op_type"] for o in g.ops if o.type == "Opaque"] == [op]
