"""Numpy reference executor over the operator numerics of `reference_ops`.

`run` executes a whole graph (or the part of it needed for some tensors) on numpy
arrays; `execute_op` executes one op and is what rule verification builds on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from taso_env.engine.onnx_nodes import run_opaque
from taso_env.engine.reference_ops import (  # noqa: F401  (re-exported: the executor's op table)
    ONNX_TO_NUMPY_DTYPE,
    OP_REGISTRY,
    SOURCE_OP_TYPES,
    supported_op_types,
)
from taso_env.errors import ExecutionError, MissingFeedError, ShapeError, TasoEnvError, UnsupportedOpError

if TYPE_CHECKING:
    from taso_env.engine.graph import TensorRef


# ------------------------------------------------------------------------- execution
def execute_op(op_type: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Executes one op on numpy arrays.

    Args:
        op_type: An op type of docs/operators.md, e.g. "Conv2D".
        attrs: Its attributes; missing optional ones take their documented default.
        inputs: The input arrays in order (optional trailing inputs may be left out).

    Returns:
        The output arrays, in order.

    Raises:
        UnsupportedOpError: `op_type` is a source op or unknown, or an Opaque op that
            `onnx.reference` cannot run (opaque ops run through `onnx.reference`).
        OpAttributeError: A required attribute is missing or invalid.
        ShapeError: The inputs do not fit the op.
    """
    fn = OP_REGISTRY.get(op_type)
    if op_type == "Opaque" and attrs.get("onnx_node"):
        fn = run_opaque
    if fn is None:
        onnx_type = attrs.get("onnx_op_type")
        if isinstance(onnx_type, bytes):
            onnx_type = onnx_type.decode(errors="replace")
        detail = f" (ONNX op {onnx_type!r})" if onnx_type else ""
        hint = "; sources are fed by name in run()" if op_type in SOURCE_OP_TYPES else ""
        raise UnsupportedOpError(f"cannot execute op type {op_type!r}{detail}{hint}")
    try:
        return list(fn(attrs, [np.asarray(a) for a in inputs]))
    except TasoEnvError:
        raise
    except (ValueError, IndexError) as err:
        raise ShapeError(f"{op_type}: {err}") from err


def _label(op: Any) -> str:
    return f"op {op.id} {op.name!r} ({op.type})"


def _source_value(op: Any, feeds: Mapping[str, Any], graph: Any) -> np.ndarray:
    """The value of an Input/Weight op: its feed, else (weights) graph.weights."""
    info = op.outputs[0]
    expected = (tuple(info.shape), np.dtype(info.np_dtype))
    if op.name in feeds:
        value = feeds[op.name]
    elif op.type == "Weight" and op.name in (getattr(graph, "weights", None) or {}):
        value = graph.weights[op.name]
    else:
        raise MissingFeedError(
            f"no value for {op.type} {op.name!r} (expected shape {expected[0]}, dtype {expected[1]})")
    value = np.asarray(value)
    if value.shape != expected[0]:
        raise ShapeError(f"{op.type} {op.name!r}: expected shape {expected[0]}, got {value.shape}")
    if value.dtype != expected[1]:
        raise ShapeError(f"{op.type} {op.name!r}: expected dtype {expected[1]}, got {value.dtype}")
    return value


def _needed_ops(ops: Sequence[Any], targets: Sequence[tuple[int, int]]) -> set[int]:
    """Ids of the ops the target tensors depend on (the targets' producers included)."""
    by_id = {op.id: op for op in ops}
    needed: set[int] = set()
    stack = [t[0] for t in targets]
    while stack:
        op_id = stack.pop()
        if op_id not in needed:
            needed.add(op_id)
            stack.extend(ref[0] for ref in by_id[op_id].inputs)
    return needed


def _last_uses(ops: Sequence[Any], needed: set[int]) -> dict[tuple[int, int], int]:
    """Maps each consumed tensor to the position (in `ops`) of its last consumer."""
    last: dict[tuple[int, int], int] = {}
    for pos, op in enumerate(ops):
        if op.id in needed:
            for ref in op.inputs:
                last[(ref[0], ref[1])] = pos
    return last


def _check_outputs(op: Any, results: list[np.ndarray]) -> None:
    """Checks an op's results against the graph's inferred output types."""
    if len(results) != len(op.outputs):
        raise ExecutionError(f"{_label(op)}: produced {len(results)} outputs, graph has {len(op.outputs)}")
    for i, (arr, info) in enumerate(zip(results, op.outputs)):
        if arr.shape != tuple(info.shape) or arr.dtype != np.dtype(info.np_dtype):
            raise ShapeError(f"{_label(op)} output {i}: graph says {tuple(info.shape)} "
                             f"{np.dtype(info.np_dtype)}, executor computed {arr.shape} {arr.dtype}")


def run(graph: Any, feeds: Mapping[str, np.ndarray] | None = None, *,
        outputs: Sequence[TensorRef] | None = None) -> dict[Any, np.ndarray]:
    """Executes a graph on numpy arrays.

    Only the ops the requested tensors depend on run, so feeds of unrelated inputs
    may be left out; feeds whose names match no op are ignored. Each intermediate is
    freed once its last consumer has run.

    Args:
        graph: A taso_env Graph (ops in topological order, outputs, output_names, weights).
        feeds: Values by Input/Weight name. A Weight without a feed uses graph.weights.
        outputs: Tensors to return instead of the graph outputs.

    Returns:
        {output_name: array} for the graph outputs, or {TensorRef: array} for `outputs`.

    Raises:
        MissingFeedError: An Input or Weight has no value (names it, its shape and dtype).
        ShapeError: A fed array has the wrong shape or dtype, or an op's result does not
            match the graph's inferred type.
        UnsupportedOpError: A needed op cannot be executed (e.g. an Opaque op).
        ExecutionError: `outputs` names a tensor the graph does not have.
    """
    feeds = feeds if feeds is not None else {}
    targets = list(graph.outputs if outputs is None else outputs)
    by_id = {op.id: op for op in graph.ops}
    for ref in targets:
        if ref[0] not in by_id or not 0 <= ref[1] < len(by_id[ref[0]].outputs):
            raise ExecutionError(f"tensor {tuple(ref)} is not in the graph")
    keep = {(ref[0], ref[1]) for ref in targets}
    needed = _needed_ops(graph.ops, targets)
    last_use = _last_uses(graph.ops, needed)
    values: dict[tuple[int, int], np.ndarray] = {}
    for pos, op in enumerate(graph.ops):
        if op.id not in needed:
            continue
        if op.type in SOURCE_OP_TYPES:
            results = [_source_value(op, feeds, graph)]
        else:
            args = [values[(ref[0], ref[1])] for ref in op.inputs]
            try:
                results = execute_op(op.type, op.attrs, args)
            except TasoEnvError as err:
                raise type(err)(f"{_label(op)}: {err}") from err
        _check_outputs(op, results)
        for i, arr in enumerate(results):
            if (op.id, i) in keep or (op.id, i) in last_use:
                values[(op.id, i)] = arr
        for ref in {(r[0], r[1]) for r in op.inputs}:
            if last_use[ref] == pos and ref not in keep:
                del values[ref]
    if outputs is None:
        return {name: values[(r[0], r[1])] for name, r in zip(graph.output_names, targets)}
    return {ref: values[(ref[0], ref[1])] for ref in targets}
