"""The ONNX form of each core op: one emitter per op type (`EXPORTERS`), which the
exporter (exporter.py) calls for every computing op of a graph.

An emitter `emit(w, o, ins, outs)` appends to the writer `w` the standard ONNX nodes
(and initializers) computing op `o` from the tensors named `ins` into the tensors named
`outs` (docs/operators.md says which ONNX operators each op becomes). Input and Weight
have none: the exporter writes them as graph inputs and initializers. A fused activation
(Conv2D, MatMul) is the exporter's: the emitter writes the op without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from taso_env import dtypes

if TYPE_CHECKING:
    from taso_env.engine.graph import OpInfo
    from taso_env.onnx.exporter import _Writer

#: An op's emitter: (writer, op, input names, output names) -> None.
Emitter = Callable[["_Writer", "OpInfo", list[str], list[str]], None]


def _same_name(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    """The ONNX operator of the op's own name, with no attributes."""
    w.node(o.type, ins, outs, o.name)


def _conv2d(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    a = o.attrs
    kernel = list(w.graph.tensor(o.inputs[1]).shape[2:])
    w.node("Conv", ins, outs, o.name, kernel_shape=kernel, strides=a["strides"], pads=a["pads"],
           dilations=a["dilations"], group=a["group"])


def _gemm(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    a = o.attrs
    w.node("Gemm", ins, outs, o.name, transA=a["trans_a"], transB=a["trans_b"], alpha=a["alpha"], beta=a["beta"])


def _clip(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    dtype = w.graph.tensor(o.inputs[0]).np_dtype
    bounds = [w.const(f"{o.name}.{k}", o.attrs[k], dtype=dtype) for k in ("min", "max")]
    w.node("Clip", [*ins, *bounds], outs, o.name)


def _hard_sigmoid(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("HardSigmoid", ins, outs, o.name, alpha=o.attrs["alpha"], beta=o.attrs["beta"])


def _concat(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Concat", ins, outs, o.name, axis=o.attrs["axis"])


def _split(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Split", [*ins, w.const(f"{o.name}.split", o.attrs["split"])], outs, o.name, axis=o.attrs["axis"])


def _transpose(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Transpose", ins, outs, o.name, perm=o.attrs["perm"])


def _reshape(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Reshape", [*ins, w.const(f"{o.name}.shape", o.attrs["shape"])], outs, o.name)


def _flatten(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Flatten", ins, outs, o.name, axis=o.attrs["axis"])


def _pool(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    a, t = o.attrs, o.type
    extra = {"count_include_pad": a["count_include_pad"]} if t == "AvgPool2D" else {}
    w.node("MaxPool" if t == "MaxPool2D" else "AveragePool", ins, outs, o.name,
           kernel_shape=a["kernel"], strides=a["strides"], pads=a["pads"],
           ceil_mode=a["ceil_mode"], **extra)


def _global_avg_pool(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("GlobalAveragePool", ins, outs, o.name)


def _batch_norm(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("BatchNormalization", ins, outs, o.name, epsilon=o.attrs["epsilon"])


def _enlarge(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    """A Pad of the weight: the kernel zero-padded symmetrically to the new size."""
    kh, kw = w.graph.tensor(o.inputs[0]).shape[2:]
    ph, pw = (o.attrs["kernel"][0] - kh) // 2, (o.attrs["kernel"][1] - kw) // 2
    w.node("Pad", [*ins, w.const(f"{o.name}.pads", [0, 0, ph, pw, 0, 0, ph, pw])], outs, o.name)


def _softmax(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Softmax", ins, outs, o.name, axis=o.attrs["axis"])


def _pad(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    dtype = w.graph.tensor(o.inputs[0]).np_dtype
    value = w.const(f"{o.name}.value", o.attrs["value"], dtype=dtype)
    w.node("Pad", [*ins, w.const(f"{o.name}.pads", o.attrs["pads"]), value], outs, o.name)


def _reduce(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    """ReduceSum takes its axes as an input; ReduceMean does from opset 18."""
    a, t = o.attrs, o.type
    if t == "ReduceSum" or w.opset >= 18:
        w.node(t, [*ins, w.const(f"{o.name}.axes", a["axes"])], outs, o.name, keepdims=a["keepdims"])
    else:
        w.node(t, ins, outs, o.name, axes=a["axes"], keepdims=a["keepdims"])


def _layer_norm(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("LayerNormalization", ins, outs, o.name, axis=o.attrs["axis"], epsilon=o.attrs["epsilon"])


def _gather(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Gather", ins, outs, o.name, axis=o.attrs["axis"])


def _cumsum(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    """CumSum takes its axis as a 0-D int64 input."""
    a = o.attrs
    w.node("CumSum", [*ins, w.const(f"{o.name}.axis", a["axis"])], outs, o.name, exclusive=a["exclusive"],
           reverse=a["reverse"])


def _gather_elements(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("GatherElements", ins, outs, o.name, axis=o.attrs["axis"])


def _cast(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    w.node("Cast", ins, outs, o.name, to=o.attrs["to"])


def _constant(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    a = o.attrs
    value = np.full(a["shape"], a["value"], dtype=dtypes.to_numpy(a["dtype"]))
    w.node("Constant", [], outs, o.name, value=numpy_helper.from_array(value))


def _opaque(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    """The NodeProto the op was loaded from, rewired to the current tensor names."""
    node = onnx.NodeProto()
    node.ParseFromString(o.attrs["onnx_node"])
    it = iter(ins)
    new_inputs = [next(it) if name else "" for name in node.input]
    del node.input[:]
    node.input.extend(new_inputs)
    new_outputs = [outs[i] if name else "" for i, name in enumerate(node.output)]
    del node.output[:]
    node.output.extend(new_outputs)
    node.name = w.fresh(o.name)
    w.nodes.append(node)


#: Core op type -> its emitter. Read-only; every computing op type has one
#: (tests/test_operator_facets.py).
EXPORTERS: Mapping[str, Emitter] = MappingProxyType({
    "Conv2D": _conv2d, "MatMul": _same_name, "Gemm": _gemm,
    "Add": _same_name, "Sub": _same_name, "Mul": _same_name, "Div": _same_name,
    "Relu": _same_name, "Sigmoid": _same_name, "Tanh": _same_name, "Erf": _same_name, "Gelu": _same_name,
    "Sqrt": _same_name, "Exp": _same_name, "Identity": _same_name,
    "Concat": _concat, "Split": _split, "Transpose": _transpose, "Reshape": _reshape, "Flatten": _flatten,
    "MaxPool2D": _pool, "AvgPool2D": _pool, "GlobalAvgPool": _global_avg_pool, "BatchNorm": _batch_norm,
    "Enlarge": _enlarge, "Softmax": _softmax, "Pad": _pad, "ReduceMean": _reduce, "ReduceSum": _reduce,
    "LayerNorm": _layer_norm, "Gather": _gather, "Where": _same_name, "Cast": _cast, "Constant": _constant,
    "Opaque": _opaque,
    "Clip": _clip, "HardSigmoid": _hard_sigmoid, "HardSwish": _same_name,
    "CumSum": _cumsum, "Equal": _same_name, "GatherElements": _gather_elements,
})
