"""Write a `Graph` as a standard ONNX model.

Every core op maps to standard ONNX operators (docs/operators.md), written by its emitter
in op_exporters.py: a fused activation becomes a following Relu/Sigmoid/Tanh node, Enlarge
becomes a Pad of the weight, opaque ops are written back as the NodeProto they were
loaded from. Graph input and output names are kept. Weights with data become
initializers; weights without data become graph inputs marked
`doc_string="weight: ..."`, like the shape-only source models.

The opset is the source model's (at least 17, where LayerNormalization exists; 20 when
the graph has a Gelu). The result passes `onnx.checker` and loads in onnxruntime
(opset <= 26, IR version <= 10).
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from taso_env import errors
from taso_env.engine.graph import Graph, OpInfo, TensorRef, register_onnx_exporter
from taso_env.onnx.op_exporters import EXPORTERS

MIN_OPSET = 17
GELU_OPSET = 20
MAX_OPSET = 26
IR_VERSION = 10
_ACTIVATION_OPS = {1: "Relu", 2: "Sigmoid", 3: "Tanh"}


class _Writer:
    def __init__(self, graph: Graph, opset: int):
        self.graph = graph
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.names: dict[TensorRef, str] = {}
        self._used: set[str] = set()

    def fresh(self, base: str) -> str:
        name, n = base, 0
        while name in self._used:
            n += 1
            name = f"{base}_{n}"
        self._used.add(name)
        return name

    def const(self, base: str, values, dtype=np.int64) -> str:
        name = self.fresh(base)
        self.initializers.append(numpy_helper.from_array(np.asarray(values, dtype=dtype), name))
        return name

    def node(self, op_type: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> None:
        self.nodes.append(helper.make_node(op_type, inputs, outputs, name=self.fresh(name), **attrs))


def _output_names(graph: Graph, w: _Writer) -> dict[TensorRef, str]:
    """Tensor names: graph inputs and weights keep their names; a tensor that is a graph
    output takes that output's name (the first one, if several)."""
    names: dict[TensorRef, str] = {}
    for o in graph.ops:
        if o.type in ("Input", "Weight"):
            names[TensorRef(o.id, 0)] = o.name
            w._used.add(o.name)
    for ref, out_name in zip(graph.outputs, graph.output_names, strict=True):
        if ref not in names:
            names[ref] = out_name
            w._used.add(out_name)
    for o in graph.ops:
        for i in range(len(o.outputs)):
            ref = TensorRef(o.id, i)
            if ref not in names:
                names[ref] = w.fresh(f"{o.name}:{i}" if len(o.outputs) > 1 else o.name)
    return names


def _emit(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    a = o.attrs
    if o.type in ("Conv2D", "MatMul") and a.get("activation", 0):
        pre = w.fresh(f"{o.name}:pre_activation")
        _emit_plain(w, o, ins, [pre])
        w.node(_ACTIVATION_OPS[a["activation"]], [pre], outs, f"{o.name}.activation")
    else:
        _emit_plain(w, o, ins, outs)


def _emit_plain(w: _Writer, o: OpInfo, ins: list[str], outs: list[str]) -> None:
    emit = EXPORTERS.get(o.type)
    if emit is None:
        raise errors.OnnxExportError(f"op {o.name!r}: no ONNX mapping for op type {o.type!r}")
    emit(w, o, ins, outs)


def _value_info(name: str, shape, dtype: int, doc: str = "") -> onnx.ValueInfoProto:
    vi = helper.make_tensor_value_info(name, dtype, list(shape))
    vi.doc_string = doc
    return vi


def choose_opset(graph: Graph, opset: int | None) -> int:
    """The opset to export with: requested, else the source's, raised to what ops need."""
    needed = GELU_OPSET if any(o.type == "Gelu" for o in graph.ops) else MIN_OPSET
    if opset is None:
        opset = max(int(graph.metadata.get("onnx_opset", MIN_OPSET)), needed)
    if not needed <= opset <= MAX_OPSET:
        raise errors.OnnxExportError(
            f"graph {graph.name!r}: opset {opset} unsupported; need {needed} <= opset <= {MAX_OPSET}")
    return opset


def export_onnx(graph: Graph, path: str | os.PathLike | None = None, *, opset: int | None = None
                ) -> onnx.ModelProto:
    """Builds (and, with `path`, writes) the ONNX model of `graph`.

    Raises:
        OnnxExportError: no ONNX form for an op, or the result fails the ONNX checker.
    """
    opset = choose_opset(graph, opset)
    w = _Writer(graph, opset)
    names = _output_names(graph, w)
    inputs, initializers = [], []
    for o in graph.ops:
        info = o.outputs[0] if o.outputs else None
        if o.type == "Input":
            inputs.append(_value_info(o.name, info.shape, info.dtype))
        elif o.type == "Weight":
            if o.name in graph.weights:
                initializers.append(numpy_helper.from_array(np.asarray(graph.weights[o.name]), o.name))
            else:
                inputs.append(_value_info(o.name, info.shape, info.dtype,
                                          "weight: initializer data not available"))
        else:
            outs = [names[TensorRef(o.id, i)] for i in range(len(o.outputs))]
            _emit(w, o, [names[r] for r in o.inputs], outs)

    outputs = []
    for ref, out_name in zip(graph.outputs, graph.output_names, strict=True):
        if names[ref] != out_name:  # a source tensor or one already output under another name
            w.node("Identity", [names[ref]], [out_name], f"{out_name}.identity")
        info = graph.tensor(ref)
        outputs.append(_value_info(out_name, info.shape, info.dtype))

    onnx_graph = helper.make_graph(w.nodes, graph.name, inputs, outputs,
                                   initializer=initializers + w.initializers)
    imports = json.loads(graph.metadata.get("onnx_opset_imports", "{}"))
    imports[""] = opset
    imports.pop("ai.onnx", None)
    model = helper.make_model(onnx_graph, producer_name="rlflow",
                              opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(imports.items())])
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {"rlflow_graph_hash": str(graph.hash()),
                                   "source": graph.metadata.get("source", graph.name)})
    try:
        onnx.checker.check_model(model)
    except Exception as e:
        raise errors.OnnxExportError(
            f"graph {graph.name!r}: exported model fails the ONNX checker: {e}") from None
    if path is not None:
        onnx.save(model, os.fspath(path))
    return model


__all__ = ["choose_opset", "export_onnx"]


register_onnx_exporter(export_onnx)  # Graph.export_onnx (the engine) calls it through the registry
