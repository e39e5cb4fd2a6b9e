"""Plain-text reports of graphs: summaries and markdown tables."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso_env.engine.graph import Graph


def graph_summary(graph: Graph) -> dict:
    """Op count, parameters, FLOPs, input/output signatures and estimated cost."""
    params = sum(o.outputs[0].num_elements for o in graph.weight_ops)
    flops = sum(graph.op_work(o.id)[0] for o in graph.ops)
    sig = lambda t: f"{t.np_dtype}{list(t.shape)}"  # noqa: E731
    return {
        "num_ops": graph.num_ops,
        "params_m": params / 1e6,
        "gflops": flops / 1e9,
        "inputs": {o.name: sig(o.outputs[0]) for o in graph.inputs},
        "outputs": {n: sig(graph.tensor(r)) for n, r in zip(graph.output_names, graph.outputs, strict=True)},
        "cost_ms": graph.cost(),
        "op_types": dict(graph.op_type_counts().most_common()),
    }


def _fmt(v) -> str:
    if isinstance(v, float | np.floating):
        return f"{v:.4g}"
    return str(v)


def markdown_table(rows: Sequence[dict], columns: Sequence[str]) -> str:
    """A markdown table of `rows` (dicts) restricted to `columns`."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
