#!/usr/bin/env python
"""GraphRewriteEnv steps/s under the random policy, per graph, and rollout-collection
throughput (episodes/s, steps/s) with 0 (in process), 1 and 2 worker processes.

    python benchmarks/bench_env.py [--graphs squeezenet resnet50 inception_v3 bert_base]
        [--horizon 50] [--episodes 4] [--collect-graphs squeezenet resnet50]
        [--collect-episodes 80] [--workers 0 1 2]

Env rows time `run_episode` (observation, masks and candidates every step, nothing
stored) over `--episodes` seeds; collection rows time `taso_env.env.collection.collect`
end to end into a fresh folder (process start-up and HDF5 writes included). Graphs are
built-in names or ONNX paths (data/models/*.onnx). Prints one JSON line (with the
machine's load average: other processes skew these timings) and a markdown table per part.
"""

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit, median_seconds  # noqa: E402

from taso_env.env.collection import CollectConfig, collect  # noqa: E402
from taso_env.env.episode import run_episode  # noqa: E402
from taso_env.env.features import graph_size  # noqa: E402
from taso_env.env.policies import make_policy  # noqa: E402
from taso_env.env.rewrite_env import EnvConfig, GraphRewriteEnv  # noqa: E402


def env_row(graph: str, horizon: int, episodes: int, repeats: int) -> dict:
    env = GraphRewriteEnv(graph, config=EnvConfig(graphs=(graph,), horizon=horizon))
    policy = make_policy("random", env)
    steps = [0]

    def play() -> None:
        steps[0] = sum(run_episode(env, policy, seed, record=False).metrics["steps"] for seed in range(episodes))

    seconds = median_seconds(play, repeats)
    nodes, edges = graph_size(env.graph)
    return {"graph": os.path.basename(graph), "nodes": nodes, "edges": edges, "steps": steps[0],
            "steps_per_s": steps[0] / seconds, "ms_per_step": 1e3 * seconds / steps[0]}


def collect_row(graphs: list[str], workers: int, episodes: int, horizon: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cfg = CollectConfig(graphs=tuple(graphs), episodes=episodes, out=os.path.join(tmp, "rollouts.h5"),
                            workers=workers, horizon=horizon)
        start = time.perf_counter()
        result = collect(cfg, progress=False)
        seconds = time.perf_counter() - start
        folder = cfg.out + ".episodes"
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    return {"workers": workers, "episodes": result.collected, "steps": result.steps, "seconds": seconds,
            "episodes_per_s": result.collected / seconds, "steps_per_s": result.steps / seconds,
            "kb_per_step": size / 1024 / max(result.steps, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["squeezenet", "resnet50", "inception_v3", "bert_base"])
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--episodes", type=int, default=4, help="episodes per env timing")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--collect-graphs", nargs="+", default=["squeezenet", "resnet50"])
    parser.add_argument("--collect-episodes", type=int, default=80)
    parser.add_argument("--collect-horizon", type=int, default=20)
    parser.add_argument("--workers", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()

    rows = []
    for g in args.graphs:
        rows.append(env_row(g, args.horizon, args.episodes, args.repeats))
        print(f"{g}: {rows[-1]['steps_per_s']:.0f} steps/s", file=sys.stderr)
    emit("env_steps_random_policy", rows, ["graph", "nodes", "edges", "steps", "steps_per_s", "ms_per_step"],
         horizon=args.horizon, episodes=args.episodes, repeats=args.repeats, load_average=os.getloadavg())
    print()
    rows = []
    for w in args.workers:
        rows.append(collect_row(args.collect_graphs, w, args.collect_episodes, args.collect_horizon))
        print(f"{w} workers: {rows[-1]['episodes_per_s']:.1f} episodes/s", file=sys.stderr)
    emit("rollout_collection", rows,
         ["workers", "episodes", "steps", "seconds", "episodes_per_s", "steps_per_s", "kb_per_step"],
         graphs=args.collect_graphs, horizon=args.collect_horizon, policy="random",
         load_average=os.getloadavg())


if __name__ == "__main__":
    main()
