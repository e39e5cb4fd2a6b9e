"""Iterative training (the World Models loop): after the first controller, each round
collects new real episodes with the current controller's policy (sampled from it, so
that M learns what follows the rewrites the policy takes: a dream trained on other
policies' episodes alone is exploited where it is wrong), retrains V on all rollouts
(resuming, with as many more steps as before) and M on them afresh (its inputs are V's
latents, which moved), then trains the controller afresh in the new dream (the new
episodes may widen its rule vocabulary). After every round the controller is played once on each
training graph (real env; these evaluation steps are not training data) and the point
(real env steps in the rollouts so far, mean speedup) is appended to
runs/<name>/controller/curve.json: the controller's learning curve.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

from controller.policy_agent import load_policy_agent
from controller.training import ControllerTrainConfig, train_controller
from taso_env.env.collection import play_counted
from taso_env.env.rewrite_env import EnvConfig, GraphRewriteEnv, load_graph
from taso_env.env.rollouts import RolloutReader, RolloutWriter
from taso_env.run_folder import write_json
from worldmodel.checkpoints import load_stage_config


def collect_with_controller(run_dir: Path, episodes: int, seed: int) -> int:
    """Appends `episodes` real episodes played by the run's controller to its rollouts
    (same environment settings as the file's); returns the real steps taken."""
    path = run_dir / "rollouts.h5"
    meta = RolloutReader(path).meta
    saved = json.loads(meta.env_config)
    env = GraphRewriteEnv(config=EnvConfig(**{**saved, "graphs": tuple(saved["graphs"])}))
    agent = load_policy_agent(run_dir, env, sample=True)
    steps = 0
    with RolloutWriter(path, meta) as writer:
        first = max(writer.episode_ids, default=-1) + 1
        for k in range(episodes):
            episode_id = first + k
            graph = env.graph_names[episode_id % len(env.graph_names)]
            packed = play_counted(env, agent, seed + episode_id, episode_id=episode_id, meta=meta,
                                  policy_name="controller", options={"graph": graph})  # its steps are real work
            writer.write(episode_id, packed)
            steps += int(packed["attrs"]["total_steps"])
    return steps


def controller_quality(run_dir: Path, horizon: int = 200, seed: int = 0) -> dict:
    """{real_env_steps: steps in the rollouts, mean_speedup: of the controller (best graph
    of one episode) over the rollouts' graphs}, played on the real env."""
    from controller.evaluation import episode_graph
    from taso_env.engine.cost_model import make_cost_model

    reader = RolloutReader(run_dir / "rollouts.h5")
    saved = json.loads(reader.meta.env_config)
    model = make_cost_model(saved["cost_model"])  # the rollouts' model prices the speedups
    speedups, agent = {}, None
    for graph in saved["graphs"]:
        env = GraphRewriteEnv(graph, horizon=horizon, cost_model=saved["cost_model"])
        agent = agent or load_policy_agent(run_dir, env)  # loaded once, moved from graph to graph
        agent.env = env.unwrapped
        best, _, _ = episode_graph(env, agent, seed)
        speedups[env.graph_names[0]] = load_graph(graph).cost(model) / best.cost(model)
    return {"real_env_steps": reader.total_steps(), "mean_speedup": float(sum(speedups.values()) / len(speedups)),
            "speedups": speedups}


StageRunner = Callable[[str, Sequence[str], Path], object]
"""`run_stage(command, argv, cwd)`: runs `rlflow <command> <argv>` in a child process
(`rlflow.pipeline.run_stage`; passed in by the command line, which sits above this
package)."""


def _retrain(run_dir: Path, command: str, stage: str, run_stage: StageRunner, restart: bool = False) -> None:
    """A stage's training again, as `rlflow <command>` in a child process (TensorFlow
    state of this process stays as it is): resumed with twice its steps, or with
    `restart` from scratch with its steps (M, whose inputs — V's latents — changed)."""
    steps = int(load_stage_config(str(run_dir), stage)["training"]["steps"])
    run_dir = run_dir.resolve()
    extra = ["--steps", str(steps), "--restart"] if restart else ["--steps", str(2 * steps)]
    run_stage(command, ["--run", str(run_dir), *extra], cwd=run_dir)


def iterate(run_dir: str | Path, config: ControllerTrainConfig, iterations: int, episodes_per_iteration: int,
            restart: bool = False, *, run_stage: StageRunner) -> dict:
    """Runs `iterations` rounds; returns per-round results. `run_stage` retrains V and M
    in child processes (`rlflow.pipeline.run_stage`)."""
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    run_dir = Path(run_dir)
    rounds = [train_controller(run_dir, config, restart=restart)]
    curve = [controller_quality(run_dir)]
    write_json(run_dir / "controller" / "curve.json", curve)
    for k in range(1, iterations):
        real_steps = collect_with_controller(run_dir, episodes_per_iteration, seed=config.seed + 100_000 * k)
        _retrain(run_dir, "train-vae", "vae", run_stage)
        _retrain(run_dir, "train-mdnrnn", "mdnrnn", run_stage, restart=True)
        # afresh: the new episodes may widen C's rule vocabulary (its slots), and the dream moved
        result = train_controller(run_dir, config, restart=True)
        rounds.append({**result, "collected_real_steps": real_steps})
        curve.append(controller_quality(run_dir))
        write_json(run_dir / "controller" / "curve.json", curve)
    return {"rounds": rounds}
