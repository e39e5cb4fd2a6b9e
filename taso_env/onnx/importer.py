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
from collections.abc import Mapping

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper

from taso_env import _core, dtypes, errors
from taso_env.engine.graph import Graph
from taso_env.onnx.converters import CONVERTERS, _ImportContext, _Node
from taso_env.onnx.folding import SAMPLE, fold_constants, is_constant_data
from taso_env.onnx.lowering import lower


# -- loading ---------------------------------------------------------------------------
def _read_model(source, where: str) -> onnx.ModelProto:
    """The ModelProto of a path, bytes or ModelProto; a file's external data (weights
    kept beside it, as models over 2 GB must) is read in from its folder."""
    if isinstance(source, onnx.ModelProto):
        model = source
    else:
        try:
            if isinstance(source, bytes):
                model = onnx.load_from_string(source)
            else:
                if not os.path.exists(source):
                    raise errors.OnnxImportError("no such file", path=where)
                model = onnx.load(source, load_external_data=False)
                if any(external_data_helper.uses_external_data(t) for t in model.graph.initializer):
                    external_data_helper.load_external_data_for_model(model, os.path.dirname(os.fspath(source)))
        except errors.OnnxImportError:
            raise
        except Exception as e:  # protobuf DecodeError, truncated files, a missing external data file, ...
            raise errors.MalformedOnnxError(f"not a valid ONNX model ({type(e).__name__}: {e})",
                                            path=where) from None
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise errors.MalformedOnnxError("the model has no graph or no nodes", path=where)
    unread = [t.name for t in model.graph.initializer if external_data_helper.uses_external_data(t)]
    if unread:
        raise errors.MalformedOnnxError(
            f"{len(unread)} initializers (e.g. {unread[0]!r}) are in external data that a model given as bytes or "
            "a ModelProto cannot locate: load it from its file path", path=where)
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


def _set_weights_aside(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[onnx.TensorProto]]:
    """A copy of `model` without its large learned weights, each a graph input of its
    shape instead, and those weights. The checker, shape inference, folding and lowering
    copy the model several times each; they need the weights' shapes, not their data, so
    a model with real weights (GPT-2: 500 MB) loads in seconds, not tens of them."""
    inputs = {i.name for i in model.graph.input}
    weights = [i for i in model.graph.initializer if _is_learned_weight(i)]
    if not weights:
        return model, []
    names = {w.name for w in weights}
    graph = _copy_fields(model.graph, onnx.GraphProto(), skip="initializer")
    graph.initializer.extend(i for i in model.graph.initializer if i.name not in names)
    graph.input.extend(onnx.helper.make_tensor_value_info(w.name, w.data_type, list(w.dims)) for w in weights
                       if w.name not in inputs)
    light = _copy_fields(model, onnx.ModelProto(), skip="graph")
    light.graph.CopyFrom(graph)
    return light, weights


def _is_learned_weight(init: onnx.TensorProto) -> bool:
    """A float initializer of more than folding's SAMPLE elements that is not constant data
    (judged on its first SAMPLE elements, read without converting it all)."""
    if init.data_type not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                              onnx.TensorProto.DOUBLE) or int(np.prod(init.dims, dtype=np.int64)) <= SAMPLE:
        return False
    if init.raw_data and init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
        dtype = np.dtype(np.float32 if init.data_type == onnx.TensorProto.FLOAT else np.float64)
        head = np.frombuffer(init.raw_data[:SAMPLE * dtype.itemsize], dtype=dtype)
    else:
        head = numpy_helper.to_array(init).reshape(-1)[:SAMPLE]
    return not is_constant_data(head)


def _copy_fields(source, target, skip: str):
    """`target` with every field of the message `source` but `skip` copied into it."""
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(target, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)
    return target


def _bind_dims(model: onnx.ModelProto, dims: dict[str, int], where: str) -> onnx.ModelProto:
    """`model` with its inputs' symbolic dims set from `dims` and every other shape left to
    inference (the same object when the inputs are static and `dims` is empty)."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    free = [(vi.name, axis, d.dim_param) for vi in inputs if vi.type.HasField("tensor_type")
            for axis, d in enumerate(vi.type.tensor_type.shape.dim) if not d.HasField("dim_value") or d.dim_value < 0]
    if not free and not dims:
        return model
    unknown = set(dims) - {p for _, _, p in free if p} - {f"{n}:{a}" for n, a, _ in free}
    if unknown:
        raise errors.OnnxImportError(f"dims names {sorted(unknown)}, which no input has as a symbolic dimension "
                                     f"(symbolic: {_describe(free) or 'none'})", path=where)
    missing = [(n, a, p) for n, a, p in free if p not in dims and f"{n}:{a}" not in dims]
    if missing:
        example = " ".join(f"{key}=N" for key in dict.fromkeys(p or f"{n}:{a}" for n, a, p in missing))
        raise errors.DynamicShapeError(
            f"inputs have symbolic dimensions {_describe(missing)}; rlflow optimises one static shape: give "
            f"their sizes (load_onnx(..., dims={{...}}) or on the command line --dims {example})", path=where)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    initializers = {i.name for i in model.graph.initializer}
    for vi in model.graph.input:
        if vi.name in initializers or not vi.type.HasField("tensor_type"):
            continue
        for axis, d in enumerate(vi.type.tensor_type.shape.dim):
            key = d.dim_param if d.dim_param in dims else f"{vi.name}:{axis}"
            if key in dims:
                value = int(dims[key])
                if value < 1:
                    raise errors.OnnxImportError(f"dims[{key!r}] = {value}: a size must be at least 1", path=where)
                d.Clear()
                d.dim_value = value
    for vi in model.graph.output:  # inferred again from the fixed inputs
        for d in vi.type.tensor_type.shape.dim:
            d.Clear()
    del model.graph.value_info[:]
    return model


#: At most this many folding rounds (each one re-infers shapes). A TorchScript export
#: with dynamic axes chains shape arithmetic through every block (Swin-T: 28 rounds, a
#: few hundredths of a second each).
_FOLD_ROUNDS = 256


def _forget_inferred(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` without the shapes inference gave it (value_info, the outputs' symbolic
    dims), so that inference after a rewrite starts from the inputs, not from dims it
    could not know before (an 'unk__' dim of a Range whose bounds are now constants)."""
    del model.graph.value_info[:]
    for vi in model.graph.output:
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.Clear()
    return model


def _describe(free) -> str:
    return ", ".join(f"{n}[{a}]" + (f" ({p!r})" if p else "") for n, a, p in free)


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


def load_onnx(source, name: str | None = None, dims: Mapping[str, int] | None = None) -> Graph:
    """Loads an ONNX model (path, bytes or ModelProto) as a Graph.

    Args:
        source: path of a .onnx file, its bytes, or an `onnx.ModelProto`.
        name: graph name (default: the file's stem).
        dims: sizes of the inputs' symbolic dimensions, by name ({"batch": 1,
            "sequence": 128}) or, for an unnamed one, by "<input>:<axis>". rlflow
            optimises one static shape: an export with dynamic axes loads once they are
            fixed; shapes computed from them (Shape -> Gather -> Concat -> Reshape) then
            fold to constants.

    Returns:
        The graph, with weight data for every initializer.

    Raises:
        MalformedOnnxError, MissingShapeError, DynamicShapeError (a symbolic input
        dimension `dims` does not fix: the message lists them all), ShapeError, CycleError.
        A model that breaks the importer's assumptions in any other way (an initializer
        whose data does not fit its dims, a name that is not UTF-8, an attribute of the
        wrong kind) is a MalformedOnnxError naming the file, the stage and the node.
    """
    where = str(source) if isinstance(source, (str, os.PathLike)) else "<in-memory model>"
    place = {"stage": "reading the model", "node": None}
    try:
        return _import(source, name, dims, where, place)
    except errors.TasoEnvError:
        raise
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, UnicodeError, OverflowError,
            RecursionError, MemoryError) as e:
        raise errors.MalformedOnnxError(f"{place['stage']}: {type(e).__name__}: {e}", path=where,
                                        node=place["node"]) from None


def _import(source, name: str | None, dims: Mapping[str, int] | None, where: str, place: dict) -> Graph:
    """load_onnx's work; `place` is kept up to date with the stage and node at work."""
    model = _read_model(source, where)
    place["stage"] = "checking and inferring shapes"
    model, set_aside = _set_weights_aside(model)  # before any copy of the model
    model = _bind_dims(model, dict(dims or {}), where)
    _sort_nodes(model, where)
    model = _check_and_infer(model, where)
    # Constants folded (folding.py), then ONNX ops as core ops (lowering.py). Folding runs
    # until nothing folds: a shape known only after one round's constants (a Range of a
    # folded Shape) lets the next round fold what reads it.
    place["stage"] = "folding constants and lowering"
    for _ in range(_FOLD_ROUNDS):
        folded = fold_constants(model)
        if folded is model:
            break
        model = _check_and_infer(_forget_inferred(folded), where)
    lowered = lower(model)
    if lowered is not model:
        model = _check_and_infer(_forget_inferred(lowered), where)
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    ctx = _ImportContext(where, opset)

    producer = {o: n.name or f"{n.op_type}#{i}" for i, n in enumerate(graph.node) for o in n.output}
    for vi in [*graph.input, *graph.value_info, *graph.output]:
        ctx.types[vi.name] = _tensor_type(vi, where, producer.get(vi.name))
    for init in [*graph.initializer, *set_aside]:
        place["stage"] = f"reading initializer {init.name!r}"
        ctx.constants[init.name] = numpy_helper.to_array(init)
        ctx.types[init.name] = (tuple(init.dims), init.data_type)

    nodes = list(graph.node)
    for n in nodes:  # Constant nodes are constants, not ops
        if n.op_type == "Constant" and len(n.output) == 1:
            place["stage"], place["node"] = "reading a Constant's value", n.name or n.op_type
            if len(n.attribute) != 1:
                raise errors.MalformedOnnxError(f"a Constant needs one attribute, has {len(n.attribute)}",
                                                path=where, node=n.name or n.op_type)
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
    initializer_names = {i.name for i in graph.initializer} | {w.name for w in set_aside}

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
        place["stage"], place["node"] = f"converting a {proto.op_type} node", node_name
        conversion = None
        if proto.domain in ("", "ai.onnx") and proto.op_type in CONVERTERS:
            conversion = CONVERTERS[proto.op_type].convert(node)
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

    place["stage"], place["node"] = "adding the graph outputs", None
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
