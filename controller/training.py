"""Training the controller inside the dream (PPO), with checkpoints, resume and
TensorBoard. Runs on V and M only: the real environment is never stepped (checked).

    train_controller(run_dir, ControllerTrainConfig()) -> metrics dict

Artefacts under runs/<name>/: controller/ (tf.train.Checkpoint + CheckpointManager,
config.json, start_latents.npy, metrics.json) and tb/controller.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf
from tqdm import tqdm

from controller.configs import ControllerTrainConfig
from controller.policy import Controller, ControllerConfig
from controller.ppo import PPOTrainer
from taso_env.engine import real_work
from taso_env.env.rollouts import RolloutReader, batch_graphs
from taso_env.run_folder import RunFolder, write_json
from worldmodel.checkpoints import CheckpointNotFoundError, load_mdnrnn, load_vae, restore_checked
from worldmodel.dream_env import Dream
from worldmodel.graphs_tuple import to_graphs_tuple

CONTROLLER_DIR = "controller"  # runs/<name>/controller/


def start_latents(vae, rollouts_path: str | Path) -> tuple[np.ndarray, list[str]]:
    """[N, 2, Z] (mu, log_sigma) of the start graph of each distinct graph in the
    rollouts (read from the file: no environment step)."""
    reader = RolloutReader(rollouts_path)
    firsts: dict[str, dict] = {}
    for episode_id in reader.episode_ids:
        ep = reader.episode(episode_id)
        firsts.setdefault(ep.attrs["graph"], ep.graph(0))
    names = sorted(firsts)
    mu, log_sigma = vae.encode(to_graphs_tuple(batch_graphs([firsts[n] for n in names])))
    return np.stack([mu.numpy(), log_sigma.numpy()], axis=1), names


def load_controller(run_dir: str | Path) -> tuple[Controller, ControllerTrainConfig]:
    """The trained controller of a run (latest checkpoint) and its training config."""
    run = RunFolder(run_dir)
    folder = run.stage_dir(CONTROLLER_DIR)
    saved = run.stage_config(CONTROLLER_DIR)
    if saved is None:
        raise CheckpointNotFoundError(f"no trained controller in {folder} (run `rlflow train-controller`)")
    controller = Controller(ControllerConfig(**{**saved["controller"], "hidden": tuple(saved["controller"]["hidden"])}))
    ckpt = tf.train.Checkpoint(controller=controller)
    latest = tf.train.latest_checkpoint(str(folder))
    if latest is None:
        raise CheckpointNotFoundError(f"no controller checkpoint in {folder}")
    restore_checked(ckpt, latest).expect_partial()
    controller(tf.zeros([1, controller.config.obs_dim]), tf.ones([1, controller.config.n_actions], tf.bool))
    return controller, ControllerTrainConfig.from_dict(saved["train"])


def load_lookahead_agent(run_dir: str | Path, env, explore: bool = False):
    """The run's controller as an agent on the real env `env` (controller.agent), with
    the step cost and discount it was trained with in the dream (the detour charge is
    the lookahead's own: see LookaheadConfig)."""
    from controller.agent import ControllerAgent, LookaheadConfig

    controller, config = load_controller(run_dir)
    lookahead = LookaheadConfig(gamma=config.ppo.gamma, step_cost=config.dream.step_cost)
    agent = ControllerAgent(load_vae(run_dir), load_mdnrnn(run_dir), controller, env, lookahead=lookahead,
                            explore=explore)
    agent.warm_up()
    return agent


def train_controller(run_dir: str | Path, config: ControllerTrainConfig, restart: bool = False) -> dict:
    """Trains (or resumes training) the controller of `run_dir` in the dream."""
    run_dir = Path(run_dir)
    folder = run_dir / CONTROLLER_DIR
    vae, mdnrnn = load_vae(run_dir), load_mdnrnn(run_dir)
    latents, graph_names = start_latents(vae, run_dir / "rollouts.h5")
    ccfg = ControllerConfig(obs_dim=latents.shape[2] + int(mdnrnn.config.hidden),
                            n_actions=int(mdnrnn.config.n_rules) + 1, hidden=config.hidden)
    # Resuming may only change the number of updates.
    saved = RunFolder(run_dir).prepare_stage(CONTROLLER_DIR, {"controller": ccfg, "train": config}, restart=restart,
                                     resumable=("train.updates",))
    np.save(folder / "start_latents.npy", latents)

    controller = Controller(ccfg)
    trainer = PPOTrainer(controller, config.ppo)
    step = tf.Variable(0, dtype=tf.int64)
    controller(tf.zeros([1, ccfg.obs_dim]), tf.ones([1, ccfg.n_actions], tf.bool))  # build variables
    ckpt = tf.train.Checkpoint(controller=controller, optimizer=trainer.optimizer, step=step)
    manager = tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=3)
    if manager.latest_checkpoint:
        restore_checked(ckpt, manager.latest_checkpoint)
    writer = tf.summary.create_file_writer(str(RunFolder(run_dir).tensorboard_dir(CONTROLLER_DIR)))
    with writer.as_default():
        table = "| setting | value |\n|---|---|\n" + "\n".join(
            f"| {k} | {v} |" for k, v in _flatten(saved).items())
        tf.summary.text("hparams", table, step=0)

    # Pure dream: any real work in here (env construction, reset or step, an enumeration,
    # a successor look-up, a cost query) raises RealWorkForbiddenError; the ledger's
    # counts are reported.
    before = real_work.counts()
    start = time.perf_counter()
    with real_work.forbidden("controller training in the dream"):
        history = _train_in_dream(vae, mdnrnn, latents, controller, trainer, config, step, manager, writer)
    real = real_work.since(before)
    last = history[-5:] if history else []
    result = {
        "updates": int(step.numpy()), "seconds": time.perf_counter() - start,
        "graphs": graph_names, "real_env_steps_during_training": real["env_step"],
        "real_work_units_during_training": sum(real.values()),
        "real_work_during_training": real,
        "dream_episode_return": float(np.nanmean([m["dream/episode_return"] for m in last])) if last else None,
        "dream_invalid_rate": float(np.mean([m["dream/invalid_rate"] for m in last])) if last else None,
        "policy_traces": trainer.traces,
    }
    write_json(folder / "metrics.json", result)
    return result


def _train_in_dream(vae, mdnrnn, latents, controller, trainer, config, step, manager, writer) -> list[dict]:
    """The PPO loop on the dream (V and M only); returns the per-update metrics."""
    dream = Dream(vae, mdnrnn, latents, config.dream, batch_size=config.ppo.num_dreams,
                  seed=config.seed + int(step.numpy()))
    obs = dream.reset()
    rng = np.random.default_rng([config.seed, int(step.numpy())])
    history = []
    bar = tqdm(range(int(step.numpy()), config.updates), desc="controller (dream PPO)",
               disable=not sys.stderr.isatty())
    for update in bar:
        obs, metrics = trainer.iteration(dream, obs, rng)
        step.assign(update + 1)
        history.append(metrics)
        bar.set_postfix(ret=f"{metrics['dream/episode_return']:.2f}")
        if (update + 1) % config.log_every == 0 or update + 1 == config.updates:
            with writer.as_default():
                for k, v in metrics.items():
                    if np.isfinite(v):
                        tf.summary.scalar(k, v, step=update + 1)
                logits, _ = controller(tf.constant(obs), tf.constant(dream.mask))
                tf.summary.histogram("policy/logits", tf.boolean_mask(logits, dream.mask), step=update + 1)
        if (update + 1) % config.checkpoint_every == 0 or update + 1 == config.updates:
            manager.save(checkpoint_number=update + 1)
    writer.flush()
    return history


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


__all__ = ["ControllerTrainConfig", "load_lookahead_agent", "load_controller", "start_latents", "train_controller"]
