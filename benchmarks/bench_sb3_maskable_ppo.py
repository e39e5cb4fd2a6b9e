#!/usr/bin/env python
"""The standard-library baseline `sb3_maskable_ppo`: sb3-contrib's MaskablePPO on the
env's flat-action form, beside rlflow's model-free agent, random and greedy.

    pip install ".[env]" torch stable-baselines3 sb3-contrib      # no TensorFlow needed
    python benchmarks/bench_sb3_maskable_ppo.py [--graphs nasrnn] [--real-steps 2000]
        [--horizon 20] [--seeds 0 1 2] [--model-free-python PYTHON [--model-free-run RUN]]
        [--curve-every N] [--out FILE.json]

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
seeds (or, with `--model-free-run`, an agent trained beforehand with the same steps and
horizon is evaluated); without it the row is left out. Prints one JSON line and a markdown table.
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

import gymnasium
import numpy as np
import torch
from sb3_contrib import MaskablePPO
from stable_baselines3.common.callbacks import BaseCallback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit  # noqa: E402

from controller.configs import ModelFreeConfig  # noqa: E402  (a TensorFlow-free module)
from taso_env.env.episode import run_episode  # noqa: E402
from taso_env.env.policies import GreedyPolicy, RandomPolicy  # noqa: E402
from taso_env.env.rewrite_env import FlatCandidateActions, GraphRewriteEnv  # noqa: E402


def flat_env(graphs, horizon: int, observation: str, sizes: tuple[int, int] | None = None) -> gymnasium.Env:
    """The flat form; observation "full" (graph arrays + candidates) or "candidates" (the
    candidates rows and globals only, as examples/maskable_ppo.py). `sizes` fixes the
    observation's (max_nodes, max_edges): a policy plays on the shapes it trained on."""
    max_nodes, max_edges = sizes or (None, None)
    env = FlatCandidateActions(GraphRewriteEnv(list(graphs), horizon=horizon, max_nodes=max_nodes,
                                               max_edges=max_edges), max_candidates=512)
    if observation == "candidates":
        return gymnasium.wrappers.FilterObservation(env, ["candidates", "globals"])
    return env


class LearningCurve(BaseCallback):
    """Every `every` training steps, the deterministic policy's speedup on each graph (its
    episodes run on envs of their own: not training steps, and not counted as such)."""

    def __init__(self, graphs, every: int, eval_horizon: int, observation: str):
        super().__init__()
        self.graphs, self.every, self.eval_horizon = list(graphs), every, eval_horizon
        self.observation = observation
        self.points: list[dict] = []
        self._next = every

    def _on_step(self) -> bool:
        if self.every and self.num_timesteps >= self._next:
            self._next += self.every
            self.points.append({"real_steps": self.num_timesteps, **{
                g: play_trained(self.model, g, self.eval_horizon, self.observation)[0] for g in self.graphs}})
        return True


def train(graphs, real_steps: int, horizon: int, seed: int, observation: str,
          curve: LearningCurve | None = None) -> tuple[MaskablePPO, float]:
    """MaskablePPO trained for `real_steps` env steps; returns it and the seconds taken
    (learning-curve episodes included)."""
    env = flat_env(graphs, horizon, observation)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=min(512, real_steps), batch_size=128,
                        learning_rate=3e-4, ent_coef=0.01, seed=seed, verbose=0)
    model.observation_sizes = (env.unwrapped.max_nodes, env.unwrapped.max_edges)
    start = time.perf_counter()
    model.learn(total_timesteps=real_steps, callback=curve)
    return model, time.perf_counter() - start


def play_trained(model: MaskablePPO, graph: str, horizon: int, observation: str) -> tuple[float, int]:
    """(speedup, steps) of the deterministic policy's episode on `graph`."""
    env = flat_env([graph], horizon, observation, model.observation_sizes)
    obs, info = env.reset(seed=0)
    done, steps = False, 0
    while not done:
        mask = env.get_wrapper_attr("action_masks")()
        action = int(model.predict(obs, action_masks=mask, deterministic=True)[0])
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


def evaluate_model_free(python: str, run: Path, graphs, eval_horizon: int, tmp: Path) -> dict:
    """{graph: speedup} of the trained model-free agent of `run`, by `rlflow evaluate`
    under `python` (a TensorFlow environment) in a subprocess."""
    out = tmp / "eval"
    subprocess.run([python, "-m", "rlflow", "evaluate", "--run", str(run), "--graphs", *graphs, "--agents",
                    "model_free", "--horizon", str(eval_horizon), "--out", str(out)],
                   check=True, cwd=tmp, stdout=subprocess.DEVNULL)
    return {row["graph"]: float(row["speedup"]) for row in json.loads((out / "results.json").read_text())}


def model_free_rows(python: str, graphs, real_steps: int, horizon: int, eval_horizon: int, seeds) -> dict:
    """{(graph, seed): speedup} of rlflow's model-free agent, trained by `rlflow
    train-model-free` and evaluated, under `python` in subprocesses."""
    out = {}
    for seed in seeds:
        with tempfile.TemporaryDirectory() as tmp:
            run = Path(tmp) / "run"
            subprocess.run([python, "-m", "rlflow", "train-model-free", "--run", str(run), "--graphs", *graphs,
                            "--real-steps", str(real_steps), "--horizon", str(horizon), "--seed", str(seed)],
                           check=True, cwd=tmp, stdout=subprocess.DEVNULL)
            for graph, speedup in evaluate_model_free(python, run, graphs, eval_horizon, Path(tmp)).items():
                out[(graph, seed)] = speedup
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
    parser.add_argument("--model-free-run", type=Path, default=None,
                        help="instead of training it: a run folder whose model-free agent `rlflow "
                             "train-model-free` trained with these graphs, steps and horizon (its seed "
                             "is read from the run)")
    parser.add_argument("--curve-every", type=int, default=0,
                        help="record the deterministic policy's speedup every N training steps")
    parser.add_argument("--observation", choices=("full", "candidates"), default="full",
                        help="full: graph arrays + candidates (the model-free agent's inputs); candidates: "
                             "only the candidates rows and globals (the example's)")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="also write the JSON line here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.torch_threads)

    rows = []
    trained, curves = {}, {}
    for seed in args.seeds:
        curve = (LearningCurve(args.graphs, args.curve_every, args.eval_horizon, args.observation)
                 if args.curve_every else None)
        model, seconds = train(args.graphs, args.real_steps, args.horizon, seed, args.observation, curve)
        if curve is not None:
            curves[seed] = curve.points
        for graph in args.graphs:
            trained[(graph, seed)] = (*play_trained(model, graph, args.eval_horizon, args.observation), seconds)
    free, free_seeds = {}, list(args.seeds)
    if args.model_free_python and args.model_free_run:
        trained_with = json.loads((args.model_free_run / "model_free" / "config.json").read_text())["train"]
        if trained_with["real_steps"] != args.real_steps or trained_with["horizon"] != args.horizon:
            parser.error(f"{args.model_free_run} was trained with real_steps {trained_with['real_steps']} and "
                         f"horizon {trained_with['horizon']}, not {args.real_steps} / {args.horizon}")
        free_seeds = [int(trained_with["seed"])]
        with tempfile.TemporaryDirectory() as tmp:
            for graph, speedup in evaluate_model_free(args.model_free_python, args.model_free_run.resolve(),
                                                      args.graphs, args.eval_horizon, Path(tmp)).items():
                free[(graph, free_seeds[0])] = speedup
    elif args.model_free_python:
        free = model_free_rows(args.model_free_python, args.graphs, args.real_steps, args.horizon,
                               args.eval_horizon, args.seeds)
    for graph in args.graphs:
        ppo = [trained[(graph, s)][0] for s in args.seeds]
        row = {"graph": graph, "real_steps": args.real_steps,
               "sb3_maskable_ppo": float(np.mean(ppo)), "sb3_min": float(np.min(ppo)), "sb3_max": float(np.max(ppo)),
               "sb3_steps": float(np.mean([trained[(graph, s)][1] for s in args.seeds])),
               "train_s": float(np.mean([trained[(graph, s)][2] for s in args.seeds])),
               "model_free": float(np.mean([free[(graph, s)] for s in free_seeds])) if free else "not run",
               "random": baseline(graph, args.eval_horizon, "random"),
               "greedy": baseline(graph, args.eval_horizon, "greedy")}
        rows.append(row)
    columns = ["graph", "real_steps", "sb3_maskable_ppo", "sb3_min", "sb3_max", "model_free", "random", "greedy",
               "sb3_steps", "train_s"]
    extra = {"seeds": args.seeds, "model_free_seeds": free_seeds if free else [], "horizon": args.horizon,
             "eval_horizon": args.eval_horizon,
             "observation": args.observation, "cost_model": "analytic:h100",
             **({"learning_curves": curves} if curves else {})}
    emit("sb3_maskable_ppo", rows, columns, **extra)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"benchmark": "sb3_maskable_ppo", **extra, "rows": rows}) + "\n")


if __name__ == "__main__":
    main()
