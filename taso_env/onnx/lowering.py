"""ONNX nodes the core has no op for, rewritten before import into ONNX nodes it has,
computing exactly the same values (so they load as modelled ops, not opaque ones):

- GatherND (batch_dims 0) with constant indices: a Reshape that merges the indexed
  leading dims of the data into one, then a Gather of the flat indices along it. The
  Hugging Face BERT export's attention-mask preprocessing uses this.
- And(a, b) on bools: Cast(Where(a, Cast(b, uint8), 0), bool) (through uint8 because
  onnxruntime has no Where kernel for bools, and exported graphs are checked there).

A node whose configuration is not covered (indices computed at run time, batch_dims > 0,
unknown shapes, an index out of range) is left as it is and loads as an opaque op.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

LOWERED = ("GatherND", "And")


def lower(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (already through ONNX shape inference, as the importer has it) with every
    coverable GatherND / And node rewritten (the same object when there is none;
    otherwise a copy, to be inferred again)."""
    if not any(n.op_type in LOWERED and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    constants = {i.name: i for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and len(n.output) == 1 and n.attribute and n.attribute[0].name == "value":
            constants[n.output[0]] = n.attribute[0].t
    shapes = _static_shapes(model)
    nodes, added = [], []
    for n in graph.node:
        if n.domain not in ("", "ai.onnx"):
            nodes.append(n)
        elif n.op_type == "GatherND":
            nodes.extend(_gather_nd(n, constants, shapes, added) or [n])
        elif n.op_type == "And" and len(n.input) == 2 and len(n.output) == 1:
            nodes.extend(_and(n, constants, added))
        else:
            nodes.append(n)
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(added)
    return model


def _fresh(name: str, taken) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out


def _static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Shapes of every tensor of the inferred model whose dims are all known."""
    g = model.graph
    out = {i.name: tuple(i.dims) for i in g.initializer}
    for vi in [*g.input, *g.value_info, *g.output]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") and \
                all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    return out


def _and(n: onnx.NodeProto, constants, added) -> list[onnx.NodeProto]:
    out = n.output[0]
    zero = _fresh(f"{out}__zero", constants)
    added.append(numpy_helper.from_array(np.array(0, dtype=np.uint8), zero))
    constants[zero] = added[-1]
    b8, picked = _fresh(f"{out}__b_u8", constants), _fresh(f"{out}__u8", constants)
    return [helper.make_node("Cast", [n.input[1]], [b8], name=f"{n.name}__cast_b", to=onnx.TensorProto.UINT8),
            helper.make_node("Where", [n.input[0], b8, zero], [picked], name=f"{n.name}__where"),
            helper.make_node("Cast", [picked], [out], name=n.name, to=onnx.TensorProto.BOOL)]


def _gather_nd(n: onnx.NodeProto, constants, shapes, added) -> list[onnx.NodeProto] | None:
    attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
    if attrs.get("batch_dims", 0) != 0 or len(n.input) != 2 or len(n.output) != 1:
        return None
    data, indices = n.input
    if indices not in constants or data not in shapes:
        return None
    idx = numpy_helper.to_array(constants[indices]).astype(np.int64)
    shape = shapes[data]
    if idx.ndim < 1 or idx.shape[-1] < 1 or idx.shape[-1] > len(shape):
        return None
    k = idx.shape[-1]
    lead = np.asarray(shape[:k], dtype=np.int64)
    wrapped = np.where(idx < 0, idx + lead, idx)
    if np.any(wrapped < 0) or np.any(wrapped >= lead):
        return None
    flat = np.zeros(idx.shape[:-1], dtype=np.int64)
    for j in range(k):
        flat = flat * lead[j] + wrapped[..., j]
    out = n.output[0]
    taken = set(constants) | set(shapes)
    flat_shape_name = _fresh(f"{out}__flat_shape", taken)
    flat_index_name = _fresh(f"{out}__flat_index", taken)
    flat_data_name = _fresh(f"{out}__flat", taken)
    flat_shape = np.asarray([int(np.prod(lead))] + list(shape[k:]), dtype=np.int64)
    for name, value in ((flat_shape_name, flat_shape), (flat_index_name, flat)):
        added.append(numpy_helper.from_array(value, name))
        constants[name] = added[-1]
    return [helper.make_node("Reshape", [data, flat_shape_name], [flat_data_name], name=f"{n.name}__reshape"),
            helper.make_node("Gather", [flat_data_name, flat_index_name], [out], name=n.name, axis=0)]
