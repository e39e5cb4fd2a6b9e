"""Building ONNX nodes for the importer's lowerings (lowering.py, lowering_spatial.py):
fresh tensor names, new initializers, chains of nodes, and the static shapes and element
types of an inferred model."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def fresh(name: str, taken) -> str:
    k, out = 0, name
    while out in taken:
        k += 1
        out = f"{name}{k}"
    return out


def new_name(stem: str, constants) -> str:
    """A tensor name no other has, reserved in `constants` (which holds every name the
    lowering made, constants or not)."""
    name = fresh(stem, constants)
    constants[name] = None
    return name


def new_constant(stem: str, value: np.ndarray, constants, added) -> str:
    """A new initializer of `value` (appended to `added`) under a name no other has."""
    name = fresh(stem, constants)
    added.append(numpy_helper.from_array(value, name))
    constants[name] = added[-1]
    return name


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    """Shapes of every tensor of the inferred model whose dims are all known."""
    g = model.graph
    out = {i.name: tuple(i.dims) for i in g.initializer}
    for vi in [*g.input, *g.value_info, *g.output]:
        dims = vi.type.tensor_type.shape.dim
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape") and \
                all(d.HasField("dim_value") for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    return out


def elem_types(model: onnx.ModelProto) -> dict[str, int]:
    """ONNX element type of every tensor the inferred model types."""
    g = model.graph
    out = {i.name: i.data_type for i in g.initializer}
    for vi in [*g.input, *g.value_info, *g.output]:
        if vi.type.HasField("tensor_type"):
            out[vi.name] = vi.type.tensor_type.elem_type
    return out


FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)


def attributes(node: onnx.NodeProto) -> dict:
    """The node's attributes by name (onnx's Python values: string ones as bytes)."""
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def text(value, default: str) -> str:
    """A string attribute's value (`attributes` gives bytes), `default` where absent."""
    if value is None:
        return default
    return value.decode() if isinstance(value, bytes) else str(value)


def constant_value(name: str, constants) -> np.ndarray | None:
    return numpy_helper.to_array(constants[name]) if name in constants else None


def scalar(value: float, like: int, stem: str, constants, added) -> str:
    """A new one-element initializer of `value`, of ONNX element type `like`."""
    return new_constant(stem, np.array(value, dtype=onnx.helper.tensor_dtype_to_np_dtype(like)), constants, added)


class NodeMaker:
    """Builds a chain of nodes ending in tensor `out`, with fresh names for the rest."""

    def __init__(self, out: str, constants, added, opset: int = 13):
        self.out, self.constants, self.added, self.nodes, self.opset = out, constants, added, [], opset

    def fresh(self, stem: str) -> str:
        return new_name(f"{self.out}__{stem}", self.constants)

    def constant(self, stem: str, value: np.ndarray) -> str:
        return new_constant(f"{self.out}__{stem}", value, self.constants, self.added)

    def part(self, x: str, axis: int, sizes: list[int], keep: int) -> str:
        """Part `keep` of the nonzero `sizes` of a Split of x along axis (x itself if one)."""
        sizes = [size for size in sizes if size > 0]
        if len(sizes) == 1:
            return x
        outs = [self.fresh(f"part{len(self.nodes)}_{j}") for j in range(len(sizes))]
        name = f"{self.out}__split{len(self.nodes)}"
        if self.opset < 13:  # the sizes were an attribute before opset 13
            self.nodes.append(helper.make_node("Split", [x], outs, name=name, axis=axis, split=sizes))
        else:
            sizes_name = self.constant("sizes", np.asarray(sizes, dtype=np.int64))
            self.nodes.append(helper.make_node("Split", [x, sizes_name], outs, name=name, axis=axis))
        return outs[keep]

    def node(self, op_type: str, inputs: list[str], **attrs) -> str:
        """A new `op_type` node of `inputs` and `attrs`; its (fresh) output."""
        stem = f"{op_type.lower()}{len(self.nodes)}"
        out = self.fresh(stem)
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=f"{self.out}__{stem}", **attrs))
        return out

    def reshape(self, x: str, shape: list[int]) -> str:
        return self.node("Reshape", [x, self.constant("shape", np.asarray(shape, dtype=np.int64))])

    def transpose(self, x: str, perm: list[int]) -> str:
        """x transposed by `perm` (x itself for the identity)."""
        return x if list(perm) == list(range(len(perm))) else self.node("Transpose", [x], perm=list(perm))

    def reduce(self, op_type: str, x: str, axes, keepdims: int) -> str:
        """ReduceSum / ReduceMean of x over `axes` (an input from opset 13 / 18, before
        an attribute)."""
        axes = [int(a) for a in axes]
        if self.opset >= (13 if op_type == "ReduceSum" else 18):
            return self.node(op_type, [x, self.constant("axes", np.asarray(axes, dtype=np.int64))], keepdims=keepdims)
        return self.node(op_type, [x], keepdims=keepdims, axes=axes)

    def finish(self, last: str, name: str) -> list[onnx.NodeProto]:
        """The nodes, the last one renamed to write `out` (an Identity if none wrote `last`)."""
        if not self.nodes or last not in self.nodes[-1].output:
            self.nodes.append(helper.make_node("Identity", [last], [self.out], name=name))
            return self.nodes
        outs = list(self.nodes[-1].output)
        outs[outs.index(last)] = self.out
        del self.nodes[-1].output[:]
        self.nodes[-1].output.extend(outs)
        self.nodes[-1].name = name
        return self.nodes
