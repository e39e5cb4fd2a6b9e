"""One episode loop for every agent: rollout collection, dream training and real
evaluation all call `run_episode`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Episode:
    """What one episode recorded: per step t the observation and info *before* the
    action (obs[t], infos[t]), the action, reward and end flags; plus the final
    observation (obs[T]) and summary metrics."""

    observations: list = field(default_factory=list)
    infos: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    terminations: list = field(default_factory=list)
    truncations: list = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


def run_episode(env, policy, seed: int, *, record: bool = True, options: dict | None = None) -> Episode:
    """Runs `policy` in `env` from `reset(seed=seed)` until termination or truncation.

    Returns:
        The Episode (observations and infos kept only with `record`); its `metrics` hold
        return, steps, initial/final cost, speedup, graph and wall time.
    """
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options=options)
    ep = Episode()
    initial_cost = info["initial_cost"]
    done = False
    while not done:
        action = np.asarray(policy(obs, info, rng))
        if record:
            ep.observations.append(obs)
            ep.infos.append(info)
        obs, reward, terminated, truncated, info = env.step(action)
        ep.actions.append(action)
        ep.rewards.append(reward)
        ep.terminations.append(terminated)
        ep.truncations.append(truncated)
        done = terminated or truncated
    if record:
        ep.observations.append(obs)
        ep.infos.append(info)
    ep.metrics = {
        "return": float(np.sum(ep.rewards)), "steps": len(ep.actions), "graph": info["graph"],
        "initial_cost": initial_cost, "final_cost": info["cost"],
        "speedup": initial_cost / info["cost"] if info["cost"] > 0 else float("inf"),
        "seconds": time.perf_counter() - start, "seed": seed,
    }
    return ep
