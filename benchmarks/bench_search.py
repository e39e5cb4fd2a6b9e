#!/usr/bin/env python
"""Search per model, hand-written rules against the full rule set, in one run on one
cost model: backtracking (TASO's algorithm) and greedy with each rule set, and
equality saturation (full set) where `te.search(method="eqsat")` exists.

    python benchmarks/bench_search.py [--budget 1000] [--alpha 1.05] [--models ...]
        [--hand hand] [--full all] [--cost-model analytic:h100 | table:h100_fp32.h5]

Models: every builder graph (te.graphs.names()) and every shipped ONNX model
(data/models/*.onnx) unless --models names some. Every optimised graph is checked
against its input in onnxruntime (random inputs and weights) before it is reported; a
difference stops the benchmark. Prints one JSON line per model as it finishes (stderr),
then one JSON line and a markdown table.
"""

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.engine import search as search_module  # noqa: E402
from taso_env.onnx.check import check_equivalent, random_feeds  # noqa: E402
from taso_env.rules.sets import rule_set  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models")


def all_models() -> list[str]:
    return list(te.graphs.names()) + sorted(os.path.basename(p) for p in glob.glob(os.path.join(DATA, "*.onnx")))


def has_eqsat() -> bool:
    """Whether te.search accepts method="eqsat" (listed in METHODS, or accepted on a tiny graph)."""
    if "eqsat" in getattr(search_module, "METHODS", ()):
        return True
    b = te.GraphBuilder("probe")
    b.output(b.relu(b.input("x", [1, 4])), "y")
    try:
        te.search(b.build(), "eqsat")
    except ValueError as e:
        if "unknown search method" in str(e):
            return False
        raise
    return True


def checked(model: str, source, feeds, result) -> None:
    report = check_equivalent(source, result.graph, feeds)
    if not report.equivalent:
        raise AssertionError(f"{model}: {result.method} output differs from its input in onnxruntime: {report}")


def measure(model: str, budget: int, alpha: float, hand, full, eqsat: bool) -> dict:
    path = os.path.join(DATA, model)
    g = te.load_onnx(path) if model.endswith(".onnx") else te.graphs.build(model, seed=None)
    source, feeds = g.export_onnx(), random_feeds(g, 0)
    row = {"model": model, "ops": g.num_ops, "cost_ms": g.cost()}
    for label, rules in (("hand", hand), ("full", full)):
        greedy = te.search(g, "greedy", rules=rules)
        checked(model, source, feeds, greedy)
        start = time.perf_counter()
        back = te.search(g, "backtracking", alpha=alpha, budget=budget, rules=rules)
        row[f"back_{label}_s"] = time.perf_counter() - start
        checked(model, source, feeds, back)
        row[f"greedy_{label}"] = greedy.speedup
        row[f"back_{label}"] = back.speedup
        row[f"back_{label}_complete"] = back.complete
        row[f"back_{label}_fired"] = ", ".join(f"{n} {c}" for n, c in back.rule_fires.most_common(4))
    if eqsat:
        start = time.perf_counter()
        eq = te.search(g, "eqsat", rules=full)
        row["eqsat_s"] = time.perf_counter() - start
        checked(model, source, feeds, eq)
        row["eqsat"] = eq.speedup
    row["onnxruntime_equal"] = True  # every output above was checked (or we raised)
    row["full_beats_hand"] = row["back_full"] > row["back_hand"] * (1 + 1e-9)
    row["greedy_below_back"] = row["greedy_full"] < row["back_full"] * (1 - 1e-9)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=None, help="default: every builder and shipped model")
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--alpha", type=float, default=1.05)
    parser.add_argument("--hand", default="hand", help="rule set of the 'hand' columns (taso_env.rules.sets)")
    parser.add_argument("--full", default="all", help="rule set of the 'full' columns")
    parser.add_argument("--cost-model", default="analytic:h100",
                        help="analytic:h100, or the measured H100 table: table:h100_fp32.h5")
    args = parser.parse_args()
    te.set_cost_model(args.cost_model)
    hand, full = rule_set(args.hand), rule_set(args.full)
    eqsat = has_eqsat()
    rows = []
    for m in args.models or all_models():
        rows.append(measure(m, args.budget, args.alpha, hand, full, eqsat))
        # each row as soon as it is known, so a long run that is stopped keeps its rows
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    columns = ["model", "ops", "cost_ms", "greedy_hand", "greedy_full", "back_hand", "back_full", "back_hand_s",
               "back_full_s"] + (["eqsat", "eqsat_s"] if eqsat else []) + ["back_full_fired"]
    emit("search_hand_vs_full", rows, columns, budget=args.budget, alpha=args.alpha,
         cost_model=te.get_cost_model().name, hand_rules=len(hand), full_rules=len(full),
         full_beats_hand=sum(r["full_beats_hand"] for r in rows),
         greedy_below_back=sum(r["greedy_below_back"] for r in rows))


if __name__ == "__main__":
    main()
