"""Training the controller inside the dream (PPO), with checkpoints, resume and
TensorBoard. Runs on V and M only: the real environment is never stepped (checked).

    train_controller(run_dir, ControllerTrainConfig(), variant="trained") -> metrics dict

Variants (each its own folder under runs/<name>/, VARIANT_FOLDERS):
    trained          C trained in the dream of the run's V and M      controller/
    untrained_world  C trained in the dream of V and M with random
                     weights (saved beside it, world/): what the world
                     model's learning adds                            controller_untrained_world/
    myopic_world     C trained with discount 0: what planning adds    controller_myopic_world/
    random_init      C with random weights, never trained (no folder
                     of its own: seeded from the trained run's config) controller/

Artefacts of a variant's folder: tf.train.Checkpoint + CheckpointManager, config.json,
start_latents.npy, start_candidates.npy (where dreams start), metrics.json, and
tb/<folder>.
"""

from __future__ import annotations

import dataclasses
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
from worldmodel.checkpoints import (
    MDNRNN_DIR,
    VAE_DIR,
    CheckpointNotFoundError,
    build_mdnrnn,
    build_vae,
    load_mdnrnn,
    load_stage_config,
    load_vae,
    restore_checked,
)
from worldmodel.configs import GraphVAEConfig, MDNRNNConfig
from worldmodel.dataset import MissingCandidateRewardsError
from worldmodel.dream_env import Dream
from worldmodel.graph_vae import GraphVAE
from worldmodel.graphs_tuple import to_graphs_tuple
from worldmodel.mdnrnn import MDNRNN

CONTROLLER_DIR = "controller"  # runs/<name>/controller/
VARIANT_FOLDERS = {"trained": CONTROLLER_DIR, "random_init": CONTROLLER_DIR,
                   "untrained_world": "controller_untrained_world", "myopic_world": "controller_myopic_world"}
UNTRAINED_WORLD_DIR = "world"  # <variant folder>/world/: the random V and M of untrained_world


def variant_folder(variant: str) -> str:
    """The folder (under the run) of a controller variant."""
    if variant not in VARIANT_FOLDERS:
        raise ValueError(f"unknown controller variant {variant!r}; choose from {sorted(VARIANT_FOLDERS)}")
    return VARIANT_FOLDERS[variant]


def dream_starts(vae, rollouts_path: str | Path, recorded: int = 0, seed: int = 0
                 ) -> tuple[np.ndarray, np.ndarray, list[str], tuple[int, ...]]:
    """Where dreams start, read from the rollouts (no environment step): the start graph
    of each distinct graph and, with `recorded` > 0, that many more recorded observations
    drawn uniformly (seeded) from every step of every episode, so that C also meets real
    states deep in an episode (local optima among them) with their real candidates.

    Returns:
        V's [N, 2, Z] (mu, log_sigma), the candidates' rewards [N, n_rules + 1, L] the env
        recorded there, the graph names, and the rule vocabulary (rules valid somewhere in
        the rollouts, stop excluded: all a world model trained on them can dream of).
    """
    reader = RolloutReader(rollouts_path)
    firsts: dict[str, tuple[dict, np.ndarray]] = {}
    seen = np.zeros(reader.meta.n_rules, bool)
    episodes = []
    for episode_id in reader.episode_ids:
        ep = reader.episode(episode_id)
        if "infos/top_rewards" not in ep.arrays:
            raise MissingCandidateRewardsError(
                f"{rollouts_path}: episode {episode_id} has no infos/top_rewards (recorded before the env gave "
                "the candidates' rewards); collect the rollouts again (rlflow collect --restart)")
        firsts.setdefault(ep.attrs["graph"], (ep.graph(0), ep["infos/top_rewards"][0]))
        seen |= ep["infos/xfer_mask"][:, :-1].any(axis=0)
        if recorded:
            episodes.append(ep)
    if not seen.any():
        raise ValueError(f"{rollouts_path}: no rule is valid in any step of the rollouts; nothing to learn")
    names = sorted(firsts)
    graphs = [firsts[n][0] for n in names]
    candidates = [firsts[n][1] for n in names]
    if recorded:
        steps = [(e, t) for e, ep in enumerate(episodes) for t in range(1, ep.num_steps + 1)]
        rng = np.random.default_rng(seed)
        for k in rng.choice(len(steps), size=min(recorded, len(steps)), replace=False) if steps else []:
            e, t = steps[int(k)]
            graphs.append(episodes[e].graph(t))
            candidates.append(episodes[e]["infos/top_rewards"][t])
    mu, log_sigma = [], []
    for start in range(0, len(graphs), 256):
        m, ls = vae.encode(to_graphs_tuple(batch_graphs(graphs[start:start + 256])))
        mu.append(m.numpy())
        log_sigma.append(ls.numpy())
    latents = np.stack([np.concatenate(mu), np.concatenate(log_sigma)], axis=1)
    return latents, np.stack(candidates).astype(np.float32), names, tuple(int(r) for r in np.flatnonzero(seen))


def _untrained_world(run_dir: Path, folder: Path, seed: int, create: bool):
    """V and M with the run's configurations and random weights (seeded), saved in
    `folder`/world on creation and read back from there afterwards."""
    tf.random.set_seed(seed)
    vae = GraphVAE(GraphVAEConfig(**load_stage_config(str(run_dir), VAE_DIR)["model"]))
    build_vae(vae)
    mdnrnn = MDNRNN(MDNRNNConfig(**load_stage_config(str(run_dir), MDNRNN_DIR)["model"]))
    build_mdnrnn(mdnrnn)
    ckpt = tf.train.Checkpoint(vae=vae, mdnrnn=mdnrnn)
    saved = tf.train.latest_checkpoint(str(folder / UNTRAINED_WORLD_DIR))
    if saved is not None:
        restore_checked(ckpt, saved).expect_partial()
    elif create:
        ckpt.save(str(folder / UNTRAINED_WORLD_DIR / "world"))
    else:
        raise CheckpointNotFoundError(f"no untrained world model in {folder / UNTRAINED_WORLD_DIR} "
                                      "(run `rlflow train-controller --variant untrained_world`)")
    return vae, mdnrnn


def world_model(run_dir: str | Path, variant: str = "trained", create: bool = False):
    """(V, M) a variant is trained with and acts through: the run's, or for
    untrained_world the random ones saved beside that controller."""
    run_dir = Path(run_dir)
    if variant == "untrained_world":
        config = RunFolder(run_dir).stage_config(variant_folder(variant))
        seed = ControllerTrainConfig.from_dict(config["train"]).seed if config else 0
        return _untrained_world(run_dir, run_dir / variant_folder(variant), seed, create)
    return load_vae(str(run_dir)), load_mdnrnn(str(run_dir))


def _controller_config(vae, mdnrnn, hidden) -> ControllerConfig:
    """C over every rule's slots: the rules the rollouts never showed keep a zero
    embedding and are judged by their candidates' rewards (controller.policy)."""
    return ControllerConfig(obs_dim=int(vae.config.latent_dim) + int(mdnrnn.config.hidden),
                            n_rules=int(mdnrnn.config.n_rules), rules=None,
                            top_locations=int(mdnrnn.config.top_locations), hidden=tuple(hidden))


def load_controller(run_dir: str | Path, variant: str = "trained", seed: int = 0
                    ) -> tuple[Controller, ControllerTrainConfig]:
    """A variant's controller (latest checkpoint; random_init: the trained run's
    architecture with random weights from `seed`) and its training config."""
    run = RunFolder(run_dir)
    folder = run.stage_dir(variant_folder(variant))
    saved = run.stage_config(variant_folder(variant))
    command = "rlflow train-controller" + ("" if variant in ("trained", "random_init") else f" --variant {variant}")
    if saved is None:
        raise CheckpointNotFoundError(f"no trained controller in {folder} (run `{command}`)")
    ccfg = saved["controller"]
    rules = ccfg.get("rules")
    controller = Controller(ControllerConfig(**{**ccfg, "hidden": tuple(ccfg["hidden"]),
                                                "rules": None if rules is None else tuple(rules)}))
    if variant == "random_init":
        tf.random.set_seed(seed)
        controller.build()
        return controller, ControllerTrainConfig.from_dict(saved["train"])
    ckpt = tf.train.Checkpoint(controller=controller)
    latest = tf.train.latest_checkpoint(str(folder))
    if latest is None:
        raise CheckpointNotFoundError(f"no controller checkpoint in {folder} (run `{command}`)")
    restore_checked(ckpt, latest).expect_partial()
    controller.build()
    return controller, ControllerTrainConfig.from_dict(saved["train"])


def load_lookahead_agent(run_dir: str | Path, env, explore: bool = False):
    """The lookahead search (controller.agent: greedy + M-guided detours the real engine
    verifies) with the run's V and M and the trained controller's value, with the step
    cost and discount it was trained with in the dream (the detour charge is the
    lookahead's own: see LookaheadConfig)."""
    from controller.agent import ControllerAgent, LookaheadConfig

    controller, config = load_controller(run_dir)
    lookahead = LookaheadConfig(gamma=config.ppo.gamma, step_cost=config.dream.step_cost)
    agent = ControllerAgent(load_vae(run_dir), load_mdnrnn(run_dir), controller, env, lookahead=lookahead,
                            explore=explore)
    agent.warm_up()
    return agent


def train_controller(run_dir: str | Path, config: ControllerTrainConfig, restart: bool = False,
                     variant: str = "trained") -> dict:
    """Trains (or resumes training) a controller variant of `run_dir` in the dream."""
    if variant == "random_init":
        raise ValueError("the random_init controller is not trained: it is the trained run's architecture "
                         "with random weights (evaluate it as controller_random_init)")
    if variant == "myopic_world":
        config = dataclasses.replace(config, ppo=dataclasses.replace(config.ppo, gamma=0.0))
    run_dir = Path(run_dir)
    name = variant_folder(variant)
    folder = run_dir / name
    vae, mdnrnn = load_vae(str(run_dir)), load_mdnrnn(str(run_dir))  # the run's: their configs are checked
    latents, candidates, graph_names, vocabulary = dream_starts(vae, run_dir / "rollouts.h5",
                                                                config.recorded_starts, config.seed)
    ccfg = _controller_config(vae, mdnrnn, config.hidden)
    # Resuming may only change the number of updates.
    saved = RunFolder(run_dir).prepare_stage(name, {"controller": ccfg, "train": config, "variant": variant},
                                             restart=restart, resumable=("train.updates",))
    if variant == "untrained_world":
        vae, mdnrnn = _untrained_world(run_dir, folder, config.seed, create=True)
        latents, candidates, _, _ = dream_starts(vae, run_dir / "rollouts.h5", config.recorded_starts, config.seed)
    np.save(folder / "start_latents.npy", latents)
    np.save(folder / "start_candidates.npy", candidates)

    controller = Controller(ccfg)
    trainer = PPOTrainer(controller, config.ppo)
    step = tf.Variable(0, dtype=tf.int64)
    controller.build()
    ckpt = tf.train.Checkpoint(controller=controller, optimizer=trainer.optimizer, step=step)
    manager = tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=3)
    if manager.latest_checkpoint:
        restore_checked(ckpt, manager.latest_checkpoint)
    writer = tf.summary.create_file_writer(str(RunFolder(run_dir).tensorboard_dir(name)))
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
        history = _train_in_dream(vae, mdnrnn, (latents, candidates), controller, trainer, config, step, manager,
                                  writer)
    real = real_work.since(before)
    last = history[-5:] if history else []
    result = {
        "variant": variant, "updates": int(step.numpy()), "seconds": time.perf_counter() - start,
        "graphs": graph_names, "rules_in_rollouts": list(vocabulary),
        "real_env_steps_during_training": real["env_step"],
        "real_work_units_during_training": sum(real.values()),
        "real_work_during_training": real,
        "dream_episode_return": float(np.nanmean([m["dream/episode_return"] for m in last])) if last else None,
        "dream_invalid_rate": float(np.mean([m["dream/invalid_rate"] for m in last])) if last else None,
        "dream_stop_rate": float(np.mean([m["dream/stop_rate"] for m in last])) if last else None,
        "policy_traces": trainer.traces,
    }
    write_json(folder / "metrics.json", result)
    return result


def _train_in_dream(vae, mdnrnn, starts, controller, trainer, config, step, manager, writer) -> list[dict]:
    """The PPO loop on the dream (V and M only); returns the per-update metrics."""
    dream = Dream(vae, mdnrnn, *starts, config.dream, batch_size=config.ppo.num_dreams,
                  seed=config.seed + int(step.numpy()), rules=controller.config.vocabulary)
    state = dream.reset()
    rng = np.random.default_rng([config.seed, int(step.numpy())])
    history = []
    bar = tqdm(range(int(step.numpy()), config.updates), desc="controller (dream PPO)",
               disable=not sys.stderr.isatty())
    for update in bar:
        state, metrics = trainer.iteration(dream, state, rng)
        step.assign(update + 1)
        history.append(metrics)
        bar.set_postfix(ret=f"{metrics['dream/episode_return']:.2f}")
        if (update + 1) % config.log_every == 0 or update + 1 == config.updates:
            with writer.as_default():
                for k, v in metrics.items():
                    if np.isfinite(v):
                        tf.summary.scalar(k, v, step=update + 1)
                logits, _ = controller(tf.constant(state[0]), tf.constant(state[1]), tf.constant(dream.mask))
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


__all__ = ["VARIANT_FOLDERS", "ControllerTrainConfig", "dream_starts", "load_controller", "load_lookahead_agent",
           "train_controller", "variant_folder", "world_model"]
