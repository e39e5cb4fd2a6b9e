"""Where trained models live in a run folder, and how they are saved and restored.

    runs/<name>/config.json          one section per stage ("vae", "mdnrnn", ...)
    runs/<name>/vae/config.json      {"model": GraphVAEConfig, "training": ..., "data": ...}
    runs/<name>/vae/ckpt-<n>.*       tf.train.Checkpoint(model, optimizer, step)
    runs/<name>/mdnrnn/...           the same for MDNRNN (+ encoded_*.npz: V's posteriors,
                                     best/: the checkpoint of lowest held-out loss)
    runs/<name>/dataset_cache/       the rollouts' train / held-out splits as compact .npz

A stage folder is self-contained: `load_vae(run_dir)` rebuilds GraphVAE from the saved
model config and restores the latest checkpoint.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow as tf

from taso_env.env.features import EDGE_DIM, GLOBAL_DIM, NODE_DIM
from taso_env.errors import TasoEnvError
from taso_env.run_folder import CONFIG_FILE, ConfigMismatchError, RunFolder, write_json  # noqa: F401  (re-exported)
from worldmodel.graph_vae import GraphVAE, GraphVAEConfig
from worldmodel.graphs_tuple import batch_observations, to_graphs_tuple
from worldmodel.mdnrnn import MDNRNN, MDNRNNConfig

VAE_DIR, MDNRNN_DIR = "vae", "mdnrnn"
BEST_DIR = "best"  # <stage>/best/: the checkpoint of lowest held-out loss
DATASET_CACHE_DIR = "dataset_cache"  # compact copies of the rollouts (worldmodel.dataset)
MAX_TO_KEEP = 3


class CheckpointNotFoundError(TasoEnvError, FileNotFoundError):
    """A run folder lacks the trained model (or its config) that was asked for."""


class CheckpointMismatchError(TasoEnvError, ValueError):
    """A checkpoint's variables do not fit the model this rlflow builds: it was trained
    with another observation format (e.g. before operator types were added: the node
    features' width is the number of operator types + 3), another rule set or other
    model sizes."""


def restore_checked(checkpoint: tf.train.Checkpoint, path: str):
    """`checkpoint.restore(path)`, with a variable of another shape reported as a
    CheckpointMismatchError naming the checkpoint, the variable and what to do.

    Returns:
        The restore status (for `expect_partial()` / `assert_existing_objects_matched()`).
    """
    try:
        return checkpoint.restore(path)
    except ValueError as err:
        if "incompatible tensor" not in str(err):
            raise
        raise CheckpointMismatchError(
            f"the checkpoint {path} does not fit this rlflow's model ({err}); it was trained with "
            f"another observation format (node features now {NODE_DIM} wide), rule set or model size: "
            f"retrain that stage with --restart") from err


def prepare_stage(run_dir: str, stage: str, *, restart: bool, resumable: tuple[str, ...] = ("training",),
                  **configs) -> None:
    """Readies runs/<name>/<stage>/ for training (taso_env.run_folder.RunFolder.prepare_stage):
    sections in `resumable` (e.g. the step budget) may change on resume.

    Raises:
        ConfigMismatchError: resuming with other model or data settings.
    """
    RunFolder(run_dir).prepare_stage(stage, configs, restart=restart, resumable=resumable)


def write_metrics(run_dir: str, stage: str, metrics: dict) -> str:
    """Writes runs/<name>/<stage>/metrics.json; returns its path."""
    path = os.path.join(run_dir, stage, "metrics.json")
    write_json(path, metrics)
    return path


def load_stage_config(run_dir: str, stage: str) -> dict:
    """runs/<name>/<stage>/config.json as a dict.

    Raises:
        CheckpointNotFoundError: the file is missing.
    """
    saved = RunFolder(run_dir).stage_config(stage)
    if saved is None:
        raise CheckpointNotFoundError(f"{os.path.join(run_dir, stage, CONFIG_FILE)} is missing; "
                                      f"train the {stage} stage of {run_dir} first")
    return saved


def make_checkpoint(model, optimizer=None, step: tf.Variable | None = None, **extra) -> tf.train.Checkpoint:
    """The checkpoint layout every stage uses (model, and optimizer/step/extra variables
    when training)."""
    parts = {"model": model, **extra}
    if optimizer is not None:
        parts["optimizer"] = optimizer
    if step is not None:
        parts["step"] = step
    return tf.train.Checkpoint(**parts)


def checkpoint_manager(checkpoint: tf.train.Checkpoint, run_dir: str, stage: str) -> tf.train.CheckpointManager:
    return tf.train.CheckpointManager(checkpoint, os.path.join(run_dir, stage), max_to_keep=MAX_TO_KEEP)


def build_vae(vae: GraphVAE) -> None:
    """Creates V's variables with a one-node graph (so a checkpoint restores at once)."""
    one = {"nodes": np.zeros((1, NODE_DIM), np.float32), "edges": np.zeros((0, EDGE_DIM), np.float32),
           "senders": np.zeros(0, np.int32), "receivers": np.zeros(0, np.int32),
           "globals": np.zeros(GLOBAL_DIM, np.float32), "n_node": 1, "n_edge": 0}
    vae(to_graphs_tuple(batch_observations([one])), sample=False)


def build_mdnrnn(model: MDNRNN) -> None:
    """Creates M's variables with one step of a batch of one."""
    z = tf.zeros([1, model.config.latent_dim])
    model.step(z, tf.zeros([1], tf.int32), model.initial_state(1))


def checkpoint_fingerprint(checkpoint_path: str) -> str:
    """"<name>@<hash>" of a checkpoint: its index file holds a checksum of every tensor,
    so a retrained model with the same step number gets another fingerprint."""
    with open(checkpoint_path + ".index", "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:12]
    return f"{os.path.basename(checkpoint_path)}@{digest}"


def _restore(model, folder: str) -> str:
    latest = tf.train.latest_checkpoint(folder)
    if latest is None:
        raise CheckpointNotFoundError(f"no checkpoint under {folder}")
    status = restore_checked(make_checkpoint(model), latest).expect_partial()
    try:
        status.assert_existing_objects_matched()
    except AssertionError as err:
        raise CheckpointMismatchError(
            f"the checkpoint {latest} lacks parts of this rlflow's model (saved by an earlier version, e.g. an M "
            f"without move embeddings): retrain that stage with --restart ({str(err)[:200]})") from err
    return latest


def load_vae(run_dir: str) -> GraphVAE:
    """GraphVAE of runs/<name>/vae/ with its latest checkpoint.

    Raises:
        CheckpointNotFoundError: no config or no checkpoint there.
    """
    vae = GraphVAE(GraphVAEConfig(**load_stage_config(run_dir, VAE_DIR)["model"]))
    build_vae(vae)
    vae.checkpoint_path = _restore(vae, os.path.join(run_dir, VAE_DIR))
    return vae


def load_mdnrnn(run_dir: str, which: str = "best") -> MDNRNN:
    """MDNRNN of runs/<name>/mdnrnn/ with its checkpoint of lowest held-out loss
    (`which="best"`, runs/<name>/mdnrnn/best/; the latest one when training had no
    held-out episodes) or its latest checkpoint (`which="latest"`).

    M overfits the reward of small rollout sets; the best checkpoint is early stopping.

    Raises:
        CheckpointNotFoundError: no config or no checkpoint there.
        ValueError: `which` is neither "best" nor "latest".
    """
    if which not in ("best", "latest"):
        raise ValueError(f"which must be 'best' or 'latest', got {which!r}")
    model = MDNRNN(MDNRNNConfig(**load_stage_config(run_dir, MDNRNN_DIR)["model"]))
    build_mdnrnn(model)
    folder = os.path.join(run_dir, MDNRNN_DIR)
    best = os.path.join(folder, BEST_DIR)
    use_best = which == "best" and tf.train.latest_checkpoint(best) is not None
    model.checkpoint_path = _restore(model, best if use_best else folder)
    return model
