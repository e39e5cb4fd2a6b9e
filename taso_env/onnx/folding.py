"""Constant folding before import: ONNX nodes that compute constants become constants.

Exports compute many tensors that do not depend on the model's inputs or weights:
Swin's shifted-window attention masks (ConstantOfShape, Slice, ScatterND, Equal, Where),
T5's relative-position buckets (Abs, Less, Log, Min, Cast), token-type and position-id
gathers of buffers, `Shape` of a tensor whose shape is static. Each such node is
evaluated once here with onnx's reference evaluator, in graph order, and its outputs
become initializers; the node goes. What is left is the model's real computation, which
the importer maps to core ops instead of loading as opaque ones.

A node folds when every input is a constant: a `Constant` node or initializer holding
indices (integer or bool), a scalar, or a float tensor of at most `FEW` distinct values
(mask fills); the output of a node folded before; or a `Shape` / `Size` of a tensor with
a static inferred shape. A float tensor of more distinct values is a learned weight: an
op on it stays an op (an embedding gathered at constant positions is not baked into a
new tensor), as do weights stripped to shape-only graph inputs and initializers that are
also graph inputs (a caller may override them). It does not fold a node that is
non-deterministic, has a subgraph, is outside the default domain, produces a graph
output, or whose result has more than `LIMIT` elements (that stays a computation). A
node the reference evaluator cannot run is left as it is.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from taso_env.engine.onnx_nodes import run_onnx_node
from taso_env.onnx.node_maker import static_shapes

#: A float initializer of at most this many distinct values is a constant, not a weight.
FEW = 16
#: Its first this many elements are looked at before all of it.
SAMPLE = 4096
#: Folded results larger than this stay computations.
LIMIT = 1 << 20

_NON_DETERMINISTIC = frozenset({"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
                                "Multinomial", "Bernoulli", "Dropout"})


def fold_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` (through shape inference) with every foldable node replaced by initializers
    (the same object when nothing folds; otherwise a copy, to be inferred again)."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    shapes = static_shapes(model)
    values: dict[str, np.ndarray] = {}
    graph_inputs = {i.name for i in graph.input}
    initializers = {i.name: i for i in graph.initializer if i.name not in graph_inputs}
    outputs = {o.name for o in graph.output}
    folded: set[int] = set()
    for i, n in enumerate(graph.node):
        # An initializer is read (and judged constant or weight) only where every other
        # input is a constant already: a weight that meets an activation is never copied.
        if all(not t or t in values or t in initializers for t in n.input):
            for t in n.input:
                if t in initializers:
                    value = numpy_helper.to_array(initializers.pop(t))
                    if is_constant_data(value):
                        values[t] = value
        result = _evaluate(n, values, shapes, opset, outputs)
        if n.op_type == "Constant" and result is not None and not all(map(is_constant_data, result.values())):
            result = None  # a weight written as a Constant node stays one
        if result is not None:
            values.update(result)
            folded.add(i)
    # Constant nodes are the importer's already; only computations that folded count.
    if not any(graph.node[i].op_type != "Constant" for i in folded):
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    kept = [n for i, n in enumerate(graph.node) if i not in folded]
    needed = {t for n in kept for t in n.input} | outputs
    produced = {o for i in folded for o in model.graph.node[i].output}
    del graph.node[:]
    graph.node.extend(kept)
    graph.initializer.extend(numpy_helper.from_array(values[t], t) for t in sorted(produced & needed))
    value_info = [vi for vi in graph.value_info if vi.name not in produced]
    del graph.value_info[:]
    graph.value_info.extend(value_info)
    return model


def is_constant_data(value: np.ndarray) -> bool:
    """Indices, a scalar, or floats of at most FEW distinct values (a sample first: a
    learned weight shows many in its first SAMPLE elements, and sorting it all is slow)."""
    if value.dtype.kind in "iub" or value.size <= 1:
        return True
    flat = value.reshape(-1)
    return len(np.unique(flat[:SAMPLE])) <= FEW and len(np.unique(flat)) <= FEW


def _evaluate(n: onnx.NodeProto, values: dict, shapes: dict, opset: int,
              outputs: set[str]) -> dict[str, np.ndarray] | None:
    """The outputs of `n` if it folds (see the module docstring), else None."""
    if n.domain not in ("", "ai.onnx") or n.op_type in _NON_DETERMINISTIC or not n.output:
        return None
    if any(o in outputs for o in n.output) or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                                   for a in n.attribute):
        return None
    if n.op_type in ("Shape", "Size") and n.input and n.input[0] in shapes:
        shape = np.asarray(shapes[n.input[0]], dtype=np.int64)
        if n.op_type == "Size":
            return {n.output[0]: np.asarray(int(np.prod(shape)), dtype=np.int64)}
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        return {n.output[0]: shape[start:end]}
    if any(t and t not in values for t in n.input):
        return None
    for o in n.output:
        if o in shapes and int(np.prod(shapes[o], dtype=np.int64)) > LIMIT:
            return None
    try:
        with np.errstate(all="ignore"):  # log(0) is -inf as in onnxruntime (T5's buckets mask it out)
            got = run_onnx_node(n, {t: values[t] for t in n.input if t}, opset)
    except Exception:  # an op or configuration the reference evaluator lacks: keep the node
        return None
    out = {}
    for name, value in zip(n.output, got):
        if name:
            value = np.asarray(value)
            if value.size > LIMIT:
                return None
            out[name] = value
    return out

