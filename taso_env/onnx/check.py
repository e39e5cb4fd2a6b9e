"""Independent numerical checks with onnxruntime: does an exported (possibly optimised)
graph compute what the source model computes?

onnxruntime runs both models on the CPU with its graph optimisations off, on the same
random inputs and weights; every output must agree within tolerances.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import onnx

from taso_env.engine.graph import Graph


@dataclass(frozen=True)
class EquivalenceReport:
    """Per-output max absolute and relative differences, and the verdict."""

    max_abs_diff: dict[str, float]
    max_rel_diff: dict[str, float]
    rtol: float
    atol: float
    equivalent: bool

    def __str__(self) -> str:
        parts = [f"{n}: max|diff| {d:.3g}" for n, d in self.max_abs_diff.items()]
        return f"{'equivalent' if self.equivalent else 'DIFFERENT'} ({', '.join(parts)})"


def run_onnxruntime(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Runs a model on the CPU (optimisations off); feeds not among its inputs are ignored."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in feeds]
    if missing:
        raise KeyError(f"no feed for model inputs {missing}")
    outputs = session.run(None, {n: feeds[n] for n in names})
    return {o.name: v for o, v in zip(session.get_outputs(), outputs, strict=True)}


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every input and every weight without data."""
    return {**graph.random_inputs(seed), **graph.random_weights(seed + 1)}


def compare_outputs(expected: Mapping[str, np.ndarray], got: Mapping[str, np.ndarray], *,
                    rtol: float = 1e-4, atol: float = 1e-5) -> EquivalenceReport:
    """Compares outputs by name. An output agrees when every
    |difference| <= atol + rtol * max|expected|: float32 results differ by summation
    order, so the relative tolerance is taken against the output's scale; for a
    narrower float output (float16) it is at least 8 of that type's epsilons
    (`output_rtol`). A missing or differently shaped output makes the report not
    equivalent."""
    abs_diff, rel_diff, ok = {}, {}, True
    for name, want in expected.items():
        if name not in got or got[name].shape != want.shape:
            abs_diff[name], rel_diff[name], ok = float("inf"), float("inf"), False
            continue
        exact = want.astype(np.float64)
        diff = np.abs(got[name].astype(np.float64) - exact)
        abs_diff[name] = float(diff.max(initial=0.0))
        rel_diff[name] = float((diff / (np.abs(exact) + 1e-12)).max(initial=0.0))
        scale = float(np.abs(exact).max(initial=0.0))
        ok &= bool(np.all(diff <= atol + output_rtol(want.dtype, rtol) * scale))
    return EquivalenceReport(abs_diff, rel_diff, rtol, atol, ok)


def output_rtol(dtype, rtol: float) -> float:
    """The relative tolerance of an output of `dtype`: `rtol`, or 8 epsilons of a float
    type too narrow for it (float16: 7.8e-3), whose results round at every op."""
    if not np.issubdtype(dtype, np.floating):
        return rtol
    return max(rtol, 8 * float(np.finfo(dtype).eps))


def check_equivalent(source: onnx.ModelProto, candidate: Graph | onnx.ModelProto,
                     feeds: Mapping[str, np.ndarray], *, rtol: float = 1e-4,
                     atol: float = 1e-5) -> EquivalenceReport:
    """Runs `source` and `candidate` (exported first if a Graph) in onnxruntime on the
    same feeds and compares their outputs (see `compare_outputs`)."""
    if isinstance(candidate, Graph):
        candidate = candidate.export_onnx()
    return compare_outputs(run_onnxruntime(source, feeds), run_onnxruntime(candidate, feeds),
                           rtol=rtol, atol=atol)


@dataclass(frozen=True)
class RoundTripReport:
    """Export -> reload -> compare: structure preserved and numerics equal.

    `same_structure` is None when the export had to lower ops that ONNX has no single
    operator for (a fused activation becomes a second node, Enlarge a Pad), so the
    reloaded graph cannot hash equal."""

    same_structure: bool | None
    numerics: EquivalenceReport
    checked_against: str

    @property
    def ok(self) -> bool:
        return self.same_structure is not False and self.numerics.equivalent


def round_trip_check(graph: Graph, source: onnx.ModelProto | None = None, *, seed: int = 0,
                     rtol: float = 1e-4, atol: float = 1e-5) -> RoundTripReport:
    """Exports `graph`, reloads the export and compares.

    The structure must survive (equal canonical hash after reloading). Numerically, the
    export is run in onnxruntime against `source` when given (the model `graph` was
    loaded from), else against the numpy reference executor on the graph itself.
    """
    from taso_env.engine import reference
    from taso_env.onnx.importer import load_onnx

    exported = graph.export_onnx()
    lowered = any(o.type == "Enlarge" or o.attrs.get("activation", 0) for o in graph.ops)
    same = None if lowered else load_onnx(exported).hash() == graph.hash()
    feeds = random_feeds(graph, seed)
    if source is not None:
        return RoundTripReport(same, check_equivalent(source, exported, feeds, rtol=rtol, atol=atol),
                               "onnxruntime on the source model")
    report = compare_outputs(reference.run(graph, feeds), run_onnxruntime(exported, feeds),
                             rtol=rtol, atol=atol)
    return RoundTripReport(same, report, "the numpy reference executor")
