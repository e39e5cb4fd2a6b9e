#!/usr/bin/env python
"""The standard-library baseline `sb3_maskable_ppo`: sb3-contrib's MaskablePPO on the
env's flat-action form, beside rlflow's model-free agent, random and greedy.

    pip install ".[env]" torch stable-baselines3 sb3-contrib      # no TensorFlow needed
    python benchmarks/bench_sb3_maskable_ppo.py [--graphs nasrnn] [--real-steps 2000]
        [--horizon 20] [--seeds 0 1 2] [--model-free-python PYTHON] [--out FILE.json]

MaskablePPO (`MultiInputPolicy`) trains on `FlatCandidateActions(GraphRewriteEnv(graphs))`
with the full observation: the graph arrays and the per-action `candidates` rows (rule
and estimated cost delta: the features rlflow's model-free GNN scores), for the same
number of real env steps, horizon and graphs as `rlflow train-model-free` (its
ModelFreeConfig defaults unless the flags say otherwise). Each seed's deterministic
policy then plays one episode per graph at the evaluation horizon (`--eval-horizon`);
random is the mean of five masked-uniform episodes, greedy the env's greedy policy.

The model-free row needs TensorFlow, which must not share a process with torch
(docs/env.md): with `--model-free-python` naming an interpreter where rlflow and
TensorFlow are installed, the model-free agent is trained and evaluated there by
`rlflow train-model-free` / `rlflow evaluate` in subprocesses with the same steps and
seeds; without it the row is left out. Prints one JSON line and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from sb3_contrib import MaskablePPO

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit  # noqa: E402

from controller.configs import ModelFreeConfig  # noqa: E402  (a TensorFlow-free module)
from taso_env.env.episode import run_episode  # noqa: E402
from taso_env.env.policies import GreedyPolicy, RandomPolicy  # noqa: E402
from taso_env.env.rewrite_env import FlatCandidateActions, GraphRewriteEnv  # noqa: E402


def flat_env(graphs, horizon: int) -> FlatCandidateActions:
    return FlatCandidateActions(GraphRewriteEnv(list(graphs), horizon=horizon), max_candidates=512)


def train(graphs, real_steps: int, horizon: int, seed: int) -> tuple[MaskablePPO, float]:
    """MaskablePPO trained for `real_steps` env steps; returns it and the seconds taken."""
    env = flat_env(graphs, horizon)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=min(512, real_steps), batch_size=128,
                        learning_rate=3e-4, ent_coef=0.01, seed=seed, verbose=0)
    start = time.perf_counter()
    model.learn(total_timesteps=real_steps)
    return model, time.perf_counter() - start


def play_trained(model: MaskablePPO, graph: str, horizon: int) -> tuple[float, int]:
    """(speedup, steps) of the deterministic policy's episode on `graph`."""
    env = flat_env([graph], horizon)
    obs, info = env.reset(seed=0)
    done, steps = False, 0
    while not done:
        action = int(model.predict(obs, action_masks=env.action_masks(), deterministic=True)[0])
        obs, _, terminated, truncated, info = env.step(action)
        steps += 1
        done = terminated or truncated
    return info["initial_cost"] / info["cost"], steps


def baseline(graph: str, horizon: int, policy: str) -> float:
    env = GraphRewriteEnv(graph, horizon=horizon)
    if policy == "greedy":
        return run_episode(env, GreedyPolicy(env), seed=0, record=False).metrics["speedup"]
    return float(np.mean([run_episode(env, RandomPolicy(), seed=s, record=False).metrics["speedup"]
                          for s in range(5)]))


def model_free_rows(python: str, graphs, real_steps: int, horizon: int, eval_horizon: int, seeds) -> dict:
    """{(graph, seed): speedup} of rlflow's model-free agent, trained and evaluated by the
    `rlflow` CLI under `python` (a TensorFlow environment) in subprocesses."""
    out = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            cli = [python, "-m", "rlflow"]
            subprocess.run([*cli, "train-model-free", "--run", str(run), "--graphs", *graphs,
                            "--real-steps", str(real_steps), "--horizon", str(horizon), "--seed", str(seed)],
                           check=True, cwd=tmp, stdout=subprocess.DEVNULL)
            subprocess.run([*cli, "evaluate", "--run", str(run), "--graphs", *graphs, "--agents", "model_free",
                            "--horizon", str(eval_horizon), "--out", str(Path(tmp) / "eval")],
                           check=True, cwd=tmp, stdout=subprocess.DEVNULL)
            for row in json.loads((Path(tmp) / "eval" / "results.json").read_text()):
                out[(row["graph"], seed)] = float(row["speedup"])
    return out


def main(argv=None) -> None:
    defaults = ModelFreeConfig()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["nasrnn"])
    parser.add_argument("--real-steps", type=int, default=defaults.real_steps)
    parser.add_argument("--horizon", type=int, default=defaults.horizon, help="training episodes' step limit")
    parser.add_argument("--eval-horizon", type=int, default=100, help="as rlflow evaluate's default")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--model-free-python", default=None,
                        help="an interpreter with rlflow and TensorFlow for the model-free row")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON line here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)

    rows = []
    trained = {}
    for seed in args.seeds:
        model, seconds = train(args.graphs, args.real_steps, args.horizon, seed)
        for graph in args.graphs:
            trained[(graph, seed)] = (*play_trained(model, graph, args.eval_horizon), seconds)
    free = (model_free_rows(args.model_free_python, args.graphs, args.real_steps, args.horizon,
                            args.eval_horizon, args.seeds) if args.model_free_python else {})
    for graph in args.graphs:
        ppo = [trained[(graph, s)][0] for s in args.seeds]
        row = {"graph": graph, "real_steps": args.real_steps,
               "sb3_maskable_ppo": float(np.mean(ppo)), "sb3_min": float(np.min(ppo)), "sb3_max": float(np.max(ppo)),
               "sb3_steps": float(np.mean([trained[(graph, s)][1] for s in args.seeds])),
               "train_s": float(np.mean([trained[(graph, s)][2] for s in args.seeds])),
               "model_free": float(np.mean([free[(graph, s)] for s in args.seeds])) if free else "not run",
               "random": baseline(graph, args.eval_horizon, "random"),
               "greedy": baseline(graph, args.eval_horizon, "greedy")}
        rows.append(row)
    columns = ["graph", "real_steps", "sb3_maskable_ppo", "sb3_min", "sb3_max", "model_free", "random", "greedy",
               "sb3_steps", "train_s"]
    extra = {"seeds": args.seeds, "horizon": args.horizon, "eval_horizon": args.eval_horizon,
             "observation": "full (graph arrays + candidates)", "cost_model": "analytic:h100"}
    emit("sb3_maskable_ppo", rows, columns, **extra)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "sb3_maskable_ppo", **extra, "rows": rows}) + "\n")


if __name__ == "__main__":
    main()
