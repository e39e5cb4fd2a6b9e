"""Generated rules: how many fire per model, and backtracking / greedy speedups with the
full rule set (hand + generated) against the hand rules only, on the same cost model.

    python benchmarks/bench_generated_rules.py [--budget 100] [--graphs squeezenet nasrnn ...]
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from common import emit

import taso_env as te
from taso_env.rules import build_rule_set
from taso_env.rules.generator.pipeline import FAMILY, hand_specs

GRAPHS = ["bert_base", "vit_base", "resnet50", "inception_v3", "squeezenet", "nasrnn", "nasbench", "resnet18",
          "data/models/bert_base.onnx", "data/models/vit_b_16.onnx", "data/models/squeezenet1_1.onnx",
          "data/models/resnet18.onnx", "data/models/inception_v3.onnx"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--graphs", nargs="*", default=GRAPHS)
    p.add_argument("--cost-model", default="analytic:h100")
    args = p.parse_args()
    te.set_cost_model(args.cost_model)
    full = te.rules.default()
    hand = build_rule_set(hand_specs())
    rows = []
    for name in args.graphs:
        g = te.graphs.load(name, seed=None)
        fired = Counter(c.rule_id for c in g.candidates(rules=full))
        row = {"graph": name, "ops": g.num_ops,
               "generated_firing": sum(1 for r in fired if full.specs[r]["family"] == FAMILY)}
        for label, rules in (("hand", hand), ("full", full)):
            t = time.perf_counter()
            res = te.search(g, "backtracking", budget=args.budget, rules=rules)
            row[f"bt_{label}"] = round(g.cost() / res.graph.cost(), 4)
            row[f"bt_{label}_s"] = round(time.perf_counter() - t, 2)
        row["greedy_full"] = round(g.cost() / te.search(g, "greedy", rules=full).graph.cost(), 4)
        row["better"] = row["bt_full"] > row["bt_hand"] + 1e-9
        rows.append(row)
    emit("generated_rules", rows, ["graph", "ops", "generated_firing", "bt_hand", "bt_full", "greedy_full",
                                   "bt_hand_s", "bt_full_s", "better"],
         budget=args.budget, cost_model=args.cost_model, rules=len(full), hand_rules=len(hand),
         models_better=sum(r["better"] for r in rows))


if __name__ == "__main__":
    main()
