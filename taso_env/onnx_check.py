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

from taso_env.graph import Graph


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


def check_equivalent(source: onnx.ModelProto, candidate: Graph | onnx.ModelProto,
                     feeds: Mapping[str, np.ndarray], *, rtol: float = 1e-4,
                     atol: float = 1e-5) -> EquivalenceReport:
    """Compares `source` and `candidate` (exported first if a Graph) in onnxruntime.

    Outputs are matched by name; a missing output makes the report not equivalent. An
    output agrees when every |difference| <= atol + rtol * max|expected|.
    """
    if isinstance(candidate, Graph):
        candidate = candidate.export_onnx()
    expected = run_onnxruntime(source, feeds)
    got = run_onnxruntime(candidate, feeds)
    abs_diff, rel_diff, ok = {}, {}, True
    for name, want in expected.items():
        if name not in got or got[name].shape != want.shape:
            abs_diff[name], rel_diff[name], ok = float("inf"), float("inf"), False
            continue
        diff = np.abs(got[name].astype(np.float64) - want.astype(np.float64))
        abs_diff[name] = float(diff.max(initial=0.0))
        rel_diff[name] = float((diff / (np.abs(want) + 1e-12)).max(initial=0.0))
        # float32 results differ by summation order, so the relative tolerance is taken
        # against the output's scale (its largest magnitude), not element by element.
        scale = float(np.abs(want).max(initial=0.0))
        ok &= bool(np.all(diff <= atol + rtol * scale))
    return EquivalenceReport(abs_diff, rel_diff, rtol, atol, ok)
