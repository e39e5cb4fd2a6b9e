"""ONNX nodes the core has no op for, rewritten before import into ONNX nodes it has,
computing exactly the same values (so they load as modelled ops, not opaque ones):

- GatherND (batch_dims 0) with constant indices: a Reshape that merges the indexed
  leading dims of the data into one, then a Gather of the flat indices along it. The
  Hugging Face BERT export's attention-mask preprocessing uses this.
- And(a, b) on bools: Cast(Where(a, Cast(b, uint8), 0), bool) (through uint8 because
  onnxruntime has no Where kernel for bools, and exported graphs are checked there).
- Not(b) on bools: Cast(Where(b, 0, 1) on uint8, bool), as And. Neg(x) of a float x:
  Mul(x, -1) (RoPE's rotate_half in Llama / Qwen exports).
- Pow(x, c) of a float x and a constant one-element exponent c in {1, 2, 3, 4, 0.5, -0.5,
  -1}: Identity, products of x (GPT-2 / ALBERT's tanh GELU has x^3, T5's RMS norm x^2),
  Sqrt, and Div(1, .) for the negative ones. Reciprocal(x) of a float x: Div(1, x).
- Slice with constant starts / ends / axes and positive steps of a tensor with a static
  shape: per sliced axis a Split into [before, kept, after] keeping the middle part
  (Swin's shifted windows); with a step k > 1, the kept part reshaped to [count, k] and
  split again keeping one column, then reshaped back (Swin's patch merging, x[0::2]).
  A slice that keeps everything is an Identity.
- ReduceL2(x, axes, keepdims): Sqrt(ReduceSum(Mul(x, x), axes, keepdims)) (Swin V2's
  cosine attention).
- Expand(x, shape) with a constant shape: Mul(x, ones) where ones has the output's size
  on the broadcast axes and 1 elsewhere (Swin V2's norms expanded over the features); an
  Expand to the shape x has is an Identity, whatever its dtype (masks).
- IsNaN(x) of a float x that a Softmax, Sigmoid or Tanh produced (never infinite, so NaN
  is the only value whose difference with itself is not 0): Cast(Sub(x, x), bool). The
  Hugging Face SDPA export zeroes NaN attention rows this way.
- Einsum of two operands that is a batched matrix product (shared batch letters, one
  contracted letter, one free letter per operand; no ellipsis, no broadcasting): MatMul
  with Transposes where the operand or output layout needs them (MaxViT's attention,
  "BGHID,BGHJD->BGHIJ").

The spatial ones (1-D Conv, InstanceNormalization, Resize) are in lowering_spatial.py.

A node whose configuration is not covered (indices computed at run time, batch_dims > 0,
unknown shapes, an index out of range) is left as it is and loads as an opaque op.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from taso_env.onnx.lowering_spatial import SPATIAL
from taso_env.onnx.node_maker import (
    FLOATS,
    NodeMaker,
    attributes,
    constant_value,
    elem_types,
    fresh,
    new_constant,
    new_name,
    scalar,
    static_shapes,
    text,
)

LOWERED = ("GatherND", "And", "Pow", "Reciprocal", "Slice", "ReduceL2", "Expand", "Einsum", "IsNaN", "Not", "Neg",
           *SPATIAL)


def lower(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (already through ONNX shape inference, as the importer has it) with every
    coverable node of a LOWERED type rewritten (the same object when there is none;
    otherwise a copy, to be inferred again). The nodes are lowered reading `model` only:
    it is copied only where some node was covered (the importer has set its weights
    aside already)."""
    if not any(n.op_type in LOWERED and n.domain in ("", "ai.onnx") for n in model.graph.node):
        return model
    graph = model.graph
    constants = {i.name: i for i in graph.initializer}
    for n in graph.node:
        if n.op_type == "Constant" and len(n.output) == 1 and n.attribute and n.attribute[0].name == "value":
            constants[n.output[0]] = n.attribute[0].t
    shapes = static_shapes(model)
    types = elem_types(model)
    producers = {o: p.op_type for p in graph.node for o in p.output}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    nodes, added, covered = [], [], False
    for n in graph.node:
        if n.domain not in ("", "ai.onnx"):
            replacement = None
        elif n.op_type == "GatherND":
            replacement = _gather_nd(n, constants, shapes, added)
        elif n.op_type == "And" and len(n.input) == 2 and len(n.output) == 1:
            replacement = _and(n, constants, added)
        elif n.op_type == "IsNaN":
            replacement = _is_nan(n, producers, types, constants)
        elif n.op_type in _ARITHMETIC:
            replacement = _ARITHMETIC[n.op_type](n, constants, shapes, types, opset, added)
        else:
            replacement = None
        covered = covered or replacement is not None
        nodes.extend(replacement or [n])
    if not covered:
        return model  # nothing was covered: no copy to infer again
    lowered = onnx.ModelProto.FromString(model.SerializeToString())
    del lowered.graph.node[:]
    lowered.graph.node.extend(nodes)
    lowered.graph.initializer.extend(added)
    return lowered


def _and(n: onnx.NodeProto, constants, added) -> list[onnx.NodeProto]:
    out = n.output[0]
    zero = new_constant(f"{out}__zero", np.array(0, dtype=np.uint8), constants, added)
    b8, picked = new_name(f"{out}__b_u8", constants), new_name(f"{out}__u8", constants)
    return [helper.make_node("Cast", [n.input[1]], [b8], name=f"{n.name}__cast_b", to=onnx.TensorProto.UINT8),
            helper.make_node("Where", [n.input[0], b8, zero], [picked], name=f"{n.name}__where"),
            helper.make_node("Cast", [picked], [out], name=n.name, to=onnx.TensorProto.BOOL)]


def _gather_nd(n: onnx.NodeProto, constants, shapes, added) -> list[onnx.NodeProto] | None:
    attrs = attributes(n)
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
    flat_shape_name = fresh(f"{out}__flat_shape", taken)
    flat_index_name = fresh(f"{out}__flat_index", taken)
    flat_data_name = fresh(f"{out}__flat", taken)
    flat_shape = np.asarray([int(np.prod(lead))] + list(shape[k:]), dtype=np.int64)
    for name, value in ((flat_shape_name, flat_shape), (flat_index_name, flat)):
        added.append(numpy_helper.from_array(value, name))
        constants[name] = added[-1]
    return [helper.make_node("Reshape", [data, flat_shape_name], [flat_data_name], name=f"{n.name}__reshape"),
            helper.make_node("Gather", [flat_data_name, flat_index_name], [out], name=n.name, axis=0)]


def _pow(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if len(n.input) != 2 or types.get(n.input[0]) not in FLOATS:
        return None
    c = constant_value(n.input[1], constants)
    if c is None or c.size != 1:
        return None
    x, out, e = n.input[0], n.output[0], float(c.reshape(()))
    tmp = new_name(f"{out}__sq", constants)
    if e == 1:
        return [helper.make_node("Identity", [x], [out], name=n.name)]
    if e == 2:
        return [helper.make_node("Mul", [x, x], [out], name=n.name)]
    if e in (3, 4):
        second = [x, tmp] if e == 3 else [tmp, tmp]
        return [helper.make_node("Mul", [x, x], [tmp], name=f"{n.name}__sq"),
                helper.make_node("Mul", second, [out], name=n.name)]
    if e == 0.5:
        return [helper.make_node("Sqrt", [x], [out], name=n.name)]
    if e in (-1, -0.5):
        one = scalar(1.0, types[x], f"{out}__one", constants, added)
        if e == -1:
            return [helper.make_node("Div", [one, x], [out], name=n.name)]
        return [helper.make_node("Sqrt", [x], [tmp], name=f"{n.name}__sqrt"),
                helper.make_node("Div", [one, tmp], [out], name=n.name)]
    return None


def _reciprocal(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if len(n.input) != 1 or types.get(n.input[0]) not in FLOATS:
        return None
    one = scalar(1.0, types[n.input[0]], f"{n.output[0]}__one", constants, added)
    return [helper.make_node("Div", [one, n.input[0]], [n.output[0]], name=n.name)]


def _slice(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if opset < 10 or len(n.input) < 3 or n.input[0] not in shapes:
        return None  # before opset 10 the bounds were attributes
    shape = list(shapes[n.input[0]])
    params = [constant_value(t, constants) if t else None for t in list(n.input[1:]) + [""] * (5 - len(n.input))]
    starts, ends, axes, steps = params[:4]
    if starts is None or ends is None or (len(n.input) > 3 and n.input[3] and axes is None) or \
            (len(n.input) > 4 and n.input[4] and steps is None):
        return None
    axes = list(range(len(starts))) if axes is None else [int(a) % len(shape) for a in axes]
    steps = [1] * len(axes) if steps is None else [int(k) for k in steps]
    cuts = []
    for axis, start, end, step in zip(axes, starts.tolist(), ends.tolist(), steps):
        dim = shape[axis]
        start = min(max(start + dim if start < 0 else start, 0), dim)
        end = min(max(end + dim if end < 0 else end, 0), dim)
        count = -(-(end - start) // step) if step > 0 else 0
        if count <= 0:
            return None  # an empty slice or a negative step: left as it is
        column = 0
        if step > 1:  # the elements start, start + step, ...: one column of a [count, step] block
            fits = [c for c in range(min(start, step - 1) + 1) if start - c + count * step <= dim]
            if not fits:
                return None  # no block of count * step elements holds them: left as it is
            column = fits[-1]
            start, end = start - column, start - column + count * step
        if (start, end, step) != (0, dim, 1):
            cuts.append((axis, start, end, step, column))
    if not cuts:
        return [helper.make_node("Identity", [n.input[0]], [n.output[0]], name=n.name)]
    maker = NodeMaker(n.output[0], constants, added, opset)
    current = n.input[0]
    for axis, start, end, step, column in cuts:
        dim = shape[axis]
        current = maker.part(current, axis, [start, end - start, dim - end], 1 if start > 0 else 0)
        if step > 1:
            count = (end - start) // step
            blocks = shape[:axis] + [count, step] + shape[axis + 1:]
            current = maker.reshape(current, blocks)
            current = maker.part(current, axis + 1, [column, 1, step - column - 1], 1 if column > 0 else 0)
            shape = shape[:axis] + [count] + shape[axis + 1:]
            current = maker.reshape(current, shape)
        else:
            shape[axis] = end - start
    return maker.finish(current, n.name)


def _reduce_l2(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if types.get(n.input[0]) not in FLOATS:
        return None
    attrs = attributes(n)
    if opset >= 18:
        axes = constant_value(n.input[1], constants) if len(n.input) > 1 and n.input[1] else np.zeros(0, np.int64)
        if axes is None:
            return None
    else:
        axes = np.asarray(attrs.get("axes", []), dtype=np.int64)
    if axes.size == 0:
        if attrs.get("noop_with_empty_axes", 0):
            return [helper.make_node("Identity", [n.input[0]], [n.output[0]], name=n.name)]
        if n.input[0] not in shapes:
            return None
        axes = np.arange(len(shapes[n.input[0]]), dtype=np.int64)
    maker = NodeMaker(n.output[0], constants, added, opset)
    sums = maker.reduce("ReduceSum", maker.node("Mul", [n.input[0], n.input[0]]), axes, int(attrs.get("keepdims", 1)))
    return maker.finish(maker.node("Sqrt", [sums]), n.name)


def _expand(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if len(n.input) != 2 or n.input[0] not in shapes or n.output[0] not in shapes:
        return None
    src, out = tuple(shapes[n.input[0]]), tuple(shapes[n.output[0]])
    if src == out:  # any dtype (a mask expanded to the shape it has)
        return [helper.make_node("Identity", [n.input[0]], [n.output[0]], name=n.name)]
    if types.get(n.input[0]) not in FLOATS or constant_value(n.input[1], constants) is None:
        return None
    src = (1,) * (len(out) - len(src)) + src
    if len(src) != len(out):
        return None
    ones_shape = [o if s == 1 else 1 for s, o in zip(src, out)]
    maker = NodeMaker(n.output[0], constants, added, opset)
    ones = maker.constant("ones", np.ones(ones_shape, dtype=onnx.helper.tensor_dtype_to_np_dtype(types[n.input[0]])))
    return [helper.make_node("Mul", [n.input[0], ones], [n.output[0]], name=n.name)] + maker.nodes


#: Ops whose float outputs are never infinite (NaN only from NaN inputs).
_FINITE_OUTPUT = frozenset({"Softmax", "Sigmoid", "Tanh"})


def _is_nan(n, producers, types, constants) -> list[onnx.NodeProto] | None:
    x = n.input[0]
    if producers.get(x) not in _FINITE_OUTPUT or types.get(x) not in FLOATS:
        return None
    diff = new_name(f"{n.output[0]}__self_difference", constants)
    return [helper.make_node("Sub", [x, x], [diff], name=f"{n.name}__sub"),
            helper.make_node("Cast", [diff], [n.output[0]], name=n.name, to=onnx.TensorProto.BOOL)]


def _einsum(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    attrs = attributes(n)
    equation = text(attrs.get("equation"), "").replace(" ", "")
    if len(n.input) != 2 or "->" not in equation or "." in equation or any(t not in shapes for t in n.input):
        return None
    operands, result = equation.split("->")
    if operands.count(",") != 1:
        return None
    lhs, rhs = operands.split(",")
    if any(len(set(t)) != len(t) for t in (lhs, rhs, result)) or len(lhs) != len(shapes[n.input[0]]) or \
            len(rhs) != len(shapes[n.input[1]]):
        return None
    batch = [c for c in result if c in lhs and c in rhs]
    contracted = [c for c in lhs if c in rhs and c not in result]
    left = [c for c in lhs if c not in rhs and c in result]
    right = [c for c in rhs if c not in lhs and c in result]
    if len(contracted) != 1 or len(left) != 1 or len(right) != 1 or \
            len(batch) + 2 != len(result) or len(batch) + 2 != len(lhs) or len(batch) + 2 != len(rhs):
        return None
    size = dict(zip(lhs, shapes[n.input[0]]))
    if any(size[c] != d for c, d in zip(rhs, shapes[n.input[1]]) if c in size):
        return None  # a broadcast batch letter: not covered
    maker = NodeMaker(n.output[0], constants, added, opset)

    def transposed(x: str, have: str, want: str) -> str:
        return maker.transpose(x, [have.index(c) for c in want])

    a = transposed(n.input[0], lhs, "".join(batch + left + contracted))
    b = transposed(n.input[1], rhs, "".join(batch + contracted + right))
    product = maker.node("MatMul", [a, b])
    return maker.finish(transposed(product, "".join(batch + left + right), result), n.name)


def _not(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if len(n.input) != 1 or types.get(n.input[0]) != onnx.TensorProto.BOOL:
        return None
    out = n.output[0]
    zero = scalar(0, onnx.TensorProto.UINT8, f"{out}__zero", constants, added)
    one = scalar(1, onnx.TensorProto.UINT8, f"{out}__one", constants, added)
    picked = new_name(f"{out}__u8", constants)
    return [helper.make_node("Where", [n.input[0], zero, one], [picked], name=f"{n.name}__where"),
            helper.make_node("Cast", [picked], [out], name=n.name, to=onnx.TensorProto.BOOL)]


def _neg(n, constants, shapes, types, opset, added) -> list[onnx.NodeProto] | None:
    if len(n.input) != 1 or types.get(n.input[0]) not in FLOATS:
        return None
    minus_one = scalar(-1.0, types[n.input[0]], f"{n.output[0]}__minus_one", constants, added)
    return [helper.make_node("Mul", [n.input[0], minus_one], [n.output[0]], name=n.name)]


_ARITHMETIC = {"Pow": _pow, "Reciprocal": _reciprocal, "Slice": _slice, "ReduceL2": _reduce_l2,
               "Expand": _expand, "Einsum": _einsum, "Not": _not, "Neg": _neg, **SPATIAL}
