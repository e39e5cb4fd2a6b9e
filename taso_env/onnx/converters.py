"""ONNX node -> core op converters of the importer (importer.py): each returns (op_type,
data inputs, attrs), or None when the node's configuration is not one the core models
(it then loads as an opaque op)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

import numpy as np
import onnx

from taso_env import dtypes

# ONNX Conv/Gemm/... converters return (op_type, data inputs, attrs) or None when the
# node's configuration is not one the core models (it then loads as an opaque op).
Conversion = tuple[str, list[str], dict] | None


class _Node:
    """An ONNX node with access to its constants and the inferred tensor types."""

    def __init__(self, proto: onnx.NodeProto, ctx: _ImportContext):
        self.proto = proto
        self.ctx = ctx
        self.attrs = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        self.inputs = list(proto.input)
        self.outputs = list(proto.output)

    def const(self, slot: int) -> np.ndarray | None:
        """The constant value of input `slot`, or None if absent or not constant."""
        if slot >= len(self.inputs) or not self.inputs[slot]:
            return None
        return self.ctx.constants.get(self.inputs[slot])

    def has_input(self, slot: int) -> bool:
        return slot < len(self.inputs) and bool(self.inputs[slot])

    def shape(self, name: str) -> tuple[int, ...]:
        return self.ctx.types[name][0]

    def rank(self, slot: int) -> int:
        return len(self.shape(self.inputs[slot]))


class _ImportContext:
    def __init__(self, path: str, opset: int):
        self.path = path
        self.opset = opset
        self.constants: dict[str, np.ndarray] = {}
        self.types: dict[str, tuple[tuple[int, ...], int]] = {}


# -- converters ------------------------------------------------------------------------
def _spatial_pads(n: _Node, kernel: list[int], strides: list[int], dilations: list[int]) -> list[int] | None:
    """[top, left, bottom, right] pads from `pads` or `auto_pad`; None if not 2-D."""
    auto_pad = n.attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("NOTSET", ""):
        pads = list(n.attrs.get("pads", [0, 0, 0, 0]))
        return pads if len(pads) == 4 else None
    if auto_pad == "VALID":
        return [0, 0, 0, 0]
    in_hw = n.shape(n.inputs[0])[2:]
    begins, ends = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations, strict=True):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small = total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return [begins[0], begins[1], ends[0], ends[1]]


def _conv(n: _Node) -> Conversion:
    if n.rank(0) != 4 or n.rank(1) != 4:
        return None
    kernel = list(n.shape(n.inputs[1])[2:])
    strides = list(n.attrs.get("strides", [1, 1]))
    dilations = list(n.attrs.get("dilations", [1, 1]))
    pads = _spatial_pads(n, kernel, strides, dilations)
    if pads is None:
        return None
    inputs = n.inputs[:3] if n.has_input(2) else n.inputs[:2]
    return "Conv2D", inputs, {"strides": strides, "dilations": dilations, "pads": pads,
                              "group": int(n.attrs.get("group", 1))}


def _pool(op_type: str) -> Callable[[_Node], Conversion]:
    def convert(n: _Node) -> Conversion:
        if n.rank(0) != 4 or len(n.outputs) > 1 or any(d != 1 for d in n.attrs.get("dilations", [1, 1])):
            return None
        if n.attrs.get("storage_order", 0) != 0:
            return None
        kernel = list(n.attrs["kernel_shape"])
        strides = list(n.attrs.get("strides", [1, 1]))
        pads = _spatial_pads(n, kernel, strides, [1, 1])
        if pads is None:
            return None
        attrs = {"kernel": kernel, "strides": strides, "pads": pads,
                 "ceil_mode": int(n.attrs.get("ceil_mode", 0))}
        if op_type == "AvgPool2D":
            attrs["count_include_pad"] = int(n.attrs.get("count_include_pad", 0))
        return op_type, n.inputs[:1], attrs
    return convert


def _gemm(n: _Node) -> Conversion:
    return "Gemm", [i for i in n.inputs if i], {
        "trans_a": int(n.attrs.get("transA", 0)), "trans_b": int(n.attrs.get("transB", 0)),
        "alpha": float(n.attrs.get("alpha", 1.0)), "beta": float(n.attrs.get("beta", 1.0))}


def _same(op_type: str, num_inputs: int) -> Callable[[_Node], Conversion]:
    def convert(n: _Node) -> Conversion:
        if len(n.inputs) != num_inputs or len(n.outputs) != 1 or n.attrs:
            return None
        return op_type, n.inputs, {}
    return convert


def _global_avg_pool(n: _Node) -> Conversion:
    """GlobalAveragePool of an NCHW tensor (the core's GlobalAvgPool); other ranks (1-D
    and 3-D pooling) load as opaque ops."""
    return _same("GlobalAvgPool", 1)(n) if n.rank(0) == 4 else None


def _gelu(n: _Node) -> Conversion:
    approx = n.attrs.get("approximate", b"none")
    return ("Gelu", n.inputs[:1], {}) if approx in (b"none", "none") else None


def _clip(n: _Node) -> Conversion:
    if n.ctx.opset < 11:
        bounds = [n.attrs.get("min"), n.attrs.get("max")]
    else:
        bounds = []
        for slot in (1, 2):
            if not n.has_input(slot):
                bounds.append(None)
                continue
            value = n.const(slot)
            if value is None or value.size != 1:
                return None  # bounds computed at run time: opaque
            bounds.append(float(value.reshape(-1)[0]))
    attrs = {k: float(v) for k, v in zip(("min", "max"), bounds) if v is not None}
    return "Clip", n.inputs[:1], attrs


def _hard_sigmoid(n: _Node) -> Conversion:
    return "HardSigmoid", n.inputs[:1], {"alpha": float(n.attrs.get("alpha", 0.2)),
                                        "beta": float(n.attrs.get("beta", 0.5))}


def _squeeze_like(n: _Node) -> Conversion:
    """Squeeze / Unsqueeze: with static shapes, a Reshape to the inferred output shape."""
    if len(n.outputs) != 1:
        return None
    return "Reshape", n.inputs[:1], {"shape": list(n.shape(n.outputs[0]))}


def _concat(n: _Node) -> Conversion:
    return "Concat", n.inputs, {"axis": int(n.attrs["axis"])}


def _split(n: _Node) -> Conversion:
    axis = int(n.attrs.get("axis", 0))
    # Output shapes are static, so the sizes can always be read from them.
    sizes = [n.shape(o)[axis] for o in n.outputs]
    return "Split", n.inputs[:1], {"axis": axis, "split": sizes}


def _transpose(n: _Node) -> Conversion:
    attrs = {"perm": list(n.attrs["perm"])} if "perm" in n.attrs else {}
    return "Transpose", n.inputs[:1], attrs


def _reshape(n: _Node) -> Conversion:
    # The static output shape from shape inference is the resolved target shape.
    return "Reshape", n.inputs[:1], {"shape": list(n.shape(n.outputs[0]))}


def _flatten(n: _Node) -> Conversion:
    return "Flatten", n.inputs[:1], {"axis": int(n.attrs.get("axis", 1))}


def _batchnorm(n: _Node) -> Conversion:
    if len([o for o in n.outputs if o]) != 1 or n.attrs.get("training_mode", 0):
        return None
    return "BatchNorm", n.inputs[:5], {"epsilon": float(n.attrs.get("epsilon", 1e-5))}


def _softmax(n: _Node) -> Conversion:
    axis = int(n.attrs.get("axis", -1 if n.ctx.opset >= 13 else 1))
    rank = n.rank(0)
    if n.ctx.opset < 13 and axis % rank != rank - 1:
        return None  # opset < 13 softmax flattens; only the last-axis case is the same op
    return "Softmax", n.inputs[:1], {"axis": axis}


def _pad(n: _Node) -> Conversion:
    mode = n.attrs.get("mode", b"constant")
    if mode not in (b"constant", "constant"):
        return None
    if n.ctx.opset >= 11:
        pads, value = n.const(1), n.const(2)
        if pads is None or (n.has_input(2) and value is None) or n.has_input(3):
            return None
        value = float(value.reshape(-1)[0]) if value is not None else 0.0
    else:
        pads, value = np.array(n.attrs["pads"]), float(n.attrs.get("value", 0.0))
    return "Pad", n.inputs[:1], {"pads": [int(p) for p in pads], "value": value}


def _reduce(op_type: str) -> Callable[[_Node], Conversion]:
    def convert(n: _Node) -> Conversion:
        axes = n.attrs.get("axes")
        if n.has_input(1):
            const = n.const(1)
            if const is None:
                return None
            axes = const.tolist()
        attrs = {"keepdims": int(n.attrs.get("keepdims", 1))}
        if axes is not None and len(axes) > 0:
            attrs["axes"] = [int(a) for a in axes]
        elif n.attrs.get("noop_with_empty_axes", 0):
            return None
        return op_type, n.inputs[:1], attrs
    return convert


def _layernorm(n: _Node) -> Conversion:
    if len([o for o in n.outputs if o]) != 1:
        return None
    return "LayerNorm", [i for i in n.inputs if i], {
        "axis": int(n.attrs.get("axis", -1)), "epsilon": float(n.attrs.get("epsilon", 1e-5))}


def _gather(n: _Node) -> Conversion:
    return "Gather", n.inputs[:2], {"axis": int(n.attrs.get("axis", 0))}


def _cumsum(n: _Node) -> Conversion:
    """ONNX CumSum with a constant axis input."""
    axis = n.const(1)
    if axis is None or axis.size != 1 or len(n.outputs) != 1:
        return None
    return "CumSum", n.inputs[:1], {"axis": int(axis.reshape(-1)[0]), "exclusive": int(n.attrs.get("exclusive", 0)),
                                    "reverse": int(n.attrs.get("reverse", 0))}


def _gather_elements(n: _Node) -> Conversion:
    return "GatherElements", n.inputs[:2], {"axis": int(n.attrs.get("axis", 0))}


def _cast(n: _Node) -> Conversion:
    to = int(n.attrs["to"])
    try:
        dtypes.to_numpy(to)
    except ValueError:
        return None
    return "Cast", n.inputs[:1], {"to": to}


class OnnxImport(NamedTuple):
    """How an ONNX op type loads: as `core_op_type`, through `convert` (which returns None
    for a configuration the core does not model: the node then loads as an opaque op)."""

    core_op_type: str
    convert: Callable[[_Node], Conversion]


#: ONNX op type (default domain) -> how it loads. Read-only. Operators lowered into
#: several core ops are lowering.py's and lowering_spatial.py's.
CONVERTERS: Mapping[str, OnnxImport] = MappingProxyType({
    "Conv": OnnxImport("Conv2D", _conv),
    "MatMul": OnnxImport("MatMul", _same("MatMul", 2)),
    "Gemm": OnnxImport("Gemm", _gemm),
    "Add": OnnxImport("Add", _same("Add", 2)),
    "Sub": OnnxImport("Sub", _same("Sub", 2)),
    "Mul": OnnxImport("Mul", _same("Mul", 2)),
    "Div": OnnxImport("Div", _same("Div", 2)),
    "Relu": OnnxImport("Relu", _same("Relu", 1)),
    "Sigmoid": OnnxImport("Sigmoid", _same("Sigmoid", 1)),
    "Tanh": OnnxImport("Tanh", _same("Tanh", 1)),
    "Erf": OnnxImport("Erf", _same("Erf", 1)),
    "Gelu": OnnxImport("Gelu", _gelu),
    "Sqrt": OnnxImport("Sqrt", _same("Sqrt", 1)),
    "Exp": OnnxImport("Exp", _same("Exp", 1)),
    "Identity": OnnxImport("Identity", _same("Identity", 1)),
    "Concat": OnnxImport("Concat", _concat),
    "Split": OnnxImport("Split", _split),
    "Transpose": OnnxImport("Transpose", _transpose),
    "Reshape": OnnxImport("Reshape", _reshape),
    "Flatten": OnnxImport("Flatten", _flatten),
    "MaxPool": OnnxImport("MaxPool2D", _pool("MaxPool2D")),
    "AveragePool": OnnxImport("AvgPool2D", _pool("AvgPool2D")),
    "GlobalAveragePool": OnnxImport("GlobalAvgPool", _global_avg_pool),
    "BatchNormalization": OnnxImport("BatchNorm", _batchnorm),
    "Softmax": OnnxImport("Softmax", _softmax),
    "Pad": OnnxImport("Pad", _pad),
    "ReduceMean": OnnxImport("ReduceMean", _reduce("ReduceMean")),
    "ReduceSum": OnnxImport("ReduceSum", _reduce("ReduceSum")),
    "LayerNormalization": OnnxImport("LayerNorm", _layernorm),
    "Gather": OnnxImport("Gather", _gather),
    "Where": OnnxImport("Where", _same("Where", 3)),
    "Cast": OnnxImport("Cast", _cast),
    "Clip": OnnxImport("Clip", _clip),
    "HardSigmoid": OnnxImport("HardSigmoid", _hard_sigmoid),
    "HardSwish": OnnxImport("HardSwish", _same("HardSwish", 1)),
    "Squeeze": OnnxImport("Reshape", _squeeze_like),
    "Unsqueeze": OnnxImport("Reshape", _squeeze_like),
    "CumSum": OnnxImport("CumSum", _cumsum),
    "Equal": OnnxImport("Equal", _same("Equal", 2)),
    "GatherElements": OnnxImport("GatherElements", _gather_elements),
})
