"""Controller parts that need no trained world model: masking, GAE, location head."""

import numpy as np
import pytest
import tensorflow as tf

from controller.location_head import LocationHead, candidate_features
from controller.policy import Controller, ControllerConfig
from controller.ppo import PPOConfig, advantages


def test_controller_never_picks_a_masked_xfer():
    c = Controller(ControllerConfig(obs_dim=6, n_actions=5, hidden=(16,)))
    obs = tf.random.normal([64, 6], seed=0)
    mask = np.zeros((64, 5), bool)
    mask[:, 4] = True
    mask[::2, 1] = True
    logits, value = c(obs, tf.constant(mask))
    assert logits.shape == (64, 5) and value.shape == (64,)
    for seed in range(5):
        action, log_prob, _ = c.act(obs, tf.constant(mask), seed=tf.constant([seed, 1]))
        assert mask[np.arange(64), action.numpy()].all()
        assert np.all(log_prob.numpy() <= 0)
    greedy, _, _ = c.act(obs, tf.constant(mask), greedy=True)
    assert mask[np.arange(64), greedy.numpy()].all()


def test_config_validation():
    with pytest.raises(ValueError, match="n_actions"):
        ControllerConfig(obs_dim=4, n_actions=1)
    with pytest.raises(ValueError, match="minibatches"):
        PPOConfig(num_dreams=3, rollout_steps=3, minibatches=2)


def test_gae_matches_a_hand_computation():
    rewards = np.array([[1.0], [0.0], [2.0]])
    values = np.array([[0.5], [0.4], [0.3]])
    dones = np.array([[0.0], [1.0], [0.0]])
    last = np.array([0.2])
    gamma, lam = 0.9, 0.8
    adv, ret = advantages(rewards, values, dones, last, gamma, lam)
    d2 = 2.0 + gamma * 0.2 - 0.3
    d1 = 0.0 - 0.4  # episode ends after step 1
    d0 = 1.0 + gamma * 0.4 - 0.5
    expected = [d0 + gamma * lam * d1, d1, d2]
    np.testing.assert_allclose(adv[:, 0], expected, rtol=1e-12)
    np.testing.assert_allclose(ret, adv + values)


def test_location_head_prefers_the_lowest_cost_delta_and_can_be_refit(tmp_path):
    head = LocationHead()
    assert head.choose(np.array([0.3, -0.2, 0.1, -0.1]), initial_cost=1.0) == 1
    feats = candidate_features(np.array([0.3, -0.2, 0.1]), 2.0)
    np.testing.assert_allclose(feats[:, 0], [15.0, -10.0, 5.0])
    np.testing.assert_allclose(feats[:, 1], [1.0, 0.0, 0.5])
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    y = x @ np.array([2.0, -1.0, 0.5]) + 0.3
    head.fit(x, y)
    np.testing.assert_allclose(head.weights, [2.0, -1.0, 0.5], atol=1e-9)
    head.save(tmp_path / "h.json")
    assert LocationHead.load(tmp_path / "h.json") == head
    with pytest.raises(ValueError, match="no candidate"):
        head.choose(np.array([]), 1.0)
