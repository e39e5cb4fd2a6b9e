"""The learned agents of an evaluation (controller.evaluation): which rows they are, how
each is loaded on a real env, the run folders its row depends on, and the real work that
produced its training data.

- "controller", "controller_random_init", "controller_untrained_world",
  "controller_myopic_world": the dream-trained policy (controller.policy_agent) in the
  variant POLICY_VARIANTS names;
- "controller_lookahead": greedy plus M-guided detours (controller.agent);
- "model_free": the GNN agent trained with PPO on the real env (controller.model_free).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from taso_env.engine import real_work

POLICY_VARIANTS = {"controller": "trained", "controller_random_init": "random_init",
                   "controller_untrained_world": "untrained_world", "controller_myopic_world": "myopic_world"}
"""The rows of the dream-trained policy (controller.policy_agent) and the variant each loads."""
CONTROLLERS = (*POLICY_VARIANTS, "controller_lookahead")  # trained on the run's rollouts (through V and M)
LEARNED = (*CONTROLLERS, "model_free")


def single_threaded_inference() -> bool:
    """Runs TensorFlow's ops on one thread (intra- and inter-op) if its runtime has not
    started yet in this process; whether it took effect. A learned agent's calls are
    small graphs of one observation, where thread pools cost more than they save (the
    controller's nasrnn episode on a 2-core machine: 120 -> 109 ms, V's encoder 3.5 -> 2.5
    ms a call, docs/learned_agents.md); a process that trained first keeps its pools."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime already started
        return False
    return True


def learned_agent(agent: str, run_dir: Path, env, seed: int = 0):
    """The run's trained `agent` (one of LEARNED) as a policy on `env` (TensorFlow
    single-threaded where it can still be: single_threaded_inference); `seed` seeds
    controller_random_init's weights.

    Raises:
        CheckpointNotFoundError: the run lacks what the agent needs (names the command).
    """
    if agent not in LEARNED:
        raise ValueError(f"{agent!r} is not a learned agent; one of {LEARNED}")
    single_threaded_inference()
    if agent in POLICY_VARIANTS:
        from controller.policy_agent import load_policy_agent

        return load_policy_agent(run_dir, env, variant=POLICY_VARIANTS[agent], seed=seed)
    if agent == "controller_lookahead":
        from controller.training import load_lookahead_agent

        return load_lookahead_agent(run_dir, env)
    from controller.model_free import load_model_free_agent

    return load_model_free_agent(run_dir, env)


def checkpoint_folders(agent: str) -> tuple[str, ...]:
    """The run's folders whose checkpoints `agent`'s row depends on (its resume key): a
    policy variant's own folder (controller.training.variant_folder) and V's and M's."""
    if agent == "model_free":
        return ("model_free",)
    if agent == "controller_lookahead":
        return ("controller", "vae", "mdnrnn")
    if agent in POLICY_VARIANTS:
        from controller.training import variant_folder

        return (variant_folder(POLICY_VARIANTS[agent]), "vae", "mdnrnn")
    return ()


def training_env_steps(run_dir: Path | None) -> int | None:
    """Real-environment steps recorded in the run's rollouts (all that V, M and the
    controller were trained on, iterative rounds included)."""
    if run_dir is None or not (run_dir / "rollouts.h5").exists():
        return None
    from taso_env.env.rollouts import RolloutReader

    return RolloutReader(run_dir / "rollouts.h5").total_steps()


def model_free_env_steps(run_dir: Path | None) -> int | None:
    """Real-environment steps the run's model-free agent trained on."""
    path = run_dir / "model_free" / "metrics.json" if run_dir else None
    if path is None or not path.exists():
        return None
    return int(json.loads(path.read_text())["real_env_steps"])


def training_work(agent: str, run_dir: Path | None) -> dict[str, int | None]:
    """The real work that produced `agent`'s training data, as the Row's `training_*`
    fields: every controller row's is that of the run's rollouts (every episode V, M and
    the controller learned from, iterative rounds included; taso_env.env.collection
    records it per episode), model_free's that of its training process (its
    learning-curve evaluations included; training_env_steps are its PPO steps). None
    where not recorded."""
    work: dict | None = None
    if agent in CONTROLLERS and run_dir is not None and (run_dir / "rollouts.h5").exists():
        from taso_env.env.collection import collection_work

        work = collection_work(run_dir / "rollouts.h5")
    elif agent == "model_free" and run_dir is not None and (run_dir / "model_free" / "metrics.json").exists():
        spent = json.loads((run_dir / "model_free" / "metrics.json").read_text()).get("real_work_this_process")
        if isinstance(spent, dict) and set(spent) >= set(real_work.KINDS):
            work = real_work.ledger(spent)
    env_steps = model_free_env_steps(run_dir) if agent == "model_free" else training_env_steps(run_dir)
    return {"training_env_steps": env_steps,
            **{f"training_{column}": work[column] if work else None
               for column in real_work.LEDGER if column != "env_steps"}}


def training_graphs(run_dir: Path | None) -> list[str]:
    if run_dir is None or not (run_dir / "rollouts.h5").exists():
        return []
    from taso_env.env.rollouts import RolloutReader

    return list(json.loads(RolloutReader(run_dir / "rollouts.h5").meta.env_config)["graphs"])



def curves(run_dir: Path | None, rows: list, agents) -> dict[str, list[dict]]:
    """Quality (mean speedup on the training graphs) against real env steps used in
    training: earlier points from each learned agent's curve.json, the last from `rows`."""
    curves: dict[str, list[dict]] = {}
    for agent in (a for a in LEARNED if a in agents):
        path = run_dir / agent / "curve.json" if run_dir else None  # a row with a folder of its own
        points = json.loads(path.read_text()) if path and path.exists() else []
        mine = [r for r in rows if r.agent == agent and r.split == "train"]
        if mine and mine[0].training_env_steps is not None:
            final = {"real_env_steps": mine[0].training_env_steps,
                     "mean_speedup": float(np.mean([r.speedup for r in mine])), "source": "evaluation"}
            points = [p for p in points if p["real_env_steps"] < final["real_env_steps"]] + [final]
        curves[agent] = points
    return curves
