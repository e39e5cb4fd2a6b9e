"""Training M: `train_mdnrnn(run_dir, ...)` encodes runs/<name>/rollouts.h5 with the
trained V (runs/<name>/vae/) and writes runs/<name>/mdnrnn/ and runs/<name>/tb/mdnrnn/.

M uses V's train / held-out split. Every observation is encoded once (mu, log_sigma,
cached in mdnrnn/encoded_{train,held_out}.npz for reruns); each epoch draws fresh z from
those posteriors. Every eval_every steps the held-out metrics go to TensorBoard (eval/*,
a predicted-vs-true reward plot) and the checkpoint of lowest held-out loss is kept in
mdnrnn/best/ (early stopping: M overfits the reward of small rollout sets), which
load_mdnrnn reads. Rerunning resumes; `restart` starts over; a retrained V requires it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from collections.abc import Callable

import numpy as np
import sonnet as snt
import tensorflow as tf

from taso_env.run_folder import RunFolder
from worldmodel import checkpoints, evaluation, summaries
from worldmodel.configs import MDNRNNTrainConfig
from worldmodel.dataset import DataConfig, EncodedEpisodes, EpisodeSet, encode_observations, load_splits
from worldmodel.mdnrnn import MDNRNN, MDNRNNConfig
from worldmodel.tf_utils import TracedFunction, train_step_fn
from worldmodel.training_loop import open_session, run_loop
from worldmodel.vae_training import make_encode_decode

SEQUENCE_FIELDS = ("z", "actions", "next_z", "rewards", "dones", "next_masks", "next_top_rewards", "mask",
                   "next_changed")


@dataclasses.dataclass(frozen=True)
class VAESource:
    """The V checkpoint M's training data came from (checkpoint_fingerprint; a new one
    needs a restart)."""

    vae_checkpoint: str


def sequence_signature(latent_dim: int, n_actions: int, top_locations: int) -> list[tf.TensorSpec]:
    """Specs of M's inputs in SEQUENCE_FIELDS order, any batch size and length."""
    z = tf.TensorSpec([None, None, latent_dim], tf.float32)
    steps = tf.TensorSpec([None, None], tf.float32)
    return [z, tf.TensorSpec([None, None], tf.int32), z, steps, steps,
            tf.TensorSpec([None, None, n_actions], tf.float32),
            tf.TensorSpec([None, None, n_actions, top_locations], tf.float32), steps,
            tf.TensorSpec([None, None, n_actions, top_locations], tf.float32)]


def _signature(model: MDNRNN) -> list[tf.TensorSpec]:
    return sequence_signature(model.config.latent_dim, model.n_actions, model.config.top_locations)


def make_train_step(model: MDNRNN, optimizer: snt.Optimizer, max_grad_norm: float) -> TracedFunction:
    """(z, actions, next_z, rewards, dones, next_masks, next_top_rewards, mask, next_changed) -> losses,
    traced once."""
    step = train_step_fn(model.loss, lambda: model.trainable_variables, optimizer, max_grad_norm)
    return TracedFunction(step, _signature(model))


def make_predict(model: MDNRNN) -> Callable:
    """EncodedEpisodes batch -> numpy predictions for evaluation.mdnrnn_metrics."""

    def run(z, actions, next_z, rewards, dones, next_masks, next_top_rewards, mask, next_changed):
        out = model(z, actions, mask, taken=rewards)  # as in training: M reads the taken candidate's reward
        mixture = model.mixture(out, tau=1.0)
        predicted = {"z_nll": -mixture.log_prob(next_z) / model.config.latent_dim, "z_mean": mixture.mean(),
                     "reward": out.reward, "done_logit": out.done_logit, "mask_logits": out.mask_logits,
                     "slot_logits": out.slot_logits, "slot_rewards": out.slot_rewards}
        if model.config.carry_candidates:
            predicted["changed_logits"] = out.changed_logits
        return predicted

    fn = TracedFunction(run, _signature(model))
    return lambda batch: {k: v.numpy() for k, v in fn(*(batch[f] for f in SEQUENCE_FIELDS)).items()}


def encode_episodes(vae, episodes: EpisodeSet, cache: str, vae_checkpoint: str, progress: bool) -> EncodedEpisodes:
    """V's posteriors of every observation, from `cache` when it holds this V's encoding
    of these episodes (else computed and cached)."""
    if os.path.exists(cache):
        with np.load(cache) as saved:
            if (str(saved["vae_checkpoint"]) == vae_checkpoint
                    and np.array_equal(saved["episode_ids"], episodes.episode_ids)):
                return EncodedEpisodes(episodes, saved["mu"], saved["log_sigma"])
    encode_decode = make_encode_decode(vae)
    mu, log_sigma = encode_observations(episodes, lambda batch: encode_decode(batch)[:2], progress=progress)
    np.savez(cache + ".tmp.npz", mu=mu, log_sigma=log_sigma, episode_ids=episodes.episode_ids,
             vae_checkpoint=vae_checkpoint)
    os.replace(cache + ".tmp.npz", cache)
    return EncodedEpisodes(episodes, mu, log_sigma)


def _evaluate(predict, held_out: EncodedEpisodes | None, baselines: dict, model: MDNRNNConfig, step: int) -> dict:
    """Held-out metrics (with "loss", M's objective), written to TensorBoard; {} without
    held-out episodes."""
    if held_out is None:
        return {}
    metrics = evaluation.mdnrnn_metrics(predict, held_out, baselines, reward_scale=model.reward_scale or 1.0,
                                        slot_reward_loss=model.slot_reward_loss,
                                        changed_weight=model.changed_weight)
    metrics["loss"] = evaluation.mdnrnn_loss(metrics, model)
    summaries.write_scalars("eval", evaluation.public(metrics), step)
    summaries.write_scatter("plots/reward", *metrics["_reward"], step=step)
    return evaluation.public(metrics)


class _BestCheckpoint:
    """Keeps mdnrnn/best/ at the evaluated step of lowest held-out loss (early stopping;
    load_mdnrnn reads it), with that step's metrics in best/metrics.json."""

    def __init__(self, model: MDNRNN, run_dir: str):
        self.folder = os.path.join(run_dir, checkpoints.MDNRNN_DIR, checkpoints.BEST_DIR)
        self.manager = tf.train.CheckpointManager(checkpoints.make_checkpoint(model), self.folder, max_to_keep=1)
        self.loss = tf.Variable(np.inf, dtype=tf.float64, trainable=False, name="best_held_out_loss")

    def update(self, held: dict, step: int) -> None:
        if held and held["loss"] < float(self.loss.numpy()):
            self.loss.assign(held["loss"])
            self.manager.save(checkpoint_number=step)
            checkpoints.write_json(os.path.join(self.folder, "metrics.json"), {"step": step, "held_out": held})

    def metrics(self) -> dict | None:
        path = os.path.join(self.folder, "metrics.json")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)


def train_mdnrnn(run_dir: str, model: MDNRNNConfig, training: MDNRNNTrainConfig, *, restart: bool = False,
                 progress: bool | None = None, log: Callable = print) -> dict:
    """Trains (or resumes training) M on V's encoding of runs/<name>/rollouts.h5.

    Returns:
        {"step", "train" (last logged losses), "history" ([step, total loss] as
        logged by this call), "held_out" (metrics of the last step), "best" ({"step",
        "held_out"} of the checkpoint of lowest held-out loss, which load_mdnrnn reads;
        None without held-out episodes), "sequences_per_s", "traces"}; also written to
        runs/<name>/mdnrnn/metrics.json.

    Raises:
        CheckpointNotFoundError: V is not trained yet.
        ConfigMismatchError: resuming with other settings or another V checkpoint.
        ValueError: M's latent_dim / n_rules differ from V's.

    A model.reward_scale of 0 is replaced by the training rewards' standard deviation.
    """
    progress = sys.stderr.isatty() if progress is None else progress
    vae = checkpoints.load_vae(run_dir)
    if (vae.config.latent_dim, vae.config.n_rules) != (model.latent_dim, model.n_rules):
        raise ValueError(f"M has latent_dim={model.latent_dim}, n_rules={model.n_rules}; V has "
                         f"{vae.config.latent_dim}, {vae.config.n_rules}")
    data = DataConfig(**checkpoints.load_stage_config(run_dir, checkpoints.VAE_DIR)["data"])
    source = VAESource(checkpoints.checkpoint_fingerprint(vae.checkpoint_path))
    train_eps, held_eps, _ = load_splits(os.path.join(run_dir, "rollouts.h5"), data, progress=progress,
                                         cache_dir=os.path.join(run_dir, checkpoints.DATASET_CACHE_DIR))
    recorded = train_eps.top_rewards.shape[2]
    if recorded != model.top_locations:
        raise ValueError(f"M predicts top_locations={model.top_locations} candidates per rule but the rollouts "
                         f"hold {recorded} (the env's top_locations); set them equal")
    if model.reward_scale == 0:
        rewards = train_eps.rewards
        model = dataclasses.replace(model, reward_scale=float(max(rewards.std(), 1e-6)) if rewards.size else 1.0)
    checkpoints.prepare_stage(run_dir, checkpoints.MDNRNN_DIR, restart=restart, model=model,
                              training=training, data=data, source=source)
    cache = os.path.join(run_dir, checkpoints.MDNRNN_DIR, "encoded_{}.npz")
    train = encode_episodes(vae, train_eps, cache.format("train"), source.vae_checkpoint, progress)
    held_out = None
    if held_eps is not None:
        held_out = encode_episodes(vae, held_eps, cache.format("held_out"), source.vae_checkpoint, progress)
    log(f"M: {train.num_episodes} training episodes (length <= {train.actions.shape[1]}), "
        f"{held_out.num_episodes if held_out else 0} held out")

    # Parts: model, optimizer and checkpoint (restored if any), traced step, summaries.
    tf.random.set_seed(training.seed)
    mdn = MDNRNN(model)
    best = _BestCheckpoint(mdn, run_dir)
    session = open_session(mdn, checkpoints.build_mdnrnn, run_dir, checkpoints.MDNRNN_DIR, training, log=log,
                           best_loss=best.loss)
    train_step = make_train_step(mdn, session.optimizer, training.max_grad_norm)
    predict = make_predict(mdn)
    baselines = evaluation.transition_baselines(train)
    batches = train.batches(training.batch_size, np.random.default_rng([training.seed, session.start]))

    def next_batch():
        batch = next(batches)
        return tuple(tf.constant(batch[f]) for f in SEQUENCE_FIELDS), len(batch["z"])

    def evaluate(step: int) -> dict:
        held = _evaluate(predict, held_out, baselines, model, step)
        best.update(held, step)
        return held

    # The loop (worldmodel/training_loop.py): every-N-steps logging, evaluation, saving.
    writer = tf.summary.create_file_writer(str(RunFolder(run_dir).tensorboard_dir(checkpoints.MDNRNN_DIR)))
    with writer.as_default():
        if session.start == 0:
            tf.summary.text("hparams", summaries.hparams_markdown(
                model=model, training=training, data=data, source=source), 0)
        outcome = run_loop(session, training, next_batch, train_step, evaluate, desc="M",
                           rate_name="sequences_per_s", progress=progress)
    result = {"step": int(session.step.numpy()), "train": outcome["losses"], "history": outcome["history"],
              "held_out": outcome["held_out"], "best": best.metrics(),
              "sequences_per_s": outcome["sequences_per_s"], "traces": train_step.traces,
              "vae_checkpoint": source.vae_checkpoint}
    path = checkpoints.write_metrics(run_dir, checkpoints.MDNRNN_DIR, result)
    log(f"M: step {result['step']}; held-out metrics -> {path}")
    return result
