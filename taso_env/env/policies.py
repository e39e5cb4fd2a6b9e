"""Policies that act in GraphRewriteEnv from (observation, info): the baselines used for
rollout collection and evaluation. A policy is any callable
`policy(obs, info, rng) -> action` with action = (xfer, location)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Policy = Callable[[dict, dict, np.random.Generator], np.ndarray]


def _stop(info: dict) -> np.ndarray:
    return np.array([len(info["xfer_mask"]) - 1, 0])


class RandomPolicy:
    """Uniform over valid rewrites; stops with probability `stop_prob` (and when no
    rewrite is left)."""

    def __init__(self, stop_prob: float = 0.0):
        if not 0.0 <= stop_prob <= 1.0:
            raise ValueError(f"stop_prob must be in [0, 1], got {stop_prob}")
        self.stop_prob = stop_prob

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        xfers = np.flatnonzero(info["xfer_mask"][:-1])
        if len(xfers) == 0 or rng.random() < self.stop_prob:
            return _stop(info)
        xfer = int(rng.choice(xfers))
        location = int(rng.choice(np.flatnonzero(info["location_mask"][xfer])))
        return np.array([xfer, location])


class GreedyPolicy:
    """The candidate with the lowest estimated cost delta; stops when none improves.
    With `epsilon`, a random valid rewrite instead (for diverse rollouts)."""

    def __init__(self, env, epsilon: float = 0.0):
        self.env = env.unwrapped
        self.epsilon = epsilon
        self._random = RandomPolicy()

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        if self.epsilon and rng.random() < self.epsilon:
            return self._random(obs, info, rng)
        best, best_delta = None, -1e-12
        for xfer in np.flatnonzero(info["xfer_mask"][:-1]):
            for loc, c in enumerate(self.env.candidates(int(xfer))):
                if c.cost_delta < best_delta:
                    best, best_delta = (int(xfer), loc), c.cost_delta
        return np.array(best) if best is not None else _stop(info)


class RandomXferBestLocation:
    """A uniformly random valid xfer, at that xfer's location with the lowest cost delta
    (how the controller's location head acts). The reward then depends only on the state
    and the xfer, which is what the world model M can learn from [z, xfer]."""

    def __init__(self, env, stop_prob: float = 0.0):
        self.env = env.unwrapped
        self._random = RandomPolicy(stop_prob)

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        xfer, _ = self._random(obs, info, rng)
        if xfer == len(info["xfer_mask"]) - 1:
            return _stop(info)
        deltas = [c.cost_delta for c in self.env.candidates(int(xfer))]
        return np.array([int(xfer), int(np.argmin(deltas))])


def make_policy(name: str, env, **kwargs) -> Policy:
    """A baseline policy by name: "random", "random_best_location", "greedy" or
    "epsilon_greedy"."""
    if name == "random":
        return RandomPolicy(**kwargs)
    if name == "random_best_location":
        return RandomXferBestLocation(env, **kwargs)
    if name == "greedy":
        return GreedyPolicy(env, **kwargs)
    if name == "epsilon_greedy":
        return GreedyPolicy(env, epsilon=kwargs.pop("epsilon", 0.3), **kwargs)
    raise ValueError(f"unknown policy {name!r}; use random, random_best_location, greedy or epsilon_greedy")
