"""PPO for the controller, inside the dream (worldmodel.dream_env.Dream).

One iteration: run B parallel dreams for T steps with the current policy, compute
generalised advantages, then a few epochs of clipped-objective updates on minibatches.
Dreams that end restart on their own, so every iteration has B * T transitions.
"""

from __future__ import annotations

import numpy as np
import sonnet as snt
import tensorflow as tf

from controller.configs import PPOConfig
from controller.policy import Controller


def advantages(rewards: np.ndarray, values: np.ndarray, dones: np.ndarray, last_value: np.ndarray,
               gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE over [T, B] arrays; `dones[t]` ends the episode after step t. Returns
    (advantages [T, B], returns [T, B])."""
    steps = rewards.shape[0]
    adv = np.zeros_like(rewards)
    last = np.zeros_like(last_value)
    for t in reversed(range(steps)):
        next_value = last_value if t == steps - 1 else values[t + 1]
        nonterminal = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_value * nonterminal - values[t]
        last = delta + gamma * lam * nonterminal * last
        adv[t] = last
    return adv, adv + values


class PPOTrainer:
    """Owns the optimiser and the update step of one controller."""

    def __init__(self, controller: Controller, config: PPOConfig):
        self.controller, self.config = controller, config
        self.optimizer = snt.optimizers.Adam(config.learning_rate)
        cc = controller.config
        state = [tf.TensorSpec([None, cc.obs_dim], tf.float32),
                 tf.TensorSpec([None, None, cc.top_locations], tf.float32),
                 tf.TensorSpec([None, cc.n_actions], tf.bool)]
        spec = [*state, tf.TensorSpec([None], tf.int32), tf.TensorSpec([None], tf.float32),
                tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32)]
        self._update = tf.function(self._update_step, input_signature=spec)
        self._act = tf.function(controller.act, input_signature=[*state, tf.TensorSpec([2], tf.int32)])
        self.traces = 0

    def _update_step(self, obs, top, mask, actions, old_log_prob, adv, returns):
        self.traces += 1  # Python side effect: runs once per trace
        c = self.config
        with tf.GradientTape() as tape:
            logits, value = self.controller(obs, top, mask)
            log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=actions, logits=logits)
            ratio = tf.exp(log_prob - old_log_prob)
            norm_adv = (adv - tf.reduce_mean(adv)) / (tf.math.reduce_std(adv) + 1e-8)
            policy_loss = -tf.reduce_mean(tf.minimum(ratio * norm_adv,
                                                     tf.clip_by_value(ratio, 1 - c.clip, 1 + c.clip) * norm_adv))
            value_loss = tf.reduce_mean(tf.square(returns - value))
            probs = tf.nn.softmax(logits)
            entropy = -tf.reduce_mean(tf.reduce_sum(probs * tf.nn.log_softmax(logits), -1))
            loss = policy_loss + c.value_coef * value_loss - c.entropy_coef * entropy
        variables = self.controller.trainable_variables
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), c.max_grad_norm)
        self.optimizer.apply(grads, variables)
        approx_kl = tf.reduce_mean(old_log_prob - log_prob)
        return {"loss/policy": policy_loss, "loss/value": value_loss, "loss/entropy": entropy,
                "loss/approx_kl": approx_kl}

    def iteration(self, dream, state: tuple[np.ndarray, np.ndarray], rng: np.random.Generator
                  ) -> tuple[tuple[np.ndarray, np.ndarray], dict]:
        """Collects B x T dream transitions from `state` = (obs [B, Z + H], candidates
        [B, R, L]) and updates the controller.

        Returns:
            (the dreams' state after the rollout, metrics dict).
        """
        c = self.config
        t_obs, t_top, t_mask, t_act, t_logp, t_val, t_rew, t_done = [], [], [], [], [], [], [], []
        finished_returns, running = [], np.zeros(dream.batch_size, np.float32)
        obs, top = state
        mask = dream.mask.copy()
        invalid_count = stops = improving = 0
        for _ in range(c.rollout_steps):
            seed = tf.constant(rng.integers(0, 2**31 - 1, 2), tf.int32)
            action, log_prob, value = self._act(tf.constant(obs), tf.constant(top), tf.constant(mask), seed)
            action = action.numpy()
            stops += int((action == dream.stop).sum())
            next_obs, next_top, reward, terminated, truncated, invalid = dream.step(action)
            improving += int((reward > 0).sum())
            invalid_count += int(invalid.sum())
            t_obs.append(obs)
            t_top.append(top)
            t_mask.append(mask)
            t_act.append(action)
            t_logp.append(log_prob.numpy())
            t_val.append(value.numpy())
            t_rew.append(reward)
            t_done.append((terminated | truncated).astype(np.float32))
            running += reward
            for i in np.flatnonzero(terminated | truncated):
                finished_returns.append(float(running[i]))
                running[i] = 0.0
            obs, top, mask = next_obs, next_top, dream.mask.copy()
        _, last_value = self.controller(tf.constant(obs), tf.constant(top), tf.constant(mask))
        adv, returns = advantages(np.array(t_rew), np.array(t_val), np.array(t_done), last_value.numpy(),
                                  c.gamma, c.gae_lambda)
        flat = {
            "obs": np.concatenate(t_obs), "top": np.concatenate(t_top), "mask": np.concatenate(t_mask),
            "act": np.concatenate(t_act),
            "logp": np.concatenate(t_logp), "adv": adv.reshape(-1), "ret": returns.reshape(-1),
        }
        n = flat["act"].shape[0]
        size = n // c.minibatches
        metrics: dict[str, list] = {}
        for _ in range(c.epochs):
            order = rng.permutation(n)
            for k in range(c.minibatches):
                idx = order[k * size:(k + 1) * size]
                fields = ("obs", "top", "mask", "act", "logp", "adv", "ret")
                out = self._update(*(tf.constant(flat[f][idx]) for f in fields))
                for key, v in out.items():
                    metrics.setdefault(key, []).append(float(v))
        summary = {k: float(np.mean(v)) for k, v in metrics.items()}
        summary["dream/mean_reward"] = float(np.mean(t_rew))
        summary["dream/invalid_rate"] = invalid_count / n
        summary["dream/stop_rate"] = stops / n
        summary["dream/paying_step_rate"] = improving / n
        summary["dream/episode_return"] = float(np.mean(finished_returns)) if finished_returns else float("nan")
        summary["dream/episodes"] = len(finished_returns)
        return (obs, top), summary
