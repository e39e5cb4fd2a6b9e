"""ONNX nodes run on numpy arrays: opaque ops in the reference executor, constant
subgraphs folded at import. onnx's reference implementation does the work, except for
the ops in _NUMPY_ONNX_OPS, where it is wrong for some inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from taso_env.errors import UnsupportedOpError


def run_opaque(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """An opaque ONNX op runs through `run_onnx_node` on the NodeProto it was loaded from."""
    import onnx

    node = onnx.NodeProto()
    node.ParseFromString(attrs["onnx_node"])
    names = iter(f"in{i}" for i in range(len(inputs)))
    renamed = [next(names) if name else "" for name in node.input]
    del node.input[:]
    node.input.extend(renamed)
    outs = [f"out{i}" if name else "" for i, name in enumerate(node.output)]
    del node.output[:]
    node.output.extend(outs)
    try:
        results = run_onnx_node(node, {f"in{i}": a for i, a in enumerate(inputs)})
    except Exception as err:  # onnx.reference lacks some ops and raises many kinds
        raise UnsupportedOpError(f"ONNX op {node.op_type!r}: onnx.reference cannot run it ({err})") from err
    return [np.asarray(r) for r in results]


def _gather_elements(attrs: dict, data: np.ndarray, indices: np.ndarray) -> list[np.ndarray]:
    axis = attrs.get("axis", 0) % data.ndim
    return [np.take_along_axis(data, np.where(indices < 0, indices + data.shape[axis], indices), axis=axis)]


#: ONNX ops whose onnx.reference implementation is wrong for some inputs (onnx 1.23:
#: GatherElements with more than 64 rows along its axis), computed with numpy instead.
_NUMPY_ONNX_OPS = {"GatherElements": _gather_elements}


def run_onnx_node(node, feeds: Mapping[str, np.ndarray], opset: int | None = None) -> list[np.ndarray]:
    """The outputs of one ONNX NodeProto on `feeds` (its inputs by name): onnx's reference
    implementation (of the default domain at `opset`; its newest without), or numpy for
    the ops in _NUMPY_ONNX_OPS. Raises whatever the implementation raises."""
    if node.op_type in _NUMPY_ONNX_OPS and node.domain in ("", "ai.onnx"):
        from onnx import helper

        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return _NUMPY_ONNX_OPS[node.op_type](attrs, *[feeds[t] if t else None for t in node.input])
    from onnx.reference import ReferenceEvaluator

    opsets = {"": opset} if opset is not None else None
    return ReferenceEvaluator(node, opsets=opsets).run(None, {t: feeds[t] for t in node.input if t})
