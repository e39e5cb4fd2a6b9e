"""The Python face of a computation graph.

A `Graph` is an immutable value: the C++ graph (ops in topological order, shapes
inferred) plus the data of the weights that have any (models loaded without weights,
such as the shape-only ONNX files, have none). Ops are read as `OpInfo` records:

    OpInfo(id, type, name, inputs, attrs, outputs)
      id       position in `graph.ops` (ops only read ops with smaller ids)
      type     op type name, see docs/operators.md ("Conv2D", "Input", "Opaque", ...)
      inputs   tuple of TensorRef(op, index): output `index` of op `op`
      attrs    dict with every default filled in; scalar int attributes are ints,
               list attributes lists of ints, float attributes floats, strings bytes
      outputs  tuple of TensorInfo(shape, dtype) (dtype: ONNX element-type code)
"""

from __future__ import annotations

import functools
import types
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from taso_env import _core, dtypes
from taso_env.engine import real_work
from taso_env.engine.cost_model import CostModel, make_cost_model, resolve_cost_model


class TensorRef(NamedTuple):
    """Output `index` of op `op`."""

    op: int
    index: int = 0


class TensorInfo(NamedTuple):
    shape: tuple[int, ...]
    dtype: int

    @property
    def np_dtype(self) -> np.dtype:
        return dtypes.to_numpy(self.dtype)

    @property
    def num_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))


@dataclass(frozen=True)
class OpInfo:
    id: int
    type: str
    name: str
    inputs: tuple[TensorRef, ...]
    attrs: dict
    outputs: tuple[TensorInfo, ...]


@functools.cache
def _scalar_attrs(op_type: str) -> frozenset[str]:
    schema = _core.op_type_schema(op_type)["attrs"]
    return frozenset(n for n, (kind, _) in schema.items() if kind == "int")


def _op_info(core: _core.CoreGraph, i: int) -> OpInfo:
    op_type, name, inputs, ints, floats, strings, outputs = core.op_record(i)
    scalars = _scalar_attrs(op_type)
    attrs = {k: (v[0] if k in scalars else v) for k, v in ints.items()}
    attrs.update(floats)
    attrs.update(strings)
    return OpInfo(
        id=i,
        type=op_type,
        name=name,
        inputs=tuple(TensorRef(*r) for r in inputs),
        attrs=attrs,
        outputs=tuple(TensorInfo(tuple(s), d) for s, d in outputs),
    )


OnnxExporter = Callable[..., object]
"""`exporter(graph, path, opset=...)` -> onnx.ModelProto: what `Graph.export_onnx` calls."""

_onnx_exporter: OnnxExporter | None = None


def register_onnx_exporter(exporter: OnnxExporter) -> None:
    """Makes `Graph.export_onnx` call `exporter`. The ONNX layer registers its exporter
    (`taso_env.onnx.exporter.export_onnx`) when it is imported, and `import taso_env`
    imports it; the engine never imports the ONNX layer."""
    global _onnx_exporter
    _onnx_exporter = exporter


class Graph:
    """An immutable computation graph with optional weight data.

    Build one with `taso_env.GraphBuilder`, `taso_env.load_onnx` or
    `taso_env.graphs.build`.

    Attributes:
        name: the graph's name (its source model's, or the builder's).
        metadata: string key/value pairs carried from the source (read-only).
        cost_model: the graph's own cost model (`with_cost_model`), or None; `cost()`,
            `candidates()` and search price with it when no model is passed, and the
            graphs they return carry it on.
    """

    def __init__(self, core: _core.CoreGraph, weights: Mapping[str, np.ndarray] | None = None,
                 name: str = "graph", metadata: Mapping[str, str] | None = None,
                 cost_model: CostModel | None = None):
        self._core = core
        self._weights = types.MappingProxyType(dict(weights or {}))
        self.name = name
        self.metadata = types.MappingProxyType(dict(metadata or {}))
        self.cost_model = cost_model
        self._ops: tuple[OpInfo, ...] | None = None

    @property
    def core(self) -> _core.CoreGraph:
        """The C++ graph, for the layers that hand it to C++ (the GPU executor, cost
        tables, observation features); read-only like the graph."""
        return self._core

    def with_cost_model(self, model: str | CostModel | None) -> Graph:
        """The same graph with its own cost model (a spec or a `CostModel`; None: none, so
        the process default prices it). The graphs that rewriting and search make from
        it carry the model on."""
        own = make_cost_model(model) if model is not None else None
        return Graph(self._core, self._weights, self.name, self.metadata, own)

    # -- structure ---------------------------------------------------------------------
    @property
    def ops(self) -> tuple[OpInfo, ...]:
        """Every op (inputs and weights included) in topological order."""
        if self._ops is None:
            self._ops = tuple(_op_info(self._core, i) for i in range(self._core.num_ops))
        return self._ops

    def op(self, op_id: int) -> OpInfo:
        return self.ops[op_id]

    @property
    def num_ops(self) -> int:
        """Number of computing ops (graph inputs and weights are not counted)."""
        return self._core.num_compute_ops

    @property
    def inputs(self) -> tuple[OpInfo, ...]:
        """The graph's Input ops (fed by name)."""
        return tuple(o for o in self.ops if o.type == "Input")

    @property
    def weight_ops(self) -> tuple[OpInfo, ...]:
        return tuple(o for o in self.ops if o.type == "Weight")

    @property
    def outputs(self) -> tuple[TensorRef, ...]:
        return tuple(TensorRef(*r) for r in self._core.outputs())

    @property
    def output_names(self) -> tuple[str, ...]:
        return tuple(self._core.output_names())

    def tensor(self, ref: TensorRef) -> TensorInfo:
        return self.ops[ref.op].outputs[ref.index]

    def consumers(self) -> list[list[list[tuple[int, int]]]]:
        """consumers()[op][index]: the (op id, input slot) pairs reading that output."""
        result = [[[] for _ in o.outputs] for o in self.ops]
        for o in self.ops:
            for slot, r in enumerate(o.inputs):
                result[r.op][r.index].append((o.id, slot))
        return result

    def op_type_counts(self) -> Counter:
        """Histogram of computing op types."""
        return Counter(o.type for o in self.ops if o.type not in ("Input", "Weight"))

    def op_work(self, op_id: int) -> tuple[float, float, float]:
        """(flops, bytes read, bytes written) of one op."""
        return self._core.op_work(op_id)

    # -- identity ----------------------------------------------------------------------
    def hash(self) -> int:
        """Canonical structural hash (independent of op order and op names)."""
        return self._core.hash()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.hash() == other.hash()

    def __hash__(self) -> int:
        return self.hash()

    # -- weights -----------------------------------------------------------------------
    @property
    def weights(self) -> Mapping[str, np.ndarray]:
        """Weight data by name (read-only); weights without data are absent."""
        return self._weights

    def with_weights(self, weights: Mapping[str, np.ndarray]) -> Graph:
        """A copy with the given weight data (merged over the existing data).

        Raises:
            GraphError: a name is not a weight of this graph.
            ShapeError: an array's shape or dtype differs from the weight's.
        """
        from taso_env.errors import GraphError, ShapeError

        by_name = {o.name: o for o in self.weight_ops}
        merged = dict(self._weights)
        for name, value in weights.items():
            if name not in by_name:
                raise GraphError(f"graph {self.name!r} has no weight named {name!r}")
            expected = by_name[name].outputs[0]
            value = np.asarray(value)
            if tuple(value.shape) != expected.shape or value.dtype != expected.np_dtype:
                raise ShapeError(f"weight {name!r}: expected {expected.np_dtype}{list(expected.shape)}, "
                                 f"got {value.dtype}{list(value.shape)}")
            merged[name] = value
        return Graph(self._core, merged, self.name, self.metadata, self.cost_model)

    def random_weights(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random data for every weight without data: floats ~ N(0, 1/fan_in) for
        matrices and kernels (activations stay O(1) through deep nets), N(0, 0.05^2)
        for vectors; BatchNorm variances positive; integer weights 0 (valid indices)."""
        rng = np.random.default_rng(seed)
        positive = {self.ops[o.inputs[4].op].name for o in self.ops if o.type == "BatchNorm"}
        out = {}
        for o in self.weight_ops:
            if o.name in self._weights:
                continue
            t = o.outputs[0]
            if dtypes.is_float(t.dtype):
                fan_in = int(np.prod(t.shape[1:])) if len(t.shape) >= 2 else 0
                value = rng.standard_normal(t.shape) * (np.sqrt(1.0 / fan_in) if fan_in else 0.05)
                if o.name in positive:
                    value = 1.0 + np.abs(value)
                out[o.name] = value.astype(t.np_dtype)
            else:
                out[o.name] = np.zeros(t.shape, t.np_dtype)
        return out

    def random_inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Random values for every graph input (floats ~ N(0, 1), integers in [0, 2))."""
        rng = np.random.default_rng(seed)
        out = {}
        for o in self.inputs:
            t = o.outputs[0]
            if dtypes.is_float(t.dtype):
                out[o.name] = rng.standard_normal(t.shape).astype(t.np_dtype)
            elif t.dtype == dtypes.BOOL:
                out[o.name] = rng.integers(0, 2, t.shape).astype(bool)
            else:
                out[o.name] = rng.integers(0, 2, t.shape).astype(t.np_dtype)
        return out

    # -- cost --------------------------------------------------------------------------
    def cost(self, model: str | CostModel | None = None) -> float:
        """Estimated runtime in ms under `model`; without one, under the graph's own cost
        model (`cost_model`), and for a graph without one under the process default
        (analytic H100 unless the command line chose another; `resolve_cost_model`).
        A cost query on the real-work ledger (refused inside `real_work.forbidden()`)."""
        real_work.record("cost")
        return resolve_cost_model(model, self).graph_cost(self)

    def op_costs(self, model: str | CostModel | None = None) -> np.ndarray:
        """Estimated runtime (ms) of every op, indexed by op id (model chosen as by `cost`).
        A cost query on the real-work ledger (refused inside `real_work.forbidden()`)."""
        real_work.record("op_costs")
        return np.asarray(resolve_cost_model(model, self).op_costs(self), dtype=np.float64)

    def op_table(self, model: str | CostModel | None = None) -> list[dict]:
        """Per op type: count, total estimated ms, share of the graph cost, GFLOPs, MB
        moved; sorted by cost."""
        costs = self.op_costs(model)
        rows: dict[str, dict] = {}
        for o in self.ops:
            if o.type in ("Input", "Weight"):
                continue
            flops, read, written = self.op_work(o.id)
            row = rows.setdefault(o.type, {"op": o.type, "count": 0, "ms": 0.0, "gflops": 0.0, "mb": 0.0})
            row["count"] += 1
            row["ms"] += float(costs[o.id])
            row["gflops"] += flops / 1e9
            row["mb"] += (read + written) / 1e6
        total = float(costs.sum()) or 1.0
        for row in rows.values():
            row["share"] = row["ms"] / total
        return sorted(rows.values(), key=lambda r: -r["ms"])

    # -- rewriting ---------------------------------------------------------------------
    def candidates(self, rule_id: int | None = None, *, rules=None, model=None) -> list:
        """Every valid (rule, location) with its estimated cost delta; see taso_env.engine.search."""
        from taso_env.engine.search import candidates

        return candidates(self, rule_id, rules=rules, model=model)

    def apply(self, candidate, *, rules=None) -> Graph:
        """A new graph with `candidate` applied (this graph is unchanged)."""
        from taso_env.engine.search import apply

        return apply(self, candidate, rules=rules)

    # -- I/O ---------------------------------------------------------------------------
    def export_onnx(self, path=None, *, opset: int | None = None):
        """Writes the graph as an ONNX model (same input/output names as its source).

        Weights with data become initializers; weights without data become graph inputs
        marked `doc_string="weight: ..."`, as in the shape-only source models. Returns the
        `onnx.ModelProto`; writes it to `path` when given. The exporter is the ONNX
        layer's (`taso_env.onnx.exporter.export_onnx`, registered by `import taso_env`).

        Raises:
            RuntimeError: no ONNX exporter is registered (the ONNX layer was never imported).
        """
        if _onnx_exporter is None:
            raise RuntimeError("no ONNX exporter registered: import taso_env (or taso_env.onnx) first")
        return _onnx_exporter(self, path, opset=opset)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, ops={self.num_ops}, inputs={[o.name for o in self.inputs]}, "
                f"outputs={list(self.output_names)})")
