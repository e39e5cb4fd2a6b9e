"""The dream: the substitution environment as the world model imagines it, from V and M
only. No real environment is touched: controller training runs the dream inside
`taso_env.engine.real_work.forbidden`, where any engine call or real env step raises.

    Dream         batched core (B parallel dreams, TF), what controller training uses
    DreamEnv      a gymnasium.Env over one dream, same observation layout

State of a dream: z_t [Z] (sampled from M's mixture, temperature tau) and M's LSTM
state; the controller sees obs = [z_t, h_t] (h = the LSTM hidden state, [H]).
Step t with xfer a_t:
    a_t == stop           -> done, reward 0
    a_t masked out        -> reward `invalid_penalty`, state unchanged
    otherwise             -> M.step(z_t, a_t, state) gives the reward (less
                             `step_cost`), the done
                             probability, the next xfer mask and the mixture over
                             z_{t+1}; z_{t+1} is sampled.
The first xfer mask comes from V's decoder on z_0; later ones from M.

    z_0 ~ N(mu_0, sigma_0) of a real start graph (encoded once, before training)
      |
      v
    [z_t, h_t] --controller--> a_t --M--> r_t, done_t, mask_{t+1}, z_{t+1}
"""

from __future__ import annotations

import gymnasium
import numpy as np
import tensorflow as tf
from gymnasium import spaces

from worldmodel.configs import DreamConfig


class Dream:
    """B parallel dreams driven in TF. Holds no reference to any real environment."""

    def __init__(self, vae, mdnrnn, start_latents: np.ndarray, config: DreamConfig, batch_size: int,
                 seed: int = 0):
        """Args:
            vae, mdnrnn: trained GraphVAE and MDNRNN.
            start_latents: [N, 2, Z] (mu, log_sigma) of real start graphs, encoded once.
            config: DreamConfig.
            batch_size: B, the number of parallel dreams.
        """
        start_latents = np.asarray(start_latents, np.float32)
        if start_latents.ndim != 3 or start_latents.shape[1] != 2:
            raise ValueError(f"start_latents must be [N, 2, Z] (mu, log_sigma), got {start_latents.shape}")
        self.vae, self.mdnrnn, self.config = vae, mdnrnn, config
        self.batch_size = batch_size
        self.start_latents = tf.constant(start_latents)
        self.latent_dim = start_latents.shape[2]
        self.n_actions = int(mdnrnn.config.n_rules) + 1
        self.stop = self.n_actions - 1
        self.rng = tf.random.Generator.from_seed(seed)
        self.seeds = np.random.default_rng(seed)  # stateless seeds for M's sampling
        self.z = self.state = self.mask = None
        self.steps = np.zeros(batch_size, np.int32)

    @property
    def hidden_size(self) -> int:
        return int(self.mdnrnn.config.hidden)

    def _mask_from_logits(self, logits: tf.Tensor) -> np.ndarray:
        mask = tf.sigmoid(logits).numpy() > self.config.mask_threshold
        mask[:, self.stop] = True
        return mask

    def _start(self, n: int):
        idx = self.rng.uniform([n], 0, self.start_latents.shape[0], dtype=tf.int32)
        mu_logsig = tf.gather(self.start_latents, idx)
        eps = self.rng.normal([n, self.latent_dim])
        z = mu_logsig[:, 0] + tf.exp(mu_logsig[:, 1]) * eps
        mask = self._mask_from_logits(self.vae.decode(z)["mask_logits"])
        return z, self.mdnrnn.initial_state(n), mask

    def reset(self) -> np.ndarray:
        """Starts all B dreams; returns observations [B, Z + H]."""
        self.z, self.state, self.mask = self._start(self.batch_size)
        self.steps[:] = 0
        return self.observation()

    def observation(self) -> np.ndarray:
        return np.concatenate([self.z.numpy(), self.state.hidden.numpy()], axis=1)

    def step(self, actions: np.ndarray):
        """Advances every dream by one xfer; dreams that end restart at once.

        Returns:
            (obs [B, Z+H], reward [B], done [B] (terminated), truncated [B], mask [B, A]
            for the new observation, invalid [B]).
        """
        actions = np.asarray(actions, np.int32)
        valid = self.mask[np.arange(self.batch_size), actions]
        stop = actions == self.stop
        out, new_state = self.mdnrnn.step(self.z, tf.constant(np.where(stop | ~valid, 0, actions), tf.int32),
                                          self.state)
        predicted = out.reward.numpy()
        charge = self.config.step_cost + self.config.detour_cost * (predicted <= 0)
        reward = np.where(stop, 0.0, predicted - charge).astype(np.float32)
        reward = np.where(~valid, self.config.invalid_penalty, reward).astype(np.float32)
        done_prob = tf.sigmoid(out.done_logit).numpy()
        seed = tf.constant(self.seeds.integers(0, 2**31 - 1, 2), tf.int32)
        next_z = self.mdnrnn.sample_z(out, self.config.tau, seed=seed)
        next_mask = self._mask_from_logits(out.mask_logits)
        moved = valid & ~stop
        terminated = stop | (moved & (done_prob > self.config.done_threshold))
        self.steps += 1
        truncated = ~terminated & (self.steps >= self.config.horizon)
        keep = tf.constant(moved[:, None])
        self.z = tf.where(keep, next_z, self.z)
        self.state = tf.nest.map_structure(lambda new, old: tf.where(keep, new, old), new_state, self.state)
        self.mask = np.where(moved[:, None], next_mask, self.mask)
        ended = terminated | truncated
        if ended.any():
            z0, s0, m0 = self._start(self.batch_size)
            e = tf.constant(ended[:, None])
            self.z = tf.where(e, z0, self.z)
            self.state = tf.nest.map_structure(lambda a, b: tf.where(e, a, b), s0, self.state)
            self.mask = np.where(ended[:, None], m0, self.mask)
            self.steps[ended] = 0
        return self.observation(), reward, terminated, truncated, self.mask.copy(), ~valid


class DreamEnv(gymnasium.Env):
    """One dream as a gymnasium.Env: obs = [z, h] (float32 [Z + H]); action = xfer
    (Discrete(n_rules + 1), the last is stop); info["xfer_mask"] from M (V at t=0)."""

    metadata = {"render_modes": []}

    def __init__(self, vae, mdnrnn, start_latents: np.ndarray, config: DreamConfig | None = None, seed: int = 0):
        self.config = config or DreamConfig()
        self._start_latents, self._vae, self._mdnrnn = start_latents, vae, mdnrnn
        self.dream = Dream(vae, mdnrnn, start_latents, self.config, batch_size=1, seed=seed)
        size = self.dream.latent_dim + self.dream.hidden_size
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.action_space = spaces.Discrete(self.dream.n_actions)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self.dream = Dream(self._vae, self._mdnrnn, self._start_latents, self.config, 1, seed=seed)
        obs = self.dream.reset()
        return obs[0].astype(np.float32), {"xfer_mask": self.dream.mask[0].copy()}

    def step(self, action):
        if self.dream.z is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        before = self.dream.observation()
        obs, reward, terminated, truncated, mask, invalid = self.dream.step(np.array([int(action)]))
        if terminated[0] or truncated[0]:
            obs = before  # the dream restarted; report the state that ended (no next z)
        return (obs[0].astype(np.float32), float(reward[0]), bool(terminated[0]), bool(truncated[0]),
                {"xfer_mask": mask[0], "invalid_action": bool(invalid[0])})
