#!/usr/bin/env python
"""GraphRewriteEnv steps/s under the random policy, per graph, and rollout-collection
throughput (episodes/s, steps/s) with 0 (in process), 1 and 2 worker processes, and on a
local Ray with 1 and 2 workers (`--ray`), with the projected Ray scaling.

    python benchmarks/bench_env.py [--graphs squeezenet resnet50 inception_v3 bert_base]
        [--horizon 50] [--episodes 4] [--collect-graphs squeezenet resnet50]
        [--collect-episodes 80] [--workers 0 1 2] [--ray-workers 1 2] [--driver-episodes 1000]
        [--project 16 64]

Env rows time `run_episode` (observation, masks and candidates every step, nothing
stored) over `--episodes` seeds; collection rows time `taso_env.env.collection.collect`
end to end into a fresh folder (worker start-up and HDF5 writes included). A Ray row's
local Ray (as many CPUs as workers) is started before its timing and its start-up is
reported apart (startup_s); driver_ms_per_episode is the wall time the collecting
process spent per arrived episode (fetching it, writing it, the index, the progress
bar), not waiting, and driver_cpu_ms_per_episode the CPU time of that whole process
(all threads) per episode once episodes arrive: what the driver needs of one core, not
inflated by other processes taking the CPU. The driver saturation row (`driver_row`)
measures the driver alone: Ray workers hand back an episode played beforehand at once.
The projection is arithmetic, not a measurement: N workers give min(N x steps/s per
worker, the driver's limit 1000 x steps per episode / the saturation row's
driver_cpu_ms_per_episode), per worker once as the 1-worker Ray row measured it here
(`_here`: cores shared with everything else on this machine) and once on a core of its
own (`_own_core`: steps per CPU second of the in-process row, workers 0).
Graphs are built-in names or ONNX paths (data/models/*.onnx). Prints one JSON line (with
the machine's load average: other processes skew these timings) and a markdown table
per part.
"""

import argparse
import contextlib
import dataclasses
import importlib.util
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


def collect_row(graphs: list[str], workers: int, episodes: int, horizon: int, ray: bool = False) -> dict:
    startup = 0.0
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        cfg = CollectConfig(graphs=tuple(graphs), episodes=episodes, out=os.path.join(tmp, "rollouts.h5"),
                            workers=workers, horizon=horizon, ray="local" if ray else "")
        if ray:  # collect() joins this process's Ray instead of starting its own
            from taso_env.ray_cluster import ray_cluster

            start = time.perf_counter()
            stack.enter_context(ray_cluster("local", num_cpus=workers))
            startup = time.perf_counter() - start
        start = time.perf_counter()
        result = collect(cfg, progress=False)
        seconds = time.perf_counter() - start
        folder = cfg.out + ".episodes"
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    return {"backend": "ray" if ray else "local", "workers": workers, "episodes": result.collected,
            "steps": result.steps, "seconds": seconds, "startup_s": startup,
            "episodes_per_s": result.collected / seconds, "steps_per_s": result.steps / seconds,
            "driver_ms_per_episode": 1e3 * result.driver_seconds / max(result.collected, 1),
            "driver_cpu_ms_per_episode": 1e3 * result.driver_cpu_seconds / max(result.collected, 1),
            "kb_per_step": size / 1024 / max(result.steps, 1)}


def driver_row(graphs: list[str], episodes: int, horizon: int) -> dict:
    """The Ray driver alone at full speed: 2 Ray workers return one episode played
    beforehand (its bytes, renumbered) at once, so fetching, writing (fsync, 4 threads),
    the index and the progress bar in collect() are the bottleneck. Its episodes/s is
    what the driver can take on this machine (sharing 2 cores with Ray and the workers);
    its CPU per episode is what the driver needs of a core of its own."""
    from taso_env.env import ray_collection
    from taso_env.env.collection import make_collect_policy, make_env, play_encoded
    from taso_env.env.rollouts import RolloutMeta
    from taso_env.ray_cluster import ray_cluster

    with tempfile.TemporaryDirectory() as tmp:
        cfg = CollectConfig(graphs=tuple(graphs), episodes=episodes, out=os.path.join(tmp, "rollouts.h5"),
                            workers=2, horizon=horizon, ray="local")
        env = make_env(cfg)
        played = play_encoded(cfg, env, make_collect_policy(cfg, env), RolloutMeta.from_env(env), 0)

        def replay(cfg, meta, episode_id, driver_folder=None):  # a closure: Ray ships it to the workers by value
            return dataclasses.replace(played, episode_id=episode_id)

        task, ray_collection.rlflow_collect_episode = ray_collection.rlflow_collect_episode, replay
        try:
            with ray_cluster("local", num_cpus=2):
                result = collect(cfg, progress=False)
        finally:
            ray_collection.rlflow_collect_episode = task
    return {"episodes": result.collected, "seconds": result.seconds,
            "episodes_per_s": result.collected / result.seconds,
            "driver_ms_per_episode": 1e3 * result.driver_seconds / result.collected,
            "driver_cpu_ms_per_episode": 1e3 * result.driver_cpu_seconds / result.collected,
            "kb_per_episode": len(played.data) / 1024, "steps_per_episode": played.total_steps}


def projection(rows: list[dict], driver: dict, workers: list[int]) -> list[dict]:
    """Ray throughput for N workers from the measured rows (see the module docstring):
    per worker as measured here (the 1-worker Ray row, on this machine's shared cores)
    and on a core of its own (steps per CPU second of the in-process row, if measured)."""
    one = min((r for r in rows if r["backend"] == "ray"), key=lambda r: r["workers"])
    in_process = next((r for r in rows if r["backend"] == "local" and r["workers"] == 0), None)
    steps_per_episode = one["steps"] / one["episodes"]
    per_worker = {"here": one["steps_per_s"] / one["workers"],
                  "own_core": 1e3 * steps_per_episode / in_process["driver_cpu_ms_per_episode"]
                  if in_process else float("nan")}
    limit = 1e3 * steps_per_episode / driver["driver_cpu_ms_per_episode"]
    out = []
    for n in workers:
        row = {"workers": n, "steps_per_episode": steps_per_episode,
               "driver_cpu_ms_per_episode": driver["driver_cpu_ms_per_episode"], "driver_limit_steps_per_s": limit}
        for kind, rate in per_worker.items():
            row[f"per_worker_{kind}"] = rate
            row[f"projected_{kind}"] = min(n * rate, limit)
            row[f"driver_busy_{kind}"] = min(n * rate / limit, 1.0)
        out.append(row)
    return out


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
    parser.add_argument("--ray-workers", nargs="*", type=int, default=[1, 2],
                        help="workers of the Ray rows (none: no Ray rows; needs pip install rlflow[ray])")
    parser.add_argument("--driver-episodes", type=int, default=1000,
                        help="episodes of the Ray driver saturation run (0: none)")
    parser.add_argument("--project", nargs="*", type=int, default=[16, 64],
                        help="worker counts of the projected Ray scaling")
    args = parser.parse_args()

    rows = []
    for g in args.graphs:
        rows.append(env_row(g, args.horizon, args.episodes, args.repeats))
        print(f"{g}: {rows[-1]['steps_per_s']:.0f} steps/s", file=sys.stderr)
    emit("env_steps_random_policy", rows, ["graph", "nodes", "edges", "steps", "steps_per_s", "ms_per_step"],
         horizon=args.horizon, episodes=args.episodes, repeats=args.repeats, load_average=os.getloadavg())
    print()
    rows = []
    ray_workers = args.ray_workers if importlib.util.find_spec("ray") else []
    if args.ray_workers and not ray_workers:
        print("Ray is not installed (pip install rlflow[ray]): no Ray rows", file=sys.stderr)
    for w, ray in [(w, False) for w in args.workers] + [(w, True) for w in ray_workers]:
        rows.append(collect_row(args.collect_graphs, w, args.collect_episodes, args.collect_horizon, ray))
        print(f"{rows[-1]['backend']}, {w} workers: {rows[-1]['steps_per_s']:.0f} steps/s", file=sys.stderr)
    emit("rollout_collection", rows,
         ["backend", "workers", "episodes", "steps", "seconds", "startup_s", "episodes_per_s", "steps_per_s",
          "driver_ms_per_episode", "driver_cpu_ms_per_episode", "kb_per_step"],
         graphs=args.collect_graphs, horizon=args.collect_horizon, policy="random",
         load_average=os.getloadavg())
    if ray_workers and args.driver_episodes:
        print()
        driver = driver_row(args.collect_graphs, args.driver_episodes, args.collect_horizon)
        emit("ray_driver_saturation", [driver],
             ["episodes", "seconds", "episodes_per_s", "driver_ms_per_episode", "driver_cpu_ms_per_episode",
              "kb_per_episode", "steps_per_episode"], load_average=os.getloadavg())
        if args.project:
            print()
            emit("ray_collection_projection", projection(rows, driver, args.project),
                 ["workers", "steps_per_episode", "driver_cpu_ms_per_episode", "driver_limit_steps_per_s",
                  "per_worker_here", "projected_here", "driver_busy_here", "per_worker_own_core",
                  "projected_own_core", "driver_busy_own_core"],
                 note="arithmetic from the measured rows, not a measurement")


if __name__ == "__main__":
    main()
