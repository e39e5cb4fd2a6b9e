#!/usr/bin/env python
"""What the trained world model adds to the controller: the same lookahead with a run's
trained V and M against V and M of the same sizes left untrained (random weights).

    python benchmarks/bench_controller_ablation.py --run runs/small \
        [--graphs nasrnn squeezenet1_1 ...] [--seeds 0 1 2] [--cost-model table:h100_fp32]

Per graph: the speedup (estimated, the cost model's) of one deterministic episode of the
trained controller and of the untrained one for each seed (the controller C, the
lookahead settings and the real engine are the same). Prints one JSON line and a
markdown table.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from common import emit  # noqa: E402

from controller.agent import ControllerAgent  # noqa: E402
from controller.training import load_lookahead_agent, load_controller  # noqa: E402
from taso_env.env.episode import run_episode  # noqa: E402
from taso_env.env.rewrite_env import GraphRewriteEnv  # noqa: E402
from worldmodel.checkpoints import build_mdnrnn, build_vae, load_mdnrnn, load_vae  # noqa: E402
from worldmodel.graph_vae import GraphVAE  # noqa: E402
from worldmodel.mdnrnn import MDNRNN  # noqa: E402


def speedup(env, agent) -> float:
    """The episode's start cost / the cost of the graph it ends on (the controller stops
    at the best graph it reached)."""
    metrics = run_episode(env, agent, 0, record=False).metrics
    return metrics["initial_cost"] / metrics["final_cost"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", required=True, help="a trained run folder")
    parser.add_argument("--graphs", nargs="+", default=["nasrnn", "squeezenet1_1", "inception_v3", "nasbench"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--cost-model", default="table:h100_fp32")
    parser.add_argument("--horizon", type=int, default=150)
    args = parser.parse_args()
    vae_config, mdnrnn_config = load_vae(args.run).config, load_mdnrnn(args.run).config
    rows = []
    for graph in args.graphs:
        env = GraphRewriteEnv(graph, horizon=args.horizon, cost_model=args.cost_model)
        trained = load_lookahead_agent(args.run, env)
        row = {"graph": graph, "trained": round(speedup(env, trained), 4)}
        for seed in args.seeds:
            tf.random.set_seed(seed)
            vae, mdnrnn = GraphVAE(vae_config), MDNRNN(mdnrnn_config)
            build_vae(vae)
            build_mdnrnn(mdnrnn)
            controller, _ = load_controller(args.run)
            untrained = ControllerAgent(vae, mdnrnn, controller, env, lookahead=trained.lookahead)
            row[f"untrained seed {seed}"] = round(speedup(env, untrained), 4)
        rows.append(row)
    emit("controller_ablation", rows, ["graph", "trained"] + [f"untrained seed {s}" for s in args.seeds],
         run=args.run, cost_model=args.cost_model)


if __name__ == "__main__":
    main()
