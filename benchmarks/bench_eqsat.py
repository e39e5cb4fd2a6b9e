#!/usr/bin/env python
"""Equality saturation (egglog) against greedy and backtracking, per model: estimated
speedup and wall time of each, e-graph size, stop reason, where eqsat's graph came from;
every eqsat output is checked against its input in onnxruntime.

    python benchmarks/bench_eqsat.py [--models ...] [--time-limit 10] [--node-limit 20000]
                                     [--budget 1000] [--large-ops 500 --large-budget 1000]

Default models: every builder graph and every shipped ONNX model (data/models/*.onnx).
Backtracking on graphs over --large-ops compute ops uses --large-budget (a lower one
bounds the run on machines where backtracking is slow); the table says which ran. Rows go to stderr as they are
known; one JSON line and a markdown table at the end.
"""

import argparse
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onnx  # noqa: E402
from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.onnx.check import check_equivalent, random_feeds  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models")


def default_models() -> list[str]:
    return te.graphs.names() + sorted(os.path.basename(p) for p in glob.glob(os.path.join(DATA, "*.onnx")))


def measure(model: str, args) -> dict:
    path = os.path.join(DATA, model)
    g = te.load_onnx(path) if model.endswith(".onnx") else te.graphs.build(model, seed=None)
    source = onnx.load(path) if model.endswith(".onnx") else g.export_onnx()
    greedy = te.search(g, "greedy")
    budget = args.budget if g.num_ops <= args.large_ops else args.large_budget
    bt = te.search(g, "backtracking", alpha=args.alpha, budget=budget)
    r = te.search(g, "eqsat", time_limit=args.time_limit, node_limit=args.node_limit)
    report = check_equivalent(source, r.graph, random_feeds(g, 0))
    if not report.equivalent:
        raise AssertionError(f"{model}: eqsat's graph differs from the original: {report}")
    d = r.details
    return {"model": model, "ops": g.num_ops, "greedy": greedy.speedup, "greedy_s": greedy.seconds,
            "backtracking": bt.speedup, "bt_s": bt.seconds, "bt_budget": budget,
            "eqsat": r.speedup, "eqsat_s": r.seconds, "vs_bt": bt.final_cost / r.final_cost,
            "enodes": d["enodes"], "iterations": d["iterations"], "stop": d["stop"],
            "source": d["source"], "extraction": d["extraction"], "extracted_speedup":
            r.initial_cost / d["extracted_cost"], "onnxruntime_equal": report.equivalent,
            "rules_skipped": sum(d["rules_skipped"].values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--node-limit", type=int, default=20000)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--large-ops", type=int, default=500)
    parser.add_argument("--large-budget", type=int, default=1000)
    args = parser.parse_args()
    rows = []
    for m in args.models or default_models():
        rows.append(measure(m, args))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    emit("eqsat_vs_search", rows,
         ["model", "ops", "greedy", "backtracking", "bt_budget", "bt_s", "eqsat", "eqsat_s", "vs_bt",
          "enodes", "stop", "source", "onnxruntime_equal"],
         time_limit=args.time_limit, node_limit=args.node_limit, alpha=args.alpha,
         cost_model=te.get_cost_model().name)


if __name__ == "__main__":
    main()
