"""M's actions as moves: a rewrite's rule together with where it was taken.

A move is xfer + R * (place + 1), where place < L is the rank of the location taken among
that rule's L most rewarding (as info["top_rewards"] orders them), or just the xfer (< R)
where the location is unknown or not among them; R = n_rules + 1 (stop included). The same
rule can pay at one location and not at another (the valley family's entry): M reads the
move, so the dream can tell them apart. TensorFlow-free: the dataset and the agents share it.
"""

from __future__ import annotations

import numpy as np


def move(xfer, place, n_actions: int):
    """The move (module docstring) of `xfer` at its `place`-th most rewarding location
    (numpy arrays or ints); a negative place: the location is unknown, the move is the
    xfer. n_actions = R (n_rules + 1)."""
    xfer, place = np.asarray(xfer), np.asarray(place)
    return np.where(place >= 0, xfer + n_actions * (place + 1), xfer).astype(np.int32)


def xfer_and_place(moves, n_actions: int):
    """The inverse of `move`: (xfer, place) arrays, place -1 where the move is an xfer alone."""
    moves = np.asarray(moves)
    return (moves % n_actions).astype(np.int64), (moves // n_actions - 1).astype(np.int64)


def place_of_reward(reward, top_rewards, tolerance: float = 2e-3):
    """The rank of a rewrite's location among its rule's L most rewarding, from the reward
    it earned and the rule's row of info["top_rewards"] [..., L] before the step: the first
    slot whose reward matches within `tolerance` (relative, floor 1e-5: rollouts keep the
    candidates' rewards in float16), -1 where none does. Rollouts record rewards, not
    ranks."""
    reward, top = np.asarray(reward, np.float64), np.asarray(top_rewards, np.float64)
    allowed = np.maximum(tolerance * np.abs(reward), 1e-5)[..., None]
    close = np.isfinite(top) & (np.abs(top - reward[..., None]) <= allowed)
    return np.where(close.any(axis=-1), np.argmax(close, axis=-1), -1).astype(np.int32)


__all__ = ["move", "place_of_reward", "xfer_and_place"]
