"""worldmodel: V and M shapes and maths, padding, hidden-state resets, temperature, trace
counts, the dataset split, and smoke runs of both training stages and both scripts
(train, then resume) on a tiny rollout file."""

import functools
import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import taso_env as te
from taso_env.env import features
from taso_env.env.collection import CollectConfig, collect
from taso_env.env.episode import run_episode
from taso_env.env.features import NUM_OP_TYPES
from taso_env.env.policies import RandomPolicy
from taso_env.env.rewrite_env import GraphRewriteEnv
from taso_env.env.rollouts import RolloutReader
from worldmodel import (
    MDNRNN,
    GraphVAE,
    GraphVAEConfig,
    MDNRNNConfig,
    batch_observations,
    load_mdnrnn,
    load_vae,
    to_graphs_tuple,
)
from worldmodel.checkpoints import CheckpointNotFoundError, ConfigMismatchError
from worldmodel.dataset import DataConfig, EncodedEpisodes, EpisodeSet, is_held_out, load_splits
from worldmodel.evaluation import r2_score
from worldmodel.mdnrnn import MDNOutput
from worldmodel.mdnrnn_training import SEQUENCE_FIELDS, MDNRNNTrainConfig, train_mdnrnn
from worldmodel.mdnrnn_training import make_train_step as make_m_step
from worldmodel.moves import move
from worldmodel.summaries import scatter_image
from worldmodel.targets import observation_targets
from worldmodel.tf_utils import init_optimizer
from worldmodel.vae_training import VAETrainConfig, make_train_step, train_vae

REPO = Path(__file__).resolve().parent.parent
N_RULES = len(te.rules.default())  # derived from the rule set, never hard-coded
TINY_VAE = dict(latent_dim=4, hidden=16, message_passing_steps=1)
TINY_M = dict(latent_dim=4, hidden=16, mixtures=2)


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory) -> str:
    """A tiny rollout file: 12 episodes of squeezenet / nasrnn, horizon 6."""
    out = tmp_path_factory.mktemp("run") / "rollouts.h5"
    collect(CollectConfig(graphs=("squeezenet", "nasrnn"), episodes=12, out=str(out), workers=0, horizon=6,
                          stop_prob=0.1), progress=False)
    return str(out)


@pytest.fixture(scope="module")
def episodes():
    env = GraphRewriteEnv(["squeezenet", "nasrnn"], horizon=3)
    return [run_episode(env, RandomPolicy(), seed=s) for s in range(2)]


def _copy_run(rollouts: str, tmp_path: Path) -> str:
    """A fresh run folder whose rollouts are the shared tiny file."""
    run = tmp_path / "run"
    run.mkdir()
    src = Path(rollouts)
    (run / "rollouts.h5").symlink_to(src)
    (run / "rollouts.h5.episodes").symlink_to(src.parent / "rollouts.h5.episodes")
    return str(run)


# -- graphs_tuple and targets ----------------------------------------------------------
def test_batch_observations_drops_padding_and_offsets_indices(episodes):
    a, b = episodes[0].observations[0], episodes[1].observations[0]
    batch = batch_observations([a, b])
    na, nb = features.count(a, "n_node"), features.count(b, "n_node")
    assert batch["nodes"].shape[0] == na + nb < a["nodes"].shape[0] + b["nodes"].shape[0]
    ea = features.count(a, "n_edge")
    np.testing.assert_array_equal(batch["senders"][:ea], a["senders"][:ea])
    np.testing.assert_array_equal(batch["senders"][ea:], b["senders"][: features.count(b, "n_edge")] + na)
    assert to_graphs_tuple(batch).nodes.shape == (na + nb, a["nodes"].shape[1])


def test_to_graphs_tuple_rejects_indices_outside_the_nodes(episodes):
    batch = batch_observations([episodes[0].observations[0]])
    batch["receivers"] = batch["receivers"].copy()
    batch["receivers"][0] = len(batch["nodes"])
    with pytest.raises(ValueError, match="receivers"):
        to_graphs_tuple(batch)


def test_targets_of_an_observation(episodes):
    obs, info = episodes[0].observations[0], episodes[0].infos[0]
    t = observation_targets(obs, info)
    assert t["histogram"].shape == (1, NUM_OP_TYPES)
    assert t["histogram"].sum() == pytest.approx(1.0)
    assert t["histogram"][0, 0] == 0 and t["histogram"][0, 1] == 0  # Input and Weight excluded
    assert t["cost"][0, 0] == pytest.approx(obs["globals"][0])
    assert t["cost"][0, 1] == pytest.approx(np.log(info["cost"]), rel=1e-5)
    assert t["mask"][0, -1] == 1.0 and t["counts"][0, -1] == pytest.approx(np.log(2.0))
    np.testing.assert_allclose(np.expm1(t["counts"][0]), info["location_mask"].sum(-1), atol=1e-3)


# -- V --------------------------------------------------------------------------------
def test_vae_shapes_and_config_validation(episodes):
    vae = GraphVAE(GraphVAEConfig(n_rules=N_RULES, **TINY_VAE))
    out = vae(to_graphs_tuple(batch_observations(episodes[0].observations)))
    b = len(episodes[0].observations)
    assert out.z.shape == out.mu.shape == out.log_sigma.shape == (b, 4)
    assert {k: v.shape for k, v in out.recon.items()} == {
        "cost": (b, 2), "histogram": (b, NUM_OP_TYPES), "counts": (b, N_RULES + 1), "mask_logits": (b, N_RULES + 1)}
    np.testing.assert_allclose(out.recon["histogram"].numpy().sum(-1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="latent_dim"):
        GraphVAEConfig(n_rules=N_RULES, latent_dim=0)
    with pytest.raises(ValueError, match="beta"):
        GraphVAEConfig(n_rules=N_RULES, beta=-1.0)


def test_padding_and_other_graphs_do_not_influence_the_embedding(episodes):
    vae = GraphVAE(GraphVAEConfig(n_rules=N_RULES, **TINY_VAE))
    obs = episodes[0].observations[0]
    mu, _ = vae.encode(to_graphs_tuple(batch_observations([obs])))
    garbage = {k: np.array(v, copy=True) for k, v in obs.items()}
    n, e = features.count(obs, "n_node"), features.count(obs, "n_edge")
    rng = np.random.default_rng(0)
    garbage["nodes"][n:] = rng.random(garbage["nodes"][n:].shape)
    garbage["edges"][e:] = rng.random(garbage["edges"][e:].shape)
    garbage["senders"][e:] = rng.integers(0, n, len(garbage["senders"]) - e)
    mu_garbage, _ = vae.encode(to_graphs_tuple(batch_observations([garbage])))
    np.testing.assert_allclose(mu_garbage.numpy(), mu.numpy(), rtol=1e-5, atol=1e-6)
    other = episodes[1].observations[-1]
    mu_pair, _ = vae.encode(to_graphs_tuple(batch_observations([other, obs])))
    np.testing.assert_allclose(mu_pair.numpy()[1], mu.numpy()[0], rtol=1e-4, atol=1e-5)
    assert not np.allclose(mu_pair.numpy()[0], mu.numpy()[0])


def test_vae_kl_is_the_closed_form():
    mu = np.array([[0.0, 1.0], [0.5, -2.0]], np.float32)
    log_sigma = np.array([[0.0, -1.0], [0.3, 0.0]], np.float32)
    sigma2 = np.exp(2 * log_sigma)
    expected = 0.5 * np.sum(mu ** 2 + sigma2 - 1 - np.log(sigma2), axis=1)
    np.testing.assert_allclose(GraphVAE.kl_divergence(mu, log_sigma).numpy(), expected, rtol=1e-6)
    assert expected[0] > 0 and GraphVAE.kl_divergence(np.zeros((1, 3)), np.zeros((1, 3))).numpy()[0] == 0


# -- M --------------------------------------------------------------------------------
def logsumexp(x: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    out = top + np.log(np.sum(np.exp(x - top), axis=axis, keepdims=True))
    return out if keepdims else np.squeeze(out, axis)


def _random_output(rng, b=3, k=4, z=5) -> MDNOutput:
    f = lambda *s: tf.constant(rng.normal(size=s).astype(np.float32))  # noqa: E731
    return MDNOutput(logits=f(b, k), mu=f(b, k, z), log_sigma=0.3 * f(b, k, z), reward=f(b),
                     done_logit=f(b), mask_logits=f(b, N_RULES + 1), slot_logits=f(b, N_RULES + 1, 4),
                     slot_rewards=f(b, N_RULES + 1, 4), changed_logits=f(b, N_RULES + 1, 4))


@pytest.mark.parametrize("tau", [1.0, 0.5, 2.0])
def test_mixture_log_likelihood_matches_a_hand_computation(tau):
    rng = np.random.default_rng(1)
    out = _random_output(rng)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, latent_dim=5, mixtures=4))
    got = model.mixture(out, tau).log_prob(x).numpy()
    logits, mu = out.logits.numpy() / tau, out.mu.numpy()
    sigma = np.exp(out.log_sigma.numpy()) * np.sqrt(tau)
    log_w = logits - logsumexp(logits, axis=1, keepdims=True)
    log_n = np.sum(-0.5 * ((x[:, None] - mu) / sigma) ** 2 - np.log(sigma) - 0.5 * np.log(2 * np.pi), axis=2)
    np.testing.assert_allclose(got, logsumexp(log_w + log_n, axis=1), rtol=1e-4)


def test_tau_sharpens_the_mixture_and_scales_the_variance():
    model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, latent_dim=2, mixtures=3))
    out = MDNOutput(logits=tf.constant([[2.0, 0.0, -1.0]]), mu=tf.constant([[[0.0, 0.0], [5.0, 5.0], [9.0, 9.0]]]),
                    log_sigma=tf.fill([1, 3, 2], -1.0), reward=tf.zeros([1]), done_logit=tf.zeros([1]),
                    mask_logits=tf.zeros([1, N_RULES + 1]), slot_logits=tf.zeros([1, N_RULES + 1, 4]),
                    slot_rewards=tf.zeros([1, N_RULES + 1, 4]), changed_logits=tf.zeros([1, N_RULES + 1, 4]))
    weights = {tau: model.mixture(out, tau).mixture_distribution.probs_parameter().numpy()[0, 0]
               for tau in (0.25, 1.0, 4.0)}
    assert weights[0.25] > weights[1.0] > weights[4.0]
    one = out._replace(logits=tf.constant([[0.0, -1e9, -1e9]]))
    var = {tau: model.mixture(one, tau).variance().numpy()[0, 0] for tau in (1.0, 2.0)}
    assert var[1.0] == pytest.approx(np.exp(-2.0), rel=1e-5)
    assert var[2.0] == pytest.approx(2 * var[1.0], rel=1e-5)
    a = model.sample_z(out, 1.0, seed=tf.constant([1, 2])).numpy()
    np.testing.assert_array_equal(a, model.sample_z(out, 1.0, seed=tf.constant([1, 2])).numpy())
    assert a.shape == (1, 2)
    even = out._replace(logits=tf.constant([[0.5, 0.0, -0.5]]))  # no rare component: moments converge fast
    many = tf.nest.map_structure(lambda t: tf.repeat(t, 50000, axis=0), even)
    for tau in (0.5, 2.0):  # the direct draw has the mixture's moments at every temperature
        draws = model.sample_z(many, tau, seed=tf.constant([3, 4])).numpy()
        mixture = model.mixture(even, tau)
        np.testing.assert_allclose(draws.mean(0), mixture.mean().numpy()[0], atol=0.1)
        np.testing.assert_allclose(draws.var(0), mixture.variance().numpy()[0], rtol=0.05)
    with pytest.raises(ValueError, match="tau"):
        model.mixture(out, 0.0)


def test_hidden_state_starts_fresh_for_every_sequence_and_matches_step():
    model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, **TINY_M))
    rng = np.random.default_rng(0)
    z = tf.constant(rng.normal(size=(2, 5, 4)).astype(np.float32))
    actions = tf.constant(rng.integers(0, N_RULES + 1, (2, 5)).astype(np.int32))
    both = model(z, actions)
    alone = model(z[1:], actions[1:])
    np.testing.assert_allclose(both.reward.numpy()[1], alone.reward.numpy()[0], rtol=1e-5, atol=1e-6)
    model(z[::-1], actions[::-1])  # nothing carries over between calls
    np.testing.assert_allclose(model(z, actions).mu.numpy(), both.mu.numpy(), rtol=1e-5, atol=1e-6)
    state = model.initial_state(2)
    for t in range(5):
        out, state = model.step(z[:, t], actions[:, t], state)
        np.testing.assert_allclose(out.mu.numpy(), both.mu.numpy()[:, t], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out.mask_logits.numpy(), both.mask_logits.numpy()[:, t], rtol=1e-4, atol=1e-5)
    assert both.logits.shape == (2, 5, 2) and both.mu.shape == (2, 5, 2, 4) and both.done_logit.shape == (2, 5)


def test_step_is_the_lstm_and_heads_on_z_and_the_one_hot_action():
    """M reads [z, one_hot(xfer)] without forming the one-hot product: its step equals
    sonnet's own LSTM and head MLP applied to the concatenated input (the layout its
    checkpoints hold), and step_reward equals the step's reward."""
    model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, **TINY_M))
    rng = np.random.default_rng(1)
    z = tf.constant(rng.normal(size=(6, 4)).astype(np.float32))
    actions = tf.constant([0, 1, N_RULES, 7, 7, N_RULES // 2], tf.int32)
    state = model.initial_state(6)
    state = type(state)(hidden=tf.constant(rng.normal(size=(6, 16)).astype(np.float32)),
                        cell=tf.constant(rng.normal(size=(6, 16)).astype(np.float32)))
    out, nxt = model.step(z, actions, state)
    inputs = tf.concat([z, tf.one_hot(actions, model.n_actions)], axis=-1)
    hidden, ref_state = model._lstm(inputs, state)
    heads = model._heads(model._features(tf.concat([hidden, inputs], axis=-1)))
    np.testing.assert_allclose(nxt.hidden.numpy(), ref_state.hidden.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(nxt.cell.numpy(), ref_state.cell.numpy(), rtol=1e-5, atol=1e-6)
    r = N_RULES + 1
    np.testing.assert_allclose(out.mask_logits.numpy(), heads[:, 2:2 + r].numpy(), rtol=1e-5, atol=1e-5)
    slots = model.config.top_locations * r
    np.testing.assert_allclose(out.slot_logits.numpy().reshape(6, -1), heads[:, 2 + r:2 + r + slots].numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out.done_logit.numpy(), heads[:, 1].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(model.step_reward(z, actions, state).numpy(), out.reward.numpy(), rtol=1e-5, atol=1e-6)
    fresh = MDNRNN(MDNRNNConfig(n_rules=N_RULES, **TINY_M))  # a method that reads variables may come first
    assert fresh.step_reward(z, actions, state).shape == (6,)
    # without candidate inputs a move reads as its xfer; with them, a move at a place reads
    # as its xfer until trained (its embedding starts at zero) and the taken candidate's
    # reward is an input: another reward, another prediction
    placed = tf.constant(move(actions.numpy(), np.full(6, 1), model.n_actions))
    np.testing.assert_allclose(model.step(z, placed, state)[0].mask_logits.numpy(), out.mask_logits.numpy(),
                               rtol=1e-5, atol=1e-5)
    reading = MDNRNN(MDNRNNConfig(n_rules=N_RULES, candidate_inputs=True, **TINY_M))
    base = reading.step(z, actions, state)[0]
    np.testing.assert_allclose(reading.step(z, placed, state)[0].mask_logits.numpy(), base.mask_logits.numpy(),
                               rtol=1e-5, atol=1e-5)
    moved = reading.step(z, actions, state, taken=tf.fill([6], 3.0))[0]
    assert not np.allclose(moved.slot_logits.numpy(), base.slot_logits.numpy())
    with pytest.raises(tf.errors.InvalidArgumentError):  # a move outside the rule set's is an error, not a zero row
        model.step(z[:1], tf.constant([model.n_moves], tf.int32), model.initial_state(1))


def test_mdnrnn_loss_ignores_padded_steps():
    model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, **TINY_M))
    rng = np.random.default_rng(0)
    f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
    z, next_z, rewards = f(2, 4, 4), f(2, 4, 4), f(2, 4)
    actions = rng.integers(0, N_RULES + 1, (2, 4)).astype(np.int32)
    dones, masks = np.zeros((2, 4), np.float32), (rng.random((2, 4, N_RULES + 1)) > 0.5).astype(np.float32)
    top = f(2, 4, N_RULES + 1, model.config.top_locations)
    top[rng.random(top.shape) > 0.5] = np.nan  # slots without a candidate
    valid = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
    before = model.loss(z, actions, next_z, rewards, dones, masks, top, valid)
    assert all(np.isfinite(float(v)) for v in before.values())
    z[valid == 0], next_z[valid == 0], rewards[valid == 0] = 99.0, -99.0, 1e4
    top[valid == 0] = 1e4
    after = model.loss(z, actions, next_z, rewards, dones, masks, top, valid)
    for k in before:
        assert float(after[k]) == pytest.approx(float(before[k]), rel=1e-5), k
    top[valid == 1] = np.where(np.isfinite(top[valid == 1]), top[valid == 1] + 3.0, np.nan)
    moved = model.loss(z, actions, next_z, rewards, dones, masks, top, valid)
    assert float(moved["slot_reward"]) > float(before["slot_reward"])  # the existing slots' rewards count


def test_asinh_slot_reward_loss_weighs_small_rewards_and_matches_the_held_out_metric():
    """slot_reward_loss="asinh": an error among rewards far below the knee counts about
    1 / knee^2 times more than squared, one among large rewards by its log ratio; the
    held-out metric (evaluation.mdnrnn_loss's term) computes what MDNRNN.loss computes."""
    from worldmodel.configs import SLOT_REWARD_KNEE, slot_reward_error

    scale = 2.5
    error = functools.partial(slot_reward_error, reward_scale=scale, asinh=np.arcsinh, where=np.where)
    small = error(np.float64(0.002), np.float64(0.0), True, loss="asinh")
    assert small == pytest.approx(0.002 / (SLOT_REWARD_KNEE * scale), rel=1e-3)
    assert small / error(0.002, 0.0, True, loss="squared") == pytest.approx(1 / SLOT_REWARD_KNEE, rel=1e-3)
    assert error(np.float64(10.0), np.float64(5.0), True, loss="asinh") == pytest.approx(np.log(2.0), abs=1e-3)
    # where no candidate exists the error stays squared: those slots are most of them
    assert error(np.float64(0.002), np.float64(0.0), False, loss="asinh") == pytest.approx(0.002 / scale)
    with pytest.raises(ValueError, match="slot_reward_loss"):
        MDNRNNConfig(n_rules=N_RULES, slot_reward_loss="huber")

    rng = np.random.default_rng(1)
    top = rng.normal(size=(1, 3, N_RULES + 1, 2)).astype(np.float32) * 4.0
    top[rng.random(top.shape) > 0.6] = -np.inf
    for loss in ("squared", "asinh"):
        model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, reward_scale=scale, slot_reward_loss=loss,
                                    **{**TINY_M, "top_locations": 2}))
        z, next_z = rng.normal(size=(1, 3, 4)).astype(np.float32), rng.normal(size=(1, 3, 4)).astype(np.float32)
        actions = rng.integers(0, N_RULES + 1, (1, 3)).astype(np.int32)
        rewards = rng.normal(size=(1, 3)).astype(np.float32)
        valid = np.ones((1, 3), np.float32)
        terms = model.loss(z, actions, next_z, rewards, np.zeros((1, 3), np.float32),
                           np.ones((1, 3, N_RULES + 1), np.float32), top, valid)
        out = model(z, actions, valid, taken=rewards)
        exists = np.isfinite(top)
        e = error(out.slot_rewards.numpy(), np.where(exists, top, 0.0), exists, loss=loss)
        assert float(terms["slot_reward"]) == pytest.approx(np.square(e).sum() / exists.sum(), rel=1e-4)


# -- tracing ---------------------------------------------------------------------------
def test_train_steps_trace_once_across_batch_sizes(rollouts):
    import sonnet as snt

    train, _, _ = load_splits(rollouts, DataConfig(held_out_fraction=0.0))
    vae = GraphVAE(GraphVAEConfig(n_rules=N_RULES, **TINY_VAE))
    opt = snt.optimizers.Adam(1e-3)
    vae(to_graphs_tuple(train.graphs([0])))
    init_optimizer(opt, vae.trainable_variables)
    step = make_train_step(vae, opt, 10.0)
    for size in (2, 5, 3):
        graphs, targets = train.graphs(range(size)), train.target_batch(range(size))
        step(to_graphs_tuple(graphs), {k: tf.constant(v) for k, v in targets.items()})
    assert step.traces == 1

    encoded = EncodedEpisodes(train, np.zeros((train.num_observations, 4), np.float32),
                              np.zeros((train.num_observations, 4), np.float32))
    model = MDNRNN(MDNRNNConfig(n_rules=N_RULES, **TINY_M))
    model(tf.zeros([1, 1, 4]), tf.zeros([1, 1], tf.int32))
    m_opt = snt.optimizers.Adam(1e-3)
    init_optimizer(m_opt, model.trainable_variables)
    m_step = make_m_step(model, m_opt, 10.0)
    z = encoded.sample_z(np.random.default_rng(0))
    for size, length in ((2, 6), (4, 3)):
        b = encoded.batch(range(size), z)
        m_step(*(tf.constant(b[f][:, :length]) for f in SEQUENCE_FIELDS))
    assert m_step.traces == 1


# -- dataset and evaluation -------------------------------------------------------------
def test_split_is_by_episode_and_graphs_round_trip(rollouts):
    reader = RolloutReader(rollouts)
    train, held, _ = load_splits(rollouts, DataConfig(held_out_fraction=0.3, split_seed=1))
    assert held is not None
    assert set(train.episode_ids).isdisjoint(held.episode_ids)
    assert sorted([*train.episode_ids, *held.episode_ids]) == reader.episode_ids
    assert all(is_held_out(int(i), 0.3, 1) for i in held.episode_ids)
    ep = reader.episode(int(train.episode_ids[1]))
    k = int(train.obs_start[1]) + 2
    got, want = train.graphs([k]), ep.graph(2)
    for f in ("nodes", "edges", "senders", "receivers"):
        np.testing.assert_array_equal(got[f], want[f])
    encoded = EncodedEpisodes(train, np.arange(train.num_observations, dtype=np.float32)[:, None],
                              np.full((train.num_observations, 1), -30.0, np.float32))
    steps = int(train.steps[1])
    np.testing.assert_array_equal(encoded.mu[1, : steps + 1, 0], np.arange(steps + 1) + train.obs_start[1])
    np.testing.assert_array_equal(encoded.next_masks[1, :steps], ep["infos/xfer_mask"][1:])
    b = encoded.batch([1], encoded.sample_z(np.random.default_rng(0)))
    np.testing.assert_array_equal(b["next_top_rewards"][0, :steps],
                                  ep["infos/top_rewards"][1:].astype(np.float16).astype(np.float32))
    assert encoded.mask[1].sum() == steps
    b = encoded.batch([1], encoded.sample_z(np.random.default_rng(0)))
    np.testing.assert_allclose(b["next_z"][0, : steps - 1], b["z"][0, 1:steps])


def test_episode_set_rejects_non_one_hot_nodes(rollouts):
    ep = RolloutReader(rollouts).episode(0)
    arrays = dict(ep.arrays)
    arrays["observations/nodes"] = arrays["observations/nodes"] * 0.5
    with pytest.raises(ValueError, match="one-hot"):
        EpisodeSet.from_episodes([(0, arrays)])


def test_episode_set_rejects_actions_outside_the_rule_set(rollouts):
    ep = RolloutReader(rollouts).episode(0)
    arrays = dict(ep.arrays)
    actions = np.array(arrays["actions"])
    actions[1, 0] = arrays["infos/xfer_mask"].shape[1]  # one past stop
    arrays["actions"] = actions
    with pytest.raises(ValueError, match="outside the rule set"):
        EpisodeSet.from_episodes([(0, arrays)])


def test_episode_set_names_rollouts_without_the_candidates_rewards(rollouts):
    from worldmodel.dataset import MissingCandidateRewardsError

    arrays = dict(RolloutReader(rollouts).episode(0).arrays)
    assert arrays["infos/top_rewards"].shape[1:] == (N_RULES + 1, 4)
    del arrays["infos/top_rewards"]  # a file recorded before the env gave them
    with pytest.raises(MissingCandidateRewardsError, match="collect"):
        EpisodeSet.from_episodes([(0, arrays)])


def test_r2_score_and_scatter_image():
    true = np.array([1.0, 2.0, 3.0, 4.0])
    assert r2_score(true, true, 2.5) == 1.0
    assert r2_score(np.full(4, 2.5), true, 2.5) == 0.0
    assert r2_score(true + 1.0, true, 2.5) == pytest.approx(1 - 1.0 / 1.25)
    image = scatter_image(true, true, size=64)
    assert image.shape == (64, 64, 3) and image.dtype == np.uint8
    assert (image == [31, 119, 180]).all(-1).sum() > 4


# -- training stages, resume, loaders --------------------------------------------------
def _smoothed_fall(history) -> bool:
    losses = [loss for _, loss in history]
    return np.mean(losses[-3:]) < np.mean(losses[:3])


def test_training_stages_learn_resume_and_load(rollouts, tmp_path):
    run = _copy_run(rollouts, tmp_path)
    with pytest.raises(CheckpointNotFoundError):
        load_vae(run)
    model = GraphVAEConfig(n_rules=N_RULES, **TINY_VAE)
    data = DataConfig(held_out_fraction=0.25)
    vae_train = VAETrainConfig(steps=40, batch_size=8, log_every=1, eval_every=40, save_every=20,
                               learning_rate=3e-3)
    logs = []
    first = train_vae(run, model, vae_train, data, log=logs.append)
    assert first["step"] == 40 and first["traces"] == 1 and _smoothed_fall(first["history"])
    assert first["held_out"]["observations"] > 0
    again = train_vae(run, model, VAETrainConfig(**{**vae_train.__dict__, "steps": 45}), data, log=logs.append)
    assert again["step"] == 45 and [s for s, _ in again["history"]] == [41, 42, 43, 44, 45]
    assert any("resumed" in line and "at step 40" in line for line in logs)
    with pytest.raises(ConfigMismatchError, match="hidden"):
        train_vae(run, GraphVAEConfig(n_rules=N_RULES, latent_dim=4, hidden=8, message_passing_steps=1),
                  vae_train, data)
    vae = load_vae(run)
    assert vae.checkpoint_path.endswith("ckpt-45")

    m_model = MDNRNNConfig(n_rules=N_RULES, **TINY_M)
    m_train = MDNRNNTrainConfig(steps=60, batch_size=4, log_every=1, eval_every=60, save_every=30,
                                learning_rate=3e-3)
    result = train_mdnrnn(run, m_model, m_train, log=logs.append)
    assert result["step"] == 60 and result["traces"] == 1 and _smoothed_fall(result["history"])
    held = result["held_out"]
    assert 0.0 <= held["mask_accuracy"] <= 1.0 and np.isfinite(held["z_nll"])
    resumed = train_mdnrnn(run, m_model, MDNRNNTrainConfig(**{**m_train.__dict__, "steps": 62}), log=logs.append)
    assert resumed["step"] == 62 and len(resumed["history"]) == 2
    assert load_mdnrnn(run, which="latest").checkpoint_path.endswith("ckpt-62")
    with pytest.raises(ValueError, match="which"):
        load_mdnrnn(run, which="newest")
    best = load_mdnrnn(run)
    assert best.checkpoint_path.endswith(f"best/ckpt-{resumed['best']['step']}")
    assert resumed["best"]["held_out"]["loss"] <= min(result["held_out"]["loss"], resumed["held_out"]["loss"])
    saved = json.loads((Path(run) / "mdnrnn" / "metrics.json").read_text())
    assert saved["step"] == 62 and "reward_r2" in saved["held_out"]
    assert {"vae", "mdnrnn"} <= set(json.loads((Path(run) / "config.json").read_text()))


class _Command:
    """A subcommand of the installed `rlflow` command, run in this process."""

    def __init__(self, name: str):
        self.name = name

    def main(self, argv: list[str]) -> int:
        from rlflow.cli import main

        return main([self.name, *argv])


def test_scripts_run_end_to_end_and_resume(rollouts, tmp_path, capsys):
    run = _copy_run(rollouts, tmp_path)
    vae_args = ["--run", run, "--steps", "6", "--batch-size", "4", "--latent-dim", "4", "--hidden", "16",
                "--message-passing-steps", "1", "--log-every", "2", "--eval-every", "6", "--save-every", "3",
                "--held-out-fraction", "0.25"]
    m_args = ["--run", run, "--steps", "6", "--batch-size", "4", "--hidden", "16", "--mixtures", "2",
              "--log-every", "2", "--eval-every", "6", "--save-every", "3"]
    train_vae_script, train_m_script = _Command("train-vae"), _Command("train-mdnrnn")
    assert train_m_script.main(m_args) == 2  # V is not trained yet: a clear error, not a crash
    assert "train the vae stage" in capsys.readouterr().err
    assert train_vae_script.main(vae_args) == 0
    assert "recon_cost_mse" in capsys.readouterr().out
    assert train_m_script.main(m_args) == 0
    assert "reward_r2" in capsys.readouterr().out
    for script, args, stage in ((train_vae_script, vae_args, "vae"), (train_m_script, m_args, "mdnrnn")):
        assert script.main(args) == 0  # the same command again resumes at the budget
        assert "resumed from" in capsys.readouterr().out
        assert json.loads((Path(run) / stage / "metrics.json").read_text())["step"] == 6
    assert os.listdir(Path(run) / "tb" / "vae") and os.listdir(Path(run) / "tb" / "mdnrnn")
    rewards = np.concatenate([RolloutReader(rollouts).episode(i)["rewards"] for i in RolloutReader(rollouts).episode_ids
                              if not is_held_out(i, 0.25, 0)])
    scale = json.loads((Path(run) / "mdnrnn" / "config.json").read_text())["model"]["reward_scale"]
    assert scale == pytest.approx(rewards.std(), rel=1e-4)  # --reward-scale 0: set from the data
