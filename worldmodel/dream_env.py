"""The dream: the substitution environment as the world model imagines it, from V and M
only. No real environment is touched: controller training runs the dream inside
`taso_env.engine.real_work.forbidden`, where any engine call or real env step raises.

    Dream         batched core (B parallel dreams, TF), what controller training uses
    DreamEnv      a gymnasium.Env over one dream, same observation layout

State of a dream: z_t [Z] (sampled from M's mixture, temperature tau), M's LSTM state and
the candidates: top_t [R, L], each rule's L most rewarding locations' rewards (-inf where
a rule has fewer), as the real env gives them (info["top_rewards"]). The controller sees
obs = [z_t, h_t] (h = the LSTM hidden state, [H]) and top_t; its action is a slot
(rule r, l) of top_t for r in its vocabulary `rules`, or stop (controller.policy).
Step t with slot (r, l):
    stop                  -> done, reward 0
    a slot that is empty  -> reward `invalid_penalty`, state unchanged
    otherwise             -> reward top_t[r, l] (the candidate's reward, less
                             `step_cost`, and `detour_cost` where it saves nothing;
                             with DreamConfig.reward "best_so_far", what the step's
                             graph saves beyond the dream's cheapest so far, less the
                             same charges);
                             M.step(z_t, move(r, l), state, that reward) gives the done
                             probability, the next
                             candidates (slot_logits > threshold, their slot_rewards) and
                             the mixture over z_{t+1}; z_{t+1} is sampled. With M's
                             carry_candidates, the next candidates are top_t carried over
                             (the taken slot gone, worldmodel/candidate_carry.py) except
                             where M predicts a slot changed (changed_logits > 0), where
                             they are M's. A dream whose candidates are all gone ends, as
                             the real env does.
The first candidates are those of the real start graph, read from the rollouts.

    z_0 ~ N(mu_0, sigma_0), top_0 of a real start graph (from the rollout file)
      |
      v
    [z_t, h_t], top_t --controller--> slot (r, l) --M--> done_t, top_{t+1}, z_{t+1}
"""

from __future__ import annotations

import gymnasium
import numpy as np
import sonnet as snt
import tensorflow as tf
from gymnasium import spaces

from worldmodel import candidate_carry
from worldmodel.configs import DreamConfig
from worldmodel.moves import move


def slot_mask(top: np.ndarray, rules) -> np.ndarray:
    """[B, len(rules) * L + 1] bool: the slots of `rules` that hold a candidate (a finite
    reward) in `top` [B, n_rules + 1, L], then stop (always): the controller's action mask,
    in the dream and on the real env alike."""
    top = np.asarray(top)
    exists = np.isfinite(top[:, np.asarray(rules)]).reshape(len(top), -1)
    return np.concatenate([exists, np.ones((len(top), 1), bool)], axis=1)


class Dream:
    """B parallel dreams driven in TF. Holds no reference to any real environment."""

    def __init__(self, vae, mdnrnn, start_latents: np.ndarray, start_candidates: np.ndarray,
                 config: DreamConfig, batch_size: int, seed: int = 0, rules=None):
        """Args:
            vae, mdnrnn: the GraphVAE and MDNRNN (trained, or untrained for an ablation).
            start_latents: [N, 2, Z] (mu, log_sigma) of real start graphs, encoded once.
            start_candidates: [N, R, L] their top_rewards (read from the rollouts).
            config: DreamConfig.
            batch_size: B, the number of parallel dreams.
            rules: the rule ids whose slots are actions (default: every rule).
        """
        start_latents = np.asarray(start_latents, np.float32)
        start_candidates = np.asarray(start_candidates, np.float32)
        if start_latents.ndim != 3 or start_latents.shape[1] != 2:
            raise ValueError(f"start_latents must be [N, 2, Z] (mu, log_sigma), got {start_latents.shape}")
        self.n_rules = int(mdnrnn.config.n_rules)
        self.top_locations = int(mdnrnn.config.top_locations)
        if start_candidates.shape != (len(start_latents), self.n_rules + 1, self.top_locations):
            expected = (len(start_latents), self.n_rules + 1, self.top_locations)
            raise ValueError(f"start_candidates must be [N, n_rules + 1, L] = {expected}, got {start_candidates.shape}")
        self.rules = np.arange(self.n_rules) if rules is None else np.asarray(rules, np.int64)
        self.vae, self.mdnrnn, self.config = vae, mdnrnn, config
        self.batch_size = batch_size
        self.start_latents = tf.constant(start_latents)
        self.start_candidates = start_candidates
        self.latent_dim = start_latents.shape[2]
        self.n_actions = len(self.rules) * self.top_locations + 1
        h = int(mdnrnn.config.hidden)
        self._transition = tf.function(self._transition_py, input_signature=[
            tf.TensorSpec([None, self.latent_dim], tf.float32), tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None], tf.float32), tf.TensorSpec([None, h], tf.float32),
            tf.TensorSpec([None, h], tf.float32), tf.TensorSpec([2], tf.int32)])
        self.stop = self.n_actions - 1
        self.rng = tf.random.Generator.from_seed(seed)
        self.seeds = np.random.default_rng(seed)  # stateless seeds for M's sampling
        self.z = self.state = self.top = None
        self.steps = np.zeros(batch_size, np.int32)
        # each dream's saving so far and its best (% of the start cost), for "best_so_far"
        self.saved = np.zeros(batch_size, np.float32)
        self.best = np.zeros(batch_size, np.float32)

    @property
    def hidden_size(self) -> int:
        return int(self.mdnrnn.config.hidden)

    @property
    def mask(self) -> np.ndarray:
        """[B, S + 1] the slots that hold a candidate, and stop."""
        return slot_mask(self.top, self.rules)

    def _transition_py(self, z, moves, taken, hidden, cell, seed):
        """M's step and the draw of z_{t+1}, traced once: (next z, next state, done
        probability, slot probabilities, slot rewards, whether each slot changed)."""
        out, state = self.mdnrnn.step(z, moves, snt.LSTMState(hidden=hidden, cell=cell), taken)
        next_z = self.mdnrnn.sample_z(out, self.config.tau, seed=seed)
        return (next_z, state.hidden, state.cell, tf.sigmoid(out.done_logit), tf.sigmoid(out.slot_logits),
                out.slot_rewards, out.changed_logits > 0)

    def _predicted_candidates(self, slot_prob: np.ndarray, slot_rewards: np.ndarray) -> np.ndarray:
        """top [B, R, L] from M's slot heads: a slot exists where its probability passes
        the threshold and the slots before it in its rule exist; its reward is M's
        E[reward * 1(exists)], shrunk where M is unsure of it (not divided by that
        probability: on the valley family that made M's small errors on fuse / unfuse
        rewards into cycles a controller learned to ride)."""
        exists = np.cumprod(slot_prob > self.config.mask_threshold, axis=2).astype(bool)
        return np.where(exists, slot_rewards, -np.inf).astype(np.float32)

    def _start(self, n: int):
        idx = self.rng.uniform([n], 0, self.start_latents.shape[0], dtype=tf.int32)
        mu_logsig = tf.gather(self.start_latents, idx)
        eps = self.rng.normal([n, self.latent_dim])
        z = mu_logsig[:, 0] + tf.exp(mu_logsig[:, 1]) * eps
        return z, self.mdnrnn.initial_state(n), self.start_candidates[idx.numpy()].copy()

    def reset(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts all B dreams; returns (observations [B, Z + H], candidates [B, R, L])."""
        self.z, self.state, self.top = self._start(self.batch_size)
        self.steps[:] = 0
        self.saved[:] = 0.0
        self.best[:] = 0.0
        return self.observation(), self.top.copy()

    def observation(self) -> np.ndarray:
        return np.concatenate([self.z.numpy(), self.state.hidden.numpy()], axis=1)

    def step(self, actions: np.ndarray):
        """Advances every dream by one slot action; dreams that end restart at once.

        Returns:
            (obs [B, Z+H], candidates [B, R, L], reward [B], done [B] (terminated),
            truncated [B], invalid [B]) for the new state (a restarted dream's start).
        """
        actions = np.asarray(actions, np.int32)
        rows = np.arange(self.batch_size)
        valid = self.mask[rows, actions]
        stop = actions == self.stop
        moving = ~stop & valid
        rules = np.where(moving, self.rules[np.minimum(actions // self.top_locations, len(self.rules) - 1)], 0)
        locations = np.where(moving, actions % self.top_locations, 0)
        moves = move(rules, np.where(moving, locations, -1), self.n_rules + 1)
        seed = tf.constant(self.seeds.integers(0, 2**31 - 1, 2), tf.int32)
        earned = np.where(moving, np.nan_to_num(self.top[rows, rules, locations], neginf=0.0), 0.0).astype(np.float32)
        next_z, hidden, cell, done_prob, slot_prob, slot_rewards, change = self._transition(
            self.z, tf.constant(moves, tf.int32), tf.constant(earned), self.state.hidden, self.state.cell, seed)
        new_state = snt.LSTMState(hidden=hidden, cell=cell)
        charge = self.config.step_cost + self.config.detour_cost * (earned <= 0)
        self.saved += earned
        gain = earned
        if self.config.reward == "best_so_far":
            gain = np.maximum(self.saved - self.best, 0.0)
        self.best = np.maximum(self.best, self.saved)
        reward = np.where(stop, 0.0, gain - charge).astype(np.float32)
        reward = np.where(~valid, self.config.invalid_penalty, reward).astype(np.float32)
        done_prob = done_prob.numpy()
        next_top = self._predicted_candidates(slot_prob.numpy(), slot_rewards.numpy())
        if self.mdnrnn.config.carry_candidates:
            carried = candidate_carry.carried(self.top, rules, np.where(moving, locations, -1))
            next_top = candidate_carry.merged(carried, next_top, change.numpy())
        moved = valid & ~stop
        no_candidates = ~np.isfinite(next_top[:, self.rules]).any(axis=(1, 2))
        terminated = stop | (moved & ((done_prob > self.config.done_threshold) | no_candidates))
        self.steps += 1
        truncated = ~terminated & (self.steps >= self.config.horizon)
        keep = tf.constant(moved[:, None])
        self.z = tf.where(keep, next_z, self.z)
        self.state = tf.nest.map_structure(lambda new, old: tf.where(keep, new, old), new_state, self.state)
        self.top = np.where(moved[:, None, None], next_top, self.top)
        ended = terminated | truncated
        if ended.any():
            z0, s0, t0 = self._start(self.batch_size)
            e = tf.constant(ended[:, None])
            self.z = tf.where(e, z0, self.z)
            self.state = tf.nest.map_structure(lambda a, b: tf.where(e, a, b), s0, self.state)
            self.top = np.where(ended[:, None, None], t0, self.top)
            self.steps[ended] = 0
            self.saved[ended] = 0.0
            self.best[ended] = 0.0
        return self.observation(), self.top.copy(), reward, terminated, truncated, ~valid


class DreamEnv(gymnasium.Env):
    """One dream as a gymnasium.Env: obs = {"obs": [z, h] float32 [Z + H], "candidates":
    top [R, L] with 0 where no candidate, "candidate_mask": [R, L] where one is};
    action = slot (Discrete(len(rules) * L + 1), the last is stop); info["action_mask"]
    the slots that hold a candidate."""

    metadata = {"render_modes": []}

    def __init__(self, vae, mdnrnn, start_latents: np.ndarray, start_candidates: np.ndarray,
                 config: DreamConfig | None = None, seed: int = 0, rules=None):
        self.config = config or DreamConfig()
        self._args = (vae, mdnrnn, start_latents, start_candidates)
        self._rules = rules
        self.dream = Dream(*self._args, self.config, batch_size=1, seed=seed, rules=rules)
        size = self.dream.latent_dim + self.dream.hidden_size
        shape = (self.dream.n_rules + 1, self.dream.top_locations)
        self.observation_space = spaces.Dict({
            "obs": spaces.Box(-np.inf, np.inf, (size,), np.float32),
            "candidates": spaces.Box(-np.inf, np.inf, shape, np.float32),
            "candidate_mask": spaces.MultiBinary(shape)})
        self.action_space = spaces.Discrete(self.dream.n_actions)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.dream = Dream(*self._args, self.config, 1, seed=seed, rules=self._rules)
        obs, top = self.dream.reset()
        return self._observation(obs[0], top[0]), {"action_mask": self.dream.mask[0].copy()}

    @staticmethod
    def _observation(obs: np.ndarray, top: np.ndarray) -> dict:
        exists = np.isfinite(top)
        return {"obs": obs.astype(np.float32), "candidates": np.where(exists, top, 0.0).astype(np.float32),
                "candidate_mask": exists.astype(np.int8)}

    def step(self, action):
        if self.dream.z is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        before, before_top = self.dream.observation(), self.dream.top.copy()
        obs, top, reward, terminated, truncated, invalid = self.dream.step(np.array([int(action)]))
        if terminated[0] or truncated[0]:
            obs, top = before, before_top  # the dream restarted; report the state that ended
        return (self._observation(obs[0], top[0]), float(reward[0]), bool(terminated[0]), bool(truncated[0]),
                {"action_mask": self.dream.mask[0].copy(), "invalid_action": bool(invalid[0])})
