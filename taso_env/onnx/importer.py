"""Load an ONNX model into a `Graph`.

What becomes what:
- graph inputs -> `Input` ops; graph inputs whose `doc_string` starts with "weight"
  (shape-only models whose initializer data was stripped) -> `Weight` ops without data;
- initializers and `Constant` nodes used as data -> `Weight` ops with data; those used as
  operator parameters (Reshape's shape, Split's sizes, Pad's pads, axes) become attributes;
- modelled operators -> core ops (docs/operators.md); any other operator, or a modelled
  one with a configuration the core does not model, -> an `Opaque` op whose shapes come
  from ONNX shape inference and whose NodeProto is exported back unchanged.

Errors are typed (taso_env.errors) and name the file and the node: a file that is not a
valid model -> MalformedOnnxError; a tensor without a shape -> MissingShapeError; a
symbolic or unknown dimension -> DynamicShapeError; inconsistent shapes -> ShapeError;
a cycle -> CycleError.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import numpy as np
import onnx
from onnx import numpy_helper

from taso_env import _core, dtypes, errors
from taso_env.engine.graph import Graph

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


def _cast(n: _Node) -> Conversion:
    to = int(n.attrs["to"])
    try:
        dtypes.to_numpy(to)
    except ValueError:
        return None
    return "Cast", n.inputs[:1], {"to": to}


_CONVERTERS: dict[str, Callable[[_Node], Conversion]] = {
    "Conv": _conv,
    "MatMul": _same("MatMul", 2),
    "Gemm": _gemm,
    "Add": _same("Add", 2),
    "Sub": _same("Sub", 2),
    "Mul": _same("Mul", 2),
    "Div": _same("Div", 2),
    "Relu": _same("Relu", 1),
    "Sigmoid": _same("Sigmoid", 1),
    "Tanh": _same("Tanh", 1),
    "Erf": _same("Erf", 1),
    "Gelu": _gelu,
    "Sqrt": _same("Sqrt", 1),
    "Exp": _same("Exp", 1),
    "Identity": _same("Identity", 1),
    "Concat": _concat,
    "Split": _split,
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "MaxPool": _pool("MaxPool2D"),
    "AveragePool": _pool("AvgPool2D"),
    "GlobalAveragePool": _same("GlobalAvgPool", 1),
    "BatchNormalization": _batchnorm,
    "Softmax": _softmax,
    "Pad": _pad,
    "ReduceMean": _reduce("ReduceMean"),
    "ReduceSum": _reduce("ReduceSum"),
    "LayerNormalization": _layernorm,
    "Gather": _gather,
    "Where": _same("Where", 3),
    "Cast": _cast,
    "Clip": _clip,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _same("HardSwish", 1),
    "Squeeze": _squeeze_like,
    "Unsqueeze": _squeeze_like,
}


# -- loading ---------------------------------------------------------------------------
def _read_model(source, where: str) -> onnx.ModelProto:
    if isinstance(source, onnx.ModelProto):
        return source
    try:
        if isinstance(source, bytes):
            model = onnx.load_from_string(source)
        else:
            if not os.path.exists(source):
                raise errors.OnnxImportError("no such file", path=where)
            model = onnx.load(source, load_external_data=False)
    except errors.OnnxImportError:
        raise
    except Exception as e:  # protobuf DecodeError, truncated files, ...
        raise errors.MalformedOnnxError(f"not a valid ONNX model ({type(e).__name__}: {e})",
                                        path=where) from None
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise errors.MalformedOnnxError("the model has no graph or no nodes", path=where)
    return model


def _check_and_infer(model: onnx.ModelProto, where: str) -> onnx.ModelProto:
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise errors.MalformedOnnxError(f"fails the ONNX checker: {e}", path=where) from None
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True)
    except Exception as e:
        raise errors.ShapeError(f"file {where!r}: ONNX shape inference failed: {e}") from None


def _tensor_type(vi: onnx.ValueInfoProto, where: str, node: str | None):
    t = vi.type
    if not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
        raise errors.MissingShapeError(f"tensor {vi.name!r} has no shape", path=where, node=node)
    dims = []
    for d in t.tensor_type.shape.dim:
        if not d.HasField("dim_value") or d.dim_value < 0:
            what = repr(d.dim_param) if d.HasField("dim_param") else "unknown"
            raise errors.DynamicShapeError(
                f"tensor {vi.name!r} has a {what} dimension; rlflow needs static shapes "
                "(export with fixed sizes or fix them with onnx.tools.update_model_dims)",
                path=where, node=node)
        dims.append(int(d.dim_value))
    return tuple(dims), int(t.tensor_type.elem_type)


def load_onnx(source, name: str | None = None) -> Graph:
    """Loads an ONNX model (path, bytes or ModelProto) as a Graph.

    Args:
        source: path of a .onnx file, its bytes, or an `onnx.ModelProto`.
        name: graph name (default: the file's stem).

    Returns:
        The graph, with weight data for every initializer.

    Raises:
        MalformedOnnxError, MissingShapeError, DynamicShapeError, ShapeError, CycleError.
    """
    where = str(source) if isinstance(source, (str, os.PathLike)) else "<in-memory model>"
    model = _read_model(source, where)
    _sort_nodes(model, where)
    model = _check_and_infer(model, where)
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    ctx = _ImportContext(where, opset)

    producer = {o: n.name or f"{n.op_type}#{i}" for i, n in enumerate(graph.node) for o in n.output}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        ctx.types[vi.name] = _tensor_type(vi, where, producer.get(vi.name))
    for init in graph.initializer:
        ctx.constants[init.name] = numpy_helper.to_array(init)
        ctx.types[init.name] = (tuple(init.dims), init.data_type)

    nodes = list(graph.node)
    for n in nodes:  # Constant nodes are constants, not ops
        if n.op_type == "Constant" and len(n.output) == 1:
            ctx.constants[n.output[0]] = numpy_helper.to_array(
                onnx.helper.get_attribute_value(n.attribute[0])) if n.attribute[0].name == "value" \
                else np.asarray(onnx.helper.get_attribute_value(n.attribute[0]))
            arr = ctx.constants[n.output[0]]
            ctx.types[n.output[0]] = (tuple(arr.shape), dtypes.from_numpy(arr.dtype))
    nodes = [n for n in nodes if not (n.op_type == "Constant" and n.output[0] in ctx.constants)]
    for n in nodes:
        for o in n.output:
            if o and o not in ctx.types:
                raise errors.MissingShapeError(f"output {o!r} has no shape after shape inference",
                                               path=where, node=n.name or n.op_type)

    core = _core.CoreGraph()
    tensors: dict[str, tuple[int, int]] = {}
    weights: dict[str, np.ndarray] = {}
    initializer_names = {i.name for i in graph.initializer}

    def add_source(op_type: str, tname: str) -> None:
        shape, dtype = ctx.types[tname]
        op = core.add_op(op_type, tname, [], {}, [(shape, dtype)])
        tensors[tname] = (op, 0)

    for vi in graph.input:
        if vi.name in initializer_names:
            continue  # an input with a default value: a weight with data
        add_source("Weight" if vi.doc_string.startswith("weight") else "Input", vi.name)

    def ref(tname: str, node_name: str) -> tuple[int, int]:
        if tname not in tensors:
            if tname not in ctx.constants:
                raise errors.GraphError(f"file {where!r}, node {node_name!r}: input {tname!r} is "
                                        "not produced by any node, input or initializer")
            add_source("Weight", tname)
            weights[tname] = ctx.constants[tname]
        return tensors[tname]

    for i, proto in enumerate(nodes):
        node = _Node(proto, ctx)
        node_name = proto.name or f"{proto.op_type}_{i}"
        conversion = None
        if proto.domain in ("", "ai.onnx") and proto.op_type in _CONVERTERS:
            conversion = _CONVERTERS[proto.op_type](node)
        try:
            if conversion is not None:
                op_type, data_inputs, attrs = conversion
                op = core.add_op(op_type, node_name, [ref(t, node_name) for t in data_inputs], attrs)
            else:
                op = core.add_op(
                    "Opaque", node_name, [ref(t, node_name) for t in proto.input if t],
                    {"onnx_op_type": proto.op_type, "onnx_node": _anonymous_node(proto)},
                    [ctx.types[o] if o else ((), dtypes.FLOAT32) for o in proto.output])
        except errors.TasoEnvError as e:
            raise type(e)(f"file {where!r}, node {node_name!r} ({proto.op_type}): {e}") from None
        for index, o in enumerate(proto.output):
            if o:
                tensors[o] = (op, index)
                _check_inferred(core, op, index, ctx.types[o], where, node_name, o)

    for vi in graph.output:
        core.add_output(ref(vi.name, "graph output"), vi.name)

    metadata = {
        "source": where,
        "onnx_opset": str(opset),
        "onnx_opset_imports": json.dumps({o.domain: o.version for o in model.opset_import}),
        "onnx_ir_version": str(model.ir_version),
    }
    for prop in model.metadata_props:
        metadata.setdefault(f"onnx:{prop.key}", prop.value)
    if name is None:
        name = os.path.splitext(os.path.basename(where))[0] if where != "<in-memory model>" else graph.name
    return Graph(core, weights, name or "graph", metadata)


def _anonymous_node(proto: onnx.NodeProto) -> bytes:
    """The node without its own and its tensors' names (kept: which optional inputs and
    outputs are present), so equal ops hash equal; export fills the names back in."""
    node = onnx.NodeProto()
    node.CopyFrom(proto)
    node.name = ""
    present_in = ["x" if t else "" for t in node.input]
    present_out = ["y" if t else "" for t in node.output]
    del node.input[:], node.output[:]
    node.input.extend(present_in)
    node.output.extend(present_out)
    return node.SerializeToString()


def _check_inferred(core, op: int, index: int, onnx_type, where: str, node: str, tname: str) -> None:
    """Our shape inference must agree with ONNX's; a disagreement is a bug to report."""
    shape, dtype = core.op_record(op)[6][index]
    if tuple(shape) != tuple(onnx_type[0]) or dtype != onnx_type[1]:
        raise errors.ShapeError(
            f"file {where!r}, node {node!r}: output {tname!r} inferred as "
            f"{dtypes.to_numpy(dtype)}{list(shape)} but ONNX says "
            f"{dtypes.to_numpy(onnx_type[1])}{list(onnx_type[0])}")


def _sort_nodes(model: onnx.ModelProto, where: str) -> None:
    """Sorts the nodes topologically in place (ONNX requires it; not every file does it).

    Raises:
        CycleError: the nodes form a cycle (names nodes on it).
        GraphError: a node reads a tensor nothing produces.
    """
    g = model.graph
    nodes = list(g.node)
    available = {i.name for i in g.input} | {i.name for i in g.initializer}
    order = _node_order(nodes, available, where)
    if order != list(range(len(nodes))):
        del g.node[:]
        g.node.extend(nodes[i] for i in order)


def _node_order(nodes: list[onnx.NodeProto], available: set[str], where: str) -> list[int]:
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = []
    for n in nodes:
        d = []
        for t in n.input:
            if t and t in producer:
                d.append(producer[t])
            elif t and t not in available:
                raise errors.GraphError(f"file {where!r}, node {n.name or n.op_type!r}: input {t!r} "
                                        "is not produced by any node, input or initializer")
        deps.append(d)
    try:
        return _core.sort_topologically(deps, [n.name or f"{n.op_type}#{i}" for i, n in enumerate(nodes)])
    except errors.CycleError as e:
        raise errors.CycleError(f"file {where!r}: {e}") from None
