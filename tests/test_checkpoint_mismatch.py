"""A checkpoint that does not fit the model this rlflow builds (trained before operator
types were added, with another rule set or model size) is refused with a typed error
that names it and says what to do, not TensorFlow's shape error from deep inside."""

import os
from dataclasses import asdict

import numpy as np
import pytest
import tensorflow as tf
from graph_nets import graphs

from taso_env.env.features import EDGE_DIM, GLOBAL_DIM, NODE_DIM
from taso_env.run_folder import RunFolder
from worldmodel.checkpoints import VAE_DIR, CheckpointMismatchError, load_vae, make_checkpoint, restore_checked
from worldmodel.graph_vae import GraphVAE, GraphVAEConfig


def _vae_on_nodes_of_width(width: int, config: GraphVAEConfig) -> GraphVAE:
    """V built on one-node graphs whose node features are `width` wide."""
    vae = GraphVAE(config)
    graph = graphs.GraphsTuple(
        nodes=tf.zeros([1, width]), edges=tf.zeros([0, EDGE_DIM]), senders=tf.zeros([0], tf.int32),
        receivers=tf.zeros([0], tf.int32), globals=tf.zeros([1, GLOBAL_DIM]), n_node=tf.constant([1]),
        n_edge=tf.constant([0]))
    vae(graph, sample=False)
    return vae


def test_a_vae_trained_on_fewer_operator_types_is_refused_by_name(tmp_path):
    config = GraphVAEConfig(n_rules=5, latent_dim=4, hidden=16, message_passing_steps=1)
    old = _vae_on_nodes_of_width(NODE_DIM - 3, config)  # as if three op types were added since
    run = str(tmp_path)
    RunFolder(run).prepare_stage(VAE_DIR, {"model": asdict(config)})
    path = make_checkpoint(old).save(os.path.join(run, VAE_DIR, "ckpt"))
    with pytest.raises(CheckpointMismatchError, match=r"ckpt-1.*--restart") as err:
        load_vae(run)
    assert f"node features now {NODE_DIM} wide" in str(err.value) and path.endswith("ckpt-1")


def test_a_fitting_checkpoint_restores(tmp_path):
    config = GraphVAEConfig(n_rules=5, latent_dim=4, hidden=16, message_passing_steps=1)
    saved = _vae_on_nodes_of_width(NODE_DIM, config)
    restored = _vae_on_nodes_of_width(NODE_DIM, config)
    path = make_checkpoint(saved).save(str(tmp_path / "ckpt"))
    restore_checked(make_checkpoint(restored), path).assert_existing_objects_matched()
    for a, b in zip(saved.variables, restored.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_an_m_saved_before_moves_is_refused_by_name(tmp_path):
    """An M checkpoint without the candidate inputs loaded as an M that reads them (no move
    embedding, no taken-reward input): a typed error that says to retrain, not
    TensorFlow's assertion."""
    from worldmodel.checkpoints import MDNRNN_DIR, build_mdnrnn, load_mdnrnn
    from worldmodel.configs import MDNRNNConfig
    from worldmodel.mdnrnn import MDNRNN

    config = MDNRNNConfig(n_rules=5, latent_dim=4, hidden=8, mixtures=2, candidate_inputs=True)
    old = MDNRNN(config)
    build_mdnrnn(old)
    for part in ("_moves", "_move_to_gates", "_move_to_features", "_taken_to_gates", "_taken_to_features"):
        delattr(old, part)  # what an M of the earlier layout saved
    run = str(tmp_path)
    RunFolder(run).prepare_stage(MDNRNN_DIR, {"model": asdict(config)})
    make_checkpoint(old).save(os.path.join(run, MDNRNN_DIR, "ckpt"))
    with pytest.raises(CheckpointMismatchError, match=r"ckpt-1 lacks parts.*--restart"):
        load_mdnrnn(run)
