"""Lowerings (see lowering.py) of the spatial ONNX ops the core models only in 2-D or
not at all, into ops it has, computing the same values:

- Conv of a 1-D signal ([N, C, L]; wav2vec2's feature encoder, SqueezeBERT, ConvBERT):
  the signal reshaped to [N, C, 1, L] and the kernel to [O, I, 1, K], a 2-D Conv with
  unit height (pads, strides, dilations and auto_pad along the width), the result
  reshaped back to [N, O, L'].
- InstanceNormalization(x, scale, B) of a float x of rank >= 3: per sample and channel,
  mean and variance over the spatial axes (ReduceMean), then
  (x - mean) / Sqrt(var + epsilon) * scale + B with scale and B reshaped to [C, 1, ...].
- Resize of an NCHW float tensor along H and W only, modes "nearest" and "linear" (the
  torchvision segmentation heads' upsampling), any coordinate transformation but
  tf_crop_and_resize, no antialias, constant scales or sizes: both resizes are linear
  maps along one axis, so each is a MatMul with a constant [in, out] interpolation
  matrix (the ONNX reference's weights, neighbours past an edge reading the edge), along
  H between two Transposes. Exact for finite inputs (the other entries are zeros; an
  infinite input would make its row NaN).

- Conv of a 3-D volume ([N, C, T, H, W]; torchvision's video classifiers r3d_18,
  mc3_18, r2plus1d_18): a sum over the kernel's kt temporal taps of 2-D Convs. The
  volume is transposed to [N, T, C, H, W] (and zero-padded along T by the temporal
  pads); tap i reads frames t * stride + i * dilation (a Gather along T, left out where
  it takes every frame), folded into the batch ([N * T', C, H, W]), and convolves them
  with the kernel's slice i (a Gather of the weight, free: computed from weights only),
  with the spatial strides, pads, dilations and groups; the bias goes to tap 0. The sum
  is unfolded back to [N, O, T', H', W'].
- GlobalAveragePool of a tensor of rank other than 4 (the core's is 2-D): ReduceMean over
  the spatial axes, keeping them.

A configuration not covered (dynamic shapes, 3-D pooling windows, cubic resizing, scales
computed at run time, ...) is left as it is and loads as an opaque op.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from taso_env.onnx.node_maker import FLOATS, NodeMaker, attributes, constant_value, text


def _conv_1d(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    x, w, y = n.input[0], n.input[1], n.output[0]
    if types.get(x) not in FLOATS or x not in shapes or w not in shapes or y not in shapes:
        return None
    if len(shapes[x]) != 3 or len(shapes[w]) != 3:
        return None
    a = attributes(n)
    pads = list(a.get("pads", [0, 0]))
    attrs = {"strides": [1, *a.get("strides", [1])], "dilations": [1, *a.get("dilations", [1])],
             "pads": [0, pads[0], 0, pads[1]], "group": int(a.get("group", 1))}
    auto_pad = text(a.get("auto_pad"), "NOTSET")
    if auto_pad != "NOTSET":  # along a unit height every auto_pad pads nothing
        attrs["auto_pad"] = auto_pad
        del attrs["pads"]
    if "kernel_shape" in a:
        attrs["kernel_shape"] = [1, *a["kernel_shape"]]
    (batch, channels, length), (out_channels, per_group, kernel), out_shape = shapes[x], shapes[w], shapes[y]
    maker = NodeMaker(y, constants, added, opset)
    signal = maker.reshape(x, [batch, channels, 1, length])
    weight = maker.reshape(w, [out_channels, per_group, 1, kernel])
    conv = maker.node("Conv", [signal, weight, *n.input[2:]], **attrs)
    return maker.finish(maker.reshape(conv, list(out_shape)), n.name)


def _conv_3d(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    x, w, y = n.input[0], n.input[1], n.output[0]
    if types.get(x) not in FLOATS or x not in shapes or w not in shapes or y not in shapes:
        return None
    if len(shapes[x]) != 5 or len(shapes[w]) != 5 or len(shapes[y]) != 5:
        return None
    a = attributes(n)
    if text(a.get("auto_pad"), "NOTSET") != "NOTSET":
        return None
    (batch, channels, frames, height, width), (out_channels, per_group, taps, kh, kw) = shapes[x], shapes[w]
    _, _, out_frames, out_height, out_width = shapes[y]
    st, sh, sw = a.get("strides", [1, 1, 1])
    dt, dh, dw = a.get("dilations", [1, 1, 1])
    pt0, ph0, pw0, pt1, ph1, pw1 = a.get("pads", [0] * 6)
    maker = NodeMaker(y, constants, added, opset)
    volume = maker.transpose(x, [0, 2, 1, 3, 4])  # [N, T, C, H, W]
    if pt0 or pt1:
        pads = [0, pt0, 0, 0, 0, 0, pt1, 0, 0, 0]
        volume = (maker.node("Pad", [volume], pads=pads) if opset < 11 else
                  maker.node("Pad", [volume, maker.constant("pads", np.asarray(pads, dtype=np.int64))]))
    padded_frames = frames + pt0 + pt1
    conv_attrs = {"strides": [sh, sw], "dilations": [dh, dw], "pads": [ph0, pw0, ph1, pw1],
                  "group": int(a.get("group", 1)), "kernel_shape": [kh, kw]}
    total = None
    for tap in range(taps):
        picked = [t * st + tap * dt for t in range(out_frames)]
        if picked[-1] >= padded_frames:
            return None
        tap_frames = volume if picked == list(range(padded_frames)) else maker.node(
            "Gather", [volume, maker.constant("frames", np.asarray(picked, dtype=np.int64))], axis=1)
        images = maker.reshape(tap_frames, [batch * out_frames, channels, height, width])
        kernel = maker.reshape(w, [out_channels, per_group, kh, kw]) if taps == 1 else maker.node(
            "Gather", [w, maker.constant("tap", np.asarray(tap, dtype=np.int64))], axis=2)
        bias = list(n.input[2:3]) if tap == 0 and len(n.input) > 2 and n.input[2] else []
        conv = maker.node("Conv", [images, kernel, *bias], **conv_attrs)
        total = conv if total is None else maker.node("Add", [total, conv])
    unfolded = maker.reshape(total, [batch, out_frames, out_channels, out_height, out_width])
    return maker.finish(maker.transpose(unfolded, [0, 2, 1, 3, 4]), n.name)


def _global_average_pool(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    x, y = n.input[0], n.output[0]
    rank = len(shapes.get(x, ()))
    if types.get(x) not in FLOATS or rank < 3 or rank == 4:
        return None
    maker = NodeMaker(y, constants, added, opset)
    return maker.finish(maker.reduce("ReduceMean", x, range(2, rank), keepdims=1), n.name)


def _instance_norm(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    x, y = n.input[0], n.output[0]
    if types.get(x) not in FLOATS or x not in shapes or len(shapes[x]) < 3 or len(n.input) != 3:
        return None
    rank, channels = len(shapes[x]), shapes[x][1]
    dtype = helper.tensor_dtype_to_np_dtype(types[x])
    maker = NodeMaker(y, constants, added, opset)
    spatial = list(range(2, rank))
    centred = maker.node("Sub", [x, maker.reduce("ReduceMean", x, spatial, keepdims=1)])
    variance = maker.reduce("ReduceMean", maker.node("Mul", [centred, centred]), spatial, keepdims=1)
    epsilon = maker.constant("epsilon", np.array(attributes(n).get("epsilon", 1e-5), dtype=dtype))
    root = maker.node("Sqrt", [maker.node("Add", [variance, epsilon])])
    per_channel = [channels] + [1] * (rank - 2)
    scaled = maker.node("Mul", [maker.node("Div", [centred, root]), maker.reshape(n.input[1], per_channel)])
    return maker.finish(maker.node("Add", [scaled, maker.reshape(n.input[2], per_channel)]), n.name)


_COORDINATES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "half_pixel_symmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def interpolation_matrix(length_in: int, length_out: int, scale: float, mode: str, coordinates: str,
                         nearest_mode: str) -> np.ndarray:
    """[length_out, length_in] weights of one axis of an ONNX Resize: output i reads
    sum_j M[i, j] * input[j] (the ONNX reference's coordinate transformations and
    neighbours; a neighbour past an edge reads the edge)."""
    i = np.arange(length_out, dtype=np.float64)
    if coordinates == "align_corners":
        x = i * (length_in - 1) / (length_out - 1) if length_out > 1 else np.zeros_like(i)
    elif coordinates == "asymmetric":
        x = i / scale
    elif coordinates == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if length_out > 1 else np.zeros_like(i)
    elif coordinates == "half_pixel_symmetric":
        adjustment = length_out / (scale * length_in)
        x = length_in / 2 * (1 - adjustment) + (i + 0.5) / scale - 0.5
    else:  # half_pixel
        x = (i + 0.5) / scale - 0.5
    m = np.zeros((length_out, length_in), dtype=np.float64)
    rows = np.arange(length_out)
    if mode == "nearest":
        if nearest_mode == "floor":
            j = np.floor(x)
        elif nearest_mode == "ceil":
            j = np.ceil(x)
        elif nearest_mode == "round_prefer_ceil":
            j = np.floor(x + 0.5)
        else:  # round_prefer_floor
            j = np.ceil(x - 0.5)
        m[rows, np.clip(j, 0, length_in - 1).astype(int)] = 1.0
        return m
    low = np.floor(x)
    ratio = x - low
    low = low.astype(int)
    np.add.at(m, (rows, np.clip(low, 0, length_in - 1)), 1.0 - ratio)
    np.add.at(m, (rows, np.clip(low + 1, 0, length_in - 1)), ratio)
    return m


def _resize(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    x, y = n.input[0], n.output[0]
    if opset < 11 or types.get(x) not in FLOATS or x not in shapes or y not in shapes or len(shapes[x]) != 4:
        return None
    a = attributes(n)
    mode = text(a.get("mode"), "nearest")
    coordinates = text(a.get("coordinate_transformation_mode"), "half_pixel")
    nearest_mode = text(a.get("nearest_mode"), "round_prefer_floor")
    if mode not in ("nearest", "linear") or coordinates not in _COORDINATES or nearest_mode not in _NEAREST:
        return None
    if a.get("antialias", 0) or text(a.get("keep_aspect_ratio_policy"), "stretch") != "stretch" or "axes" in a:
        return None
    scales = constant_value(n.input[2], constants) if len(n.input) > 2 and n.input[2] else None
    if scales is not None and scales.size == 0:
        scales = None
    in_shape, out_shape = shapes[x], shapes[y]
    if scales is None:  # sizes given: the scales are their ratios to the input's
        if len(n.input) < 4 or constant_value(n.input[3], constants) is None:
            return None
        scales = np.asarray(out_shape, dtype=np.float64) / np.asarray(in_shape, dtype=np.float64)
    scales = np.asarray(scales, dtype=np.float64)
    if scales.shape != (4,) or list(out_shape[:2]) != list(in_shape[:2]) or scales[0] != 1 or scales[1] != 1:
        return None
    dtype = helper.tensor_dtype_to_np_dtype(types[x])
    maker = NodeMaker(y, constants, added, opset)

    def along_last(t: str, axis: int) -> str:  # t @ M^T, M the axis's [out, in] weights
        m = interpolation_matrix(in_shape[axis], out_shape[axis], float(scales[axis]), mode, coordinates,
                                 nearest_mode)
        return maker.node("MatMul", [t, maker.constant(f"interpolation{axis}", m.T.astype(dtype))])

    swap_hw = [0, 1, 3, 2]
    current = x
    if out_shape[3] != in_shape[3] or scales[3] != 1:
        current = along_last(current, 3)
    if out_shape[2] != in_shape[2] or scales[2] != 1:
        current = maker.transpose(along_last(maker.transpose(current, swap_hw), 2), swap_hw)
    return maker.finish(current, n.name)


def lower_conv(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    """Conv: the 1-D and 3-D ones (the core's 2-D Conv takes the others)."""
    rank = len(shapes.get(n.input[0], ()))
    lowering = {3: _conv_1d, 5: _conv_3d}.get(rank)
    return lowering(n, constants, shapes, types, opset, added) if lowering else None


#: op type -> lowering (the signature of lowering.py's arithmetic ones)
SPATIAL = {"Conv": lower_conv, "GlobalAveragePool": _global_average_pool, "InstanceNormalization": _instance_norm,
           "Resize": _resize}
