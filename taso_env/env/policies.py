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


class OptimumExplorer:
    """Rollouts that show what lies past a local optimum, from the candidates the env gives
    every agent (info["top_rewards"] / ["top_locations"]: no engine work of its own).

    While a rewrite improves: the best one with probability `best_prob`, else the best
    location of a rule drawn uniformly among the improving ones (so that after a losing
    rewrite the episode often goes on by a rewrite other than the undo greedy would take).
    At a local optimum: stop with probability `stop_prob`, else a losing rewrite that
    loses at most `max_loss` (reward units, % of the start cost: backtracking's alpha
    1.05 is 5), its rule drawn uniformly among those with such a candidate and its place
    among them uniformly; stop where none is that cheap. A valley's entry, then its
    payback, are in such episodes; greedy's are not."""

    def __init__(self, best_prob: float = 0.5, stop_prob: float = 0.1, max_loss: float = 5.0):
        for name, p in (("best_prob", best_prob), ("stop_prob", stop_prob)):
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {p}")
        if max_loss < 0:
            raise ValueError(f"max_loss must be >= 0, got {max_loss}")
        self.best_prob, self.stop_prob, self.max_loss = best_prob, stop_prob, max_loss

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        top = np.asarray(info["top_rewards"])[:-1]
        places = np.asarray(info["top_locations"])[:-1]
        exists = np.isfinite(top)
        improving = exists & (top > 1e-9)
        if improving.any():
            if rng.random() < self.best_prob:
                rule, place = np.unravel_index(int(np.argmax(np.where(exists, top, -np.inf))), top.shape)
            else:
                rule, place = int(rng.choice(np.flatnonzero(improving.any(axis=1)))), 0
        else:
            affordable = exists & (top >= -self.max_loss)
            if not affordable.any() or rng.random() < self.stop_prob:
                return _stop(info)
            rule = int(rng.choice(np.flatnonzero(affordable.any(axis=1))))
            place = int(rng.choice(np.flatnonzero(affordable[rule])))
        return np.array([int(rule), int(places[rule, place])])


def make_policy(name: str, env, **kwargs) -> Policy:
    """A baseline policy by name: "random", "random_best_location", "greedy",
    "epsilon_greedy" or "explore_optima"."""
    if name == "random":
        return RandomPolicy(**kwargs)
    if name == "random_best_location":
        return RandomXferBestLocation(env, **kwargs)
    if name == "greedy":
        return GreedyPolicy(env, **kwargs)
    if name == "epsilon_greedy":
        return GreedyPolicy(env, epsilon=kwargs.pop("epsilon", 0.3), **kwargs)
    if name == "explore_optima":
        return OptimumExplorer(**kwargs)
    raise ValueError(f"unknown policy {name!r}; use random, random_best_location, greedy, epsilon_greedy or "
                     "explore_optima")
