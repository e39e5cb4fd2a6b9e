"""The trained controller acting on the real environment.

At each real step: V encodes the real observation (z = mu), the controller reads
[z, h] and picks an xfer among those the real environment allows, the location head
picks that xfer's location, and M advances h with (z, xfer) — as in the dream, where h
summarises the episode so far. h is reset at every episode start.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from controller.location_head import LocationHead
from controller.policy import Controller
from worldmodel.graphs_tuple import batch_observations, to_graphs_tuple


class ControllerAgent:
    """A policy for `taso_env.env.episode.run_episode` (callable (obs, info, rng) -> action)."""

    def __init__(self, vae, mdnrnn, controller: Controller, location_head: LocationHead, env,
                 greedy: bool = True):
        self.vae, self.mdnrnn, self.controller = vae, mdnrnn, controller
        self.location_head, self.env, self.greedy = location_head, env.unwrapped, greedy
        self.state = None

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        if info["step"] == 0 or self.state is None:
            self.state = self.mdnrnn.initial_state(1)
        mu, _ = self.vae.encode(to_graphs_tuple(batch_observations([obs])))
        x = tf.concat([mu, self.state.hidden], axis=1)
        mask = tf.constant(info["xfer_mask"][None])
        seed = tf.constant(rng.integers(0, 2**31 - 1, 2), tf.int32)
        action, _, _ = self.controller.act(x, mask, seed=seed, greedy=self.greedy)
        xfer = int(action[0])
        _, self.state = self.mdnrnn.step(mu, tf.constant([xfer], tf.int32), self.state)
        stop = len(info["xfer_mask"]) - 1
        if xfer == stop:
            return np.array([stop, 0])
        deltas = np.array([c.cost_delta for c in self.env.candidates(xfer)])
        return np.array([xfer, self.location_head.choose(deltas, info["initial_cost"])])
