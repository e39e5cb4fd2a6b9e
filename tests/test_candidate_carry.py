"""The dream's candidate prior (worldmodel/candidate_carry.py): a step's candidates carried
over, checked against the real env; M's changed head in its loss; the dream keeping the
carried candidates where M predicts no change."""

import numpy as np
import pytest

from taso_env.env.rewrite_env import EnvConfig, GraphRewriteEnv
from worldmodel import candidate_carry

INF = np.inf


def test_carried_drops_the_taken_slot_and_moves_the_rule_s_later_slots_up():
    top = np.array([[3.0, 2.0, 1.0, -INF], [5.0, -INF, -INF, -INF], [-INF] * 4], np.float32)
    got = candidate_carry.carried(top, 0, 1)
    np.testing.assert_array_equal(got, [[3.0, 1.0, -INF, -INF], [5.0, -INF, -INF, -INF], [-INF] * 4])
    np.testing.assert_array_equal(candidate_carry.carried(top, 0, -1), top)  # unknown slot, or stop: as it was
    np.testing.assert_array_equal(top[0], [3.0, 2.0, 1.0, -INF])  # the input is not changed
    batch = candidate_carry.carried(np.stack([top, top]), np.array([1, 0]), np.array([0, 3]))
    np.testing.assert_array_equal(batch[0, 1], [-INF] * 4)
    np.testing.assert_array_equal(batch[1, 0], [3.0, 2.0, 1.0, -INF])  # slot 3 of rule 0 was empty


def test_changed_marks_created_removed_and_repriced_candidates_within_float16_rounding():
    top = np.array([[3.0, 2.0, -INF], [1.0, -INF, -INF]], np.float32)
    after = np.array([[3.0, -INF, -INF], [1.0, 0.5, -INF]], np.float32)  # rule 0 slot 1 taken, rule 1 got one
    np.testing.assert_array_equal(candidate_carry.changed(after, top, 0, 1), [[0, 0, 0], [0, 1, 0]])
    rounded = np.float16(after).astype(np.float32) * np.float32(1 + 1e-4)
    assert not candidate_carry.changed(rounded, top, 0, 1)[0].any()  # rounding is not a change
    repriced = after.copy()
    repriced[0, 0] = 2.5
    assert candidate_carry.changed(repriced, top, 0, 1)[0, 0]


def test_merged_takes_m_s_slots_where_it_predicts_a_change_and_orders_each_rule_best_first():
    carried = np.array([[[3.0, 1.0, -INF]]], np.float32)
    predicted = np.array([[[9.0, 2.0, 0.5]]], np.float32)
    got = candidate_carry.merged(carried, predicted, np.array([[[False, False, True]]]))
    np.testing.assert_array_equal(got, [[[3.0, 1.0, 0.5]]])
    got = candidate_carry.merged(carried, predicted, np.array([[[False, True, False]]]))
    np.testing.assert_array_equal(got, [[[3.0, 2.0, -INF]]])


@pytest.mark.parametrize("graph", ["valley_0", "squeezenet1_1", "nasrnn"])
def test_on_the_real_env_most_candidates_carry_over_and_the_taken_one_goes(graph):
    """The prior is what the real env does on most slots: over greedy's first steps, the
    slots that differ from the carried candidates are a small share of those that exist
    (11% on valley_0, 17% on squeezenet1_1, 12% on nasrnn)."""
    env = GraphRewriteEnv([graph], config=EnvConfig(cost_model="table:h100_fp32", horizon=12))
    _, info = env.reset(options={"graph": graph})
    changed = existing = steps = 0
    for _ in range(12):
        top, where = np.asarray(info["top_rewards"]), np.asarray(info["top_locations"])
        improving = np.where(np.isfinite(top[:-1]), top[:-1], -INF)
        if improving.max() <= 0:
            break
        rule, place = np.unravel_index(np.argmax(improving), improving.shape)
        _, _, terminated, truncated, info = env.step(np.array([rule, where[rule, place]]))
        after = np.asarray(info["top_rewards"])
        diff = candidate_carry.changed(after, top, rule, place)
        changed += int(diff.sum())
        existing += int(np.isfinite(after).sum())
        steps += 1
        if terminated or truncated:
            break
    assert steps >= 2
    assert changed <= 0.25 * existing, (changed, existing)


def _tiny_world(carry: bool):
    import tensorflow as tf

    from worldmodel.configs import GraphVAEConfig, MDNRNNConfig
    from worldmodel.graph_vae import GraphVAE
    from worldmodel.mdnrnn import MDNRNN

    n_rules = 6
    vae = GraphVAE(GraphVAEConfig(n_rules=n_rules, latent_dim=4, hidden=16, message_passing_steps=1))
    model = MDNRNN(MDNRNNConfig(n_rules=n_rules, latent_dim=4, hidden=16, mixtures=2, carry_candidates=carry))
    model(tf.zeros([1, 1, 4]), tf.zeros([1, 1], tf.int32))
    return vae, model


def test_m_learns_the_changed_slots_only_with_carry_candidates():
    import tensorflow as tf

    rng = np.random.default_rng(0)
    for carry in (False, True):
        _, model = _tiny_world(carry)
        r, slots = model.n_actions, model.config.top_locations
        f = lambda *s: rng.normal(size=s).astype(np.float32)  # noqa: E731
        args = [f(2, 3, 4), rng.integers(0, r, (2, 3)).astype(np.int32), f(2, 3, 4), f(2, 3),
                np.zeros((2, 3), np.float32), np.ones((2, 3, r), np.float32), f(2, 3, r, slots),
                np.ones((2, 3), np.float32)]
        changed = (rng.random((2, 3, r, slots)) > 0.8).astype(np.float32)
        losses = model.loss(*args, next_changed=changed)
        out = model(tf.constant(args[0]), tf.constant(args[1]))
        if carry:
            assert float(losses["changed"]) > 0.1
            with pytest.raises(ValueError, match="next_changed"):
                model.loss(*args)
        else:
            assert float(losses["changed"]) == 0.0  # not a head of this M
            assert (out.changed_logits.numpy() > 0).all()  # every slot is M's prediction


def test_the_dream_keeps_the_carried_candidates_where_m_predicts_no_change():
    import tensorflow as tf

    from worldmodel.dream_env import Dream, DreamConfig

    vae, model = _tiny_world(True)
    r, width = model.n_actions, model.config.top_locations
    start = np.full((1, r, width), -INF, np.float32)
    start[0, 1, :3] = [2.0, 1.0, 0.5]
    start[0, 3, :1] = [-0.4]
    latents = np.zeros((1, 2, 4), np.float32)
    heads = model._heads
    changed_bias = heads.b.numpy()
    changed_bias[2 + r + 2 * r * width:] = -50.0  # M: nothing changes
    heads.w.assign(tf.zeros_like(heads.w))
    heads.b.assign(changed_bias)
    dream = Dream(vae, model, latents, start, DreamConfig(horizon=10, done_threshold=1.0), batch_size=2, seed=0)
    dream.reset()
    # rule 1's slot 1 in the first dream, rule 3's slot 0 in the second
    _, top, _, terminated, _, invalid = dream.step(np.array([1 * width + 1, 3 * width + 0]))
    assert not invalid.any() and not terminated.any()
    np.testing.assert_array_equal(top[0], candidate_carry.carried(start[0], 1, 1))
    np.testing.assert_array_equal(top[1], candidate_carry.carried(start[0], 3, 0))
    changed_bias[2 + r + 2 * r * width:] = 50.0  # M: every slot changes, so its slot heads decide
    changed_bias[2 + r:2 + r + r * width] = -50.0  # and they say no candidate exists
    heads.b.assign(changed_bias)
    dream.reset()
    _, top, _, terminated, _, _ = dream.step(np.array([1 * width + 1, 3 * width + 0]))
    assert terminated.all()  # no candidate is left, so the dreams end (and restart)


def test_a_best_so_far_dream_pays_a_losing_rewrite_back_only_beyond_the_best_graph():
    """DreamConfig.reward "best_so_far": the return is the gain of the episode's cheapest
    graph less the charges; "step": every candidate's own reward."""
    import tensorflow as tf

    from worldmodel.dream_env import Dream, DreamConfig

    vae, model = _tiny_world(True)
    r, width = model.n_actions, model.config.top_locations
    start = np.full((1, r, width), -INF, np.float32)
    start[0, 1, 0], start[0, 3, 0], start[0, 4, 0] = -2.0, 3.0, 0.5
    heads = model._heads
    bias = heads.b.numpy()
    bias[2 + r + 2 * r * width:] = -50.0  # nothing changes: the candidates carry over
    heads.w.assign(tf.zeros_like(heads.w))
    heads.b.assign(bias)
    returns = {}
    for reward in ("step", "best_so_far"):
        config = DreamConfig(horizon=10, done_threshold=1.0, reward=reward)
        dream = Dream(vae, model, np.zeros((1, 2, 4), np.float32), start, config, batch_size=1, seed=0)
        dream.reset()
        got = [float(dream.step(np.array([rule * width]))[2][0]) for rule in (1, 3, 4)]
        returns[reward] = got
    np.testing.assert_allclose(returns["step"], [-2.0 - 0.27, 3.0 - 0.02, 0.5 - 0.02], rtol=1e-6)
    # below the start by 1.0 after the second rewrite, 1.5 after the third
    np.testing.assert_allclose(returns["best_so_far"], [0.0 - 0.27, 1.0 - 0.02, 0.5 - 0.02], rtol=1e-6)
    with pytest.raises(ValueError, match="reward"):
        DreamConfig(reward="final")


def test_the_held_out_metric_weighs_a_changed_slot_as_m_s_loss_does():
    import tensorflow as tf

    from worldmodel.evaluation import _bce

    rng = np.random.default_rng(1)
    logits = rng.normal(size=200).astype(np.float32) * 4
    labels = (rng.random(200) > 0.7).astype(np.float32)
    for weight in (1.0, 30.0):
        expected = tf.nn.weighted_cross_entropy_with_logits(labels=labels, logits=logits, pos_weight=weight).numpy()
        np.testing.assert_allclose(_bce(logits, labels, weight), expected, rtol=1e-4, atol=1e-4)
