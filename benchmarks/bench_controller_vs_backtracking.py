#!/usr/bin/env python
"""How much faster a trained controller optimises a graph than backtracking does, timed
in interleaved pairs so that a drifting machine weighs on both alike.

    python benchmarks/bench_controller_vs_backtracking.py --run runs/trained \
        [--graphs nasrnn bert_base ...] [--pairs 8] [--cost-model table:data/costs/h100_fp32.h5]

Per graph, after one untimed episode: `--pairs` times one deterministic controller
episode (the evaluation's: `controller.evaluation.episode_graph`, models loaded and
traced beforehand) then one backtracking search (alpha 1.05, `--budget` expansions),
each timed with the garbage collector's older objects frozen, as `rlflow evaluate`
times them. Reports both agents' speedups (the cost model's), the median seconds of
each, the ratio of the medians and the smallest and largest ratio of a pair. Prints one
JSON line and a markdown table.
"""

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from controller.evaluation import collector_frozen, episode_graph, learned_agent  # noqa: E402
from taso_env.env.rewrite_env import GraphRewriteEnv, load_graph  # noqa: E402


def timed(fn, *args, **kwargs):
    """(seconds, result) of fn(*args, **kwargs), timed as `rlflow evaluate` times an agent."""
    with collector_frozen():
        start = time.perf_counter()
        out = fn(*args, **kwargs)
        return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a trained run folder (its controller is timed)")
    parser.add_argument("--graphs", nargs="+", default=["nasrnn", "bert_base", "squeezenet1_1", "inception_v3"])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--budget", type=int, default=1000, help="backtracking's expansions")
    parser.add_argument("--horizon", type=int, default=150)
    parser.add_argument("--cost-model", default="table:data/costs/h100_fp32.h5")
    args = parser.parse_args()
    te.set_cost_model(args.cost_model)
    agent, rows = None, []
    for spec in args.graphs:
        graph = load_graph(spec)
        env = GraphRewriteEnv(graph, horizon=args.horizon, cost_model=args.cost_model, lazy_observations=True)
        if agent is None:
            agent = learned_agent("controller", args.run, env)
        agent.env = env.unwrapped
        best, _, _ = episode_graph(env, agent, 0)  # untimed: the first episode on a graph warms caches
        controller_s, backtracking_s = [], []
        for _ in range(args.pairs):
            seconds, (best, _, _) = timed(episode_graph, env, agent, 0)
            controller_s.append(seconds)
            seconds, result = timed(te.search, graph, "backtracking", alpha=1.05, budget=args.budget)
            backtracking_s.append(seconds)
        per_pair = [b / c for c, b in zip(controller_s, backtracking_s)]
        rows.append({
            "graph": graph.name, "ops": graph.num_ops,
            "controller_speedup": graph.cost() / best.cost(), "backtracking_speedup": result.speedup,
            "controller_s": statistics.median(controller_s), "backtracking_s": statistics.median(backtracking_s),
            "ratio": statistics.median(backtracking_s) / statistics.median(controller_s),
            "ratio_min": min(per_pair), "ratio_max": max(per_pair), "pairs": args.pairs,
        })
    emit("controller_vs_backtracking", rows,
         ["graph", "ops", "controller_speedup", "backtracking_speedup", "controller_s", "backtracking_s", "ratio",
          "ratio_min", "ratio_max", "pairs"],
         run=args.run, cost_model=args.cost_model, budget=args.budget)


if __name__ == "__main__":
    main()
