"""What lets the world model learn a valley: rollouts that go past greedy's optimum
(taso_env.env.policies.OptimumExplorer) and M's moves, which tell where a rule was taken
(worldmodel.moves). Real engine, real env, the valley family's members."""

from __future__ import annotations

import numpy as np
import pytest

from taso_env.env.policies import GreedyPolicy, OptimumExplorer, make_policy
from taso_env.env.rewrite_env import EnvConfig, GraphRewriteEnv
from worldmodel.moves import move, place_of_reward


def _env(graph: str = "valley_0") -> GraphRewriteEnv:
    return GraphRewriteEnv([graph], config=EnvConfig(cost_model="table:h100_fp32", horizon=40))


def _greedy_optimum(env: GraphRewriteEnv):
    obs, info = env.reset()
    greedy, rng = GreedyPolicy(env), np.random.default_rng(0)
    while True:
        action = greedy(obs, info, rng)
        if action[0] == env.n_rules:
            return obs, info
        obs, _, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated)


def test_explorer_leaves_greedys_optimum_by_an_affordable_losing_rewrite():
    env = _env()
    obs, info = _greedy_optimum(env)
    top = info["top_rewards"][:-1]
    assert not (np.isfinite(top) & (top > 0)).any()  # greedy's optimum: nothing improves
    explorer, rng = OptimumExplorer(stop_prob=0.0, max_loss=5.0), np.random.default_rng(1)
    taken = set()
    for _ in range(60):
        rule, location = explorer(obs, info, rng)
        assert rule < env.n_rules
        place = int(np.flatnonzero(info["top_locations"][rule] == location)[0])
        assert -5.0 <= top[rule, place] < 0  # losing, but no more than max_loss
        taken.add((int(rule), place))
    affordable = np.isfinite(top) & (top >= -5.0)
    assert len(taken) >= min(5, int(affordable.sum()))  # spread over the affordable rewrites
    assert (top[np.isfinite(top)] < -5.0).any()  # and there were dearer ones it left
    # where nothing is affordable it stops
    assert OptimumExplorer(stop_prob=0.0, max_loss=0.0)(obs, info, rng)[0] == env.n_rules


def test_explorer_improves_while_it_can_and_reaches_past_greedy_in_some_episodes():
    env = _env()
    explorer, rng = make_policy("explore_optima", env), np.random.default_rng(0)
    greedy_gain = sum(_greedy_gain(env))
    best = []
    for _ in range(40):
        obs, info = env.reset()
        total, peak = 0.0, 0.0
        for _ in range(20):
            before = info["top_rewards"][:-1]
            action = explorer(obs, info, rng)
            if action[0] == env.n_rules:
                break
            improving = np.isfinite(before) & (before > 1e-9)
            obs, reward, terminated, truncated, info = env.step(action)
            if improving.any():
                assert reward > 0  # an improving rewrite whenever one exists
            total += reward
            peak = max(peak, total)
            if terminated or truncated:
                break
        best.append(peak)
    assert max(best) > greedy_gain + 0.5  # a valley crossed: half a percent past greedy at least


def _greedy_gain(env):
    obs, info = env.reset()
    greedy, rng = GreedyPolicy(env), np.random.default_rng(0)
    while (action := greedy(obs, info, rng))[0] != env.n_rules:
        obs, reward, _, _, info = env.step(action)
        yield reward


def test_place_of_reward_recovers_the_rank_taken_from_float16_records():
    env = _env("valley_3")
    obs, info = _greedy_optimum(env)
    top, locations = info["top_rewards"], info["top_locations"]
    for rule in np.flatnonzero(np.isfinite(top[:-1]).any(axis=1))[:6]:
        for place in np.flatnonzero(np.isfinite(top[rule])):
            if np.sum(np.abs(top[rule] - top[rule, place]) < 1e-3) > 1:
                continue  # tied rewards: the rank is ambiguous by construction
            env.reset()
            _greedy_optimum(env)
            _, reward, _, _, _ = env.step(np.array([rule, locations[rule, place]]))
            stored = top[rule].astype(np.float16)  # as the rollout reader keeps them
            assert place_of_reward(np.float32(reward), stored) == place
    assert place_of_reward(123.0, top[0]) == -1


def test_moves_are_the_xfer_where_the_place_is_unknown():
    n_actions = 10
    assert move(3, -1, n_actions) == 3
    assert move(3, 0, n_actions) == 13 and move(3, 2, n_actions) == 33
    moves = move(np.array([1, 1, 9]), np.array([0, 1, -1]), n_actions)
    np.testing.assert_array_equal(moves % n_actions, [1, 1, 9])
    assert len(set(moves.tolist())) == 3


@pytest.mark.parametrize("bad", [{"best_prob": 1.5}, {"stop_prob": -0.1}, {"max_loss": -1.0}])
def test_explorer_rejects_bad_settings(bad):
    with pytest.raises(ValueError):
        OptimumExplorer(**bad)


def test_m_tells_a_rule_taken_at_one_place_from_the_same_rule_at_another():
    """A valley in miniature: rule 0 loses the same at either of its places, but only at
    its best one does it unlock a rewrite of rule 1 that pays. M reads the move, so it
    predicts the payback after the one and not after the other."""
    import tensorflow as tf

    from worldmodel.configs import MDNRNNConfig
    from worldmodel.mdnrnn import MDNRNN

    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    n_rules, places, b, t, zdim = 3, 2, 32, 3, 4
    model = MDNRNN(MDNRNNConfig(n_rules=n_rules, latent_dim=zdim, hidden=16, mixtures=1, top_locations=places,
                                reward_scale=1.0, candidate_inputs=True))
    n_actions = n_rules + 1
    place = rng.integers(0, places, size=(b, t))
    moves = move(np.zeros((b, t), np.int64), place, n_actions)
    rewards = np.full((b, t), -1.0, np.float32)  # the same loss at both places
    z = rng.normal(size=(b, t, zdim)).astype(np.float32)
    after = np.full((b, t, n_actions, places), -np.inf, np.float32)
    after[..., 0, :] = -1.0
    after[..., 1, 0] = np.where(place == 0, 2.0, -np.inf)  # the payback, after the best place only
    optimizer = tf.keras.optimizers.Adam(1e-2)
    for _ in range(80):
        with tf.GradientTape() as tape:
            loss = model.loss(z, moves, z, rewards, np.zeros((b, t), np.float32),
                              np.ones((b, t, n_actions), np.float32), after, np.ones((b, t), np.float32))["total"]
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    probe = tf.constant(move(np.zeros(2, np.int64), np.array([0, 1]), n_actions))
    out, _ = model.step(tf.constant(z[:2, 0]), probe, model.initial_state(2), taken=tf.fill([2], -1.0))
    exists = tf.sigmoid(out.slot_logits[:, 1, 0]).numpy()
    assert exists[0] > 0.9 and exists[1] < 0.1
    assert out.slot_rewards[0, 1, 0].numpy() > 1.5
