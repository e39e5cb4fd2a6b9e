#!/usr/bin/env python
"""Backtracking search (TASO's algorithm) per model: estimated speedup, wall time and
which rules fired; optionally greedy alongside.

    python benchmarks/bench_search.py [--budget 1000] [--alpha 1.05] [--models ...]

Every optimised graph is checked against the original in onnxruntime (random inputs and
weights) before it is reported. Prints one JSON line and a markdown table.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.onnx.check import check_equivalent, random_feeds  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models")
DEFAULT = ["squeezenet1_1.onnx", "resnet18.onnx", "resnet50.onnx", "bert_base.onnx"] + [
    "squeezenet", "resnet18", "resnet50", "resnext50", "inception_v3", "bert_base", "vit_base",
    "nasnet_a", "nasrnn", "nasbench"]


def measure(model: str, budget: int, alpha: float) -> dict:
    path = os.path.join(DATA, model)
    g = te.load_onnx(path) if model.endswith(".onnx") else te.graphs.build(model, seed=None)
    greedy = te.search(g, "greedy")
    r = te.search(g, "backtracking", alpha=alpha, budget=budget)
    report = check_equivalent(g.export_onnx(), r.graph, random_feeds(g, 0))
    if not report.equivalent:
        raise AssertionError(f"{model}: optimised graph differs from the original: {report}")
    return {"model": model, "ops_before": g.num_ops, "ops_after": r.graph.num_ops,
            "cost_before_ms": r.initial_cost, "cost_after_ms": r.final_cost,
            "speedup": r.speedup, "greedy_speedup": greedy.speedup, "search_s": r.seconds,
            "expansions": r.expansions, "onnxruntime_equal": report.equivalent,
            "rules_fired": ", ".join(f"{n} {c}" for n, c in r.rule_fires.most_common(6))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1.05)
    args = parser.parse_args()
    rows = []
    for m in args.models:
        rows.append(measure(m, args.budget, args.alpha))
        # each row as soon as it is known, so a long run that is stopped keeps its rows
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    emit("backtracking_search", rows,
         ["model", "ops_before", "ops_after", "cost_before_ms", "cost_after_ms", "speedup",
          "greedy_speedup", "search_s", "rules_fired"],
         budget=args.budget, alpha=args.alpha, cost_model=te.get_cost_model().name)


if __name__ == "__main__":
    main()
