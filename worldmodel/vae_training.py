"""Training V: `train_vae(run_dir, ...)` reads runs/<name>/rollouts.h5 and writes
runs/<name>/vae/ (checkpoints, config.json, metrics.json) and runs/<name>/tb/vae/.

Rerunning resumes from the latest checkpoint (the step budget may grow); `restart`
starts over. TensorBoard: loss/* every log_every steps; eval/* (held-out metrics),
latent histograms and a predicted-vs-true cost-ratio plot every eval_every steps.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import numpy as np
import sonnet as snt
import tensorflow as tf

from taso_env.env.features import NUM_OP_TYPES
from taso_env.run_folder import RunFolder
from worldmodel import checkpoints, evaluation, summaries
from worldmodel.configs import VAETrainConfig
from worldmodel.dataset import DataConfig, EpisodeSet, check_rule_count, load_splits
from worldmodel.graph_vae import GraphVAE, GraphVAEConfig
from worldmodel.graphs_tuple import graphs_tuple_signature, to_graphs_tuple
from worldmodel.tf_utils import TracedFunction, train_step_fn
from worldmodel.training_loop import open_session, run_loop


def target_signature(n_actions: int) -> dict[str, tf.TensorSpec]:
    """tf.TensorSpecs of V's targets (worldmodel/targets.py) for any batch size."""
    return {"cost": tf.TensorSpec([None, 2], tf.float32),
            "histogram": tf.TensorSpec([None, NUM_OP_TYPES], tf.float32),
            "counts": tf.TensorSpec([None, n_actions], tf.float32),
            "mask": tf.TensorSpec([None, n_actions], tf.float32)}


def make_train_step(vae: GraphVAE, optimizer: snt.Optimizer, max_grad_norm: float) -> TracedFunction:
    """(GraphsTuple, targets) -> losses, one traced graph for every batch size."""
    step = train_step_fn(vae.loss, lambda: vae.trainable_variables, optimizer, max_grad_norm)
    return TracedFunction(step, [graphs_tuple_signature(), target_signature(vae.n_actions)])


def make_encode_decode(vae: GraphVAE) -> Callable:
    """batch dict -> (mu, log_sigma, decode(mu)) as numpy (for evaluation and encoding)."""

    def run(graphs):
        mu, log_sigma = vae.encode(graphs)
        return mu, log_sigma, vae.decode(mu)

    fn = TracedFunction(run, [graphs_tuple_signature()])

    def call(batch: dict):
        mu, log_sigma, recon = fn(to_graphs_tuple(batch))
        return mu.numpy(), log_sigma.numpy(), {k: v.numpy() for k, v in recon.items()}

    return call


def _evaluate(encode_decode, held_out: EpisodeSet | None, means, training: VAETrainConfig, step: int) -> dict:
    """Held-out metrics, written to TensorBoard; {} without held-out episodes."""
    if held_out is None:
        return {}
    metrics = evaluation.vae_metrics(encode_decode, held_out, means, max_observations=training.eval_observations)
    summaries.write_scalars("eval", evaluation.public(metrics), step)
    summaries.write_scatter("plots/cost_ratio", *metrics["_cost_ratio"], step=step)
    sample = held_out.graphs(np.arange(min(held_out.num_observations, 256)))
    mu, log_sigma, _ = encode_decode(sample)
    tf.summary.histogram("latent/mu", mu, step=step)
    tf.summary.histogram("latent/log_sigma", log_sigma, step=step)
    return evaluation.public(metrics)


def train_vae(run_dir: str, model: GraphVAEConfig, training: VAETrainConfig, data: DataConfig, *,
              restart: bool = False, progress: bool | None = None, log: Callable = print) -> dict:
    """Trains (or resumes training) V on runs/<name>/rollouts.h5.

    Returns:
        {"step", "train" (last logged losses), "history" ([step, total loss] as
        logged by this call), "held_out" (metrics), "graphs_per_s",
        "traces"}; also written to runs/<name>/vae/metrics.json.

    Raises:
        ConfigMismatchError: resuming with another model or data config.
        ValueError: model.n_rules differs from the rollouts' rule set.
    """
    progress = sys.stderr.isatty() if progress is None else progress
    rollouts = os.path.join(run_dir, "rollouts.h5")
    check_rule_count(rollouts, model.n_rules)
    checkpoints.prepare_stage(run_dir, checkpoints.VAE_DIR, restart=restart, model=model, training=training,
                              data=data)
    train, held_out, _ = load_splits(rollouts, data, progress=progress,
                                     cache_dir=os.path.join(run_dir, checkpoints.DATASET_CACHE_DIR))
    log(f"V: {train.num_episodes} training episodes ({train.num_observations} graphs), "
        f"{held_out.num_episodes if held_out else 0} held out")

    # Parts: model, optimizer and checkpoint (restored if any), traced step, summaries.
    tf.random.set_seed(training.seed)
    vae = GraphVAE(model)
    session = open_session(vae, checkpoints.build_vae, run_dir, checkpoints.VAE_DIR, training, log=log)
    train_step = make_train_step(vae, session.optimizer, training.max_grad_norm)
    encode_decode = make_encode_decode(vae)
    means = evaluation.training_means(train)
    batches = train.vae_batches(training.batch_size, np.random.default_rng([training.seed, session.start]))

    def next_batch():
        graphs, targets = next(batches)
        return (to_graphs_tuple(graphs), {k: tf.constant(v) for k, v in targets.items()}), len(graphs["n_node"])

    # The loop (worldmodel/training_loop.py): every-N-steps logging, evaluation, saving.
    writer = tf.summary.create_file_writer(str(RunFolder(run_dir).tensorboard_dir(checkpoints.VAE_DIR)))
    with writer.as_default():
        if session.start == 0:
            tf.summary.text("hparams", summaries.hparams_markdown(model=model, training=training, data=data), 0)
        outcome = run_loop(session, training, next_batch, train_step,
                           lambda step: _evaluate(encode_decode, held_out, means, training, step),
                           desc="V", rate_name="graphs_per_s", progress=progress)
    result = {"step": int(session.step.numpy()), "train": outcome["losses"], "history": outcome["history"],
              "held_out": outcome["held_out"], "graphs_per_s": outcome["graphs_per_s"],
              "traces": train_step.traces}
    path = checkpoints.write_metrics(run_dir, checkpoints.VAE_DIR, result)
    log(f"V: step {result['step']}; held-out metrics -> {path}")
    return result
