"""How a step's candidates carry over to the next step, the dream's prior for them.

A rewrite changes a graph in one place: most of the next step's candidates (each rule's
L most rewarding locations and their rewards, info["top_rewards"] [R, L]) are this
step's, less the one taken. `carried` is that guess: the taken rule's row without the
taken slot (its later slots move up one, the last is empty), every other row as it was.
`changed` marks the slots of the real next candidates that differ from the guess (a
candidate the rewrite created, removed or repriced); M (MDNRNNConfig.carry_candidates)
learns to predict these, and the dream (`merged`) takes M's candidate where it predicts
a change and the carried one elsewhere. So the dream does not re-imagine candidates a
rewrite did not touch: where M had to predict every slot from its state, it kept
imagining a ReLU fusion it had just done (docs/learned_agents.md).

TensorFlow-free, shared by the dataset (the targets) and the dream.
"""

from __future__ import annotations

import numpy as np

#: two rewards match within this relative tolerance (floor ABSOLUTE): rollouts keep them in float16
RELATIVE, ABSOLUTE = 2e-3, 1e-5


def carried(top: np.ndarray, xfer, place) -> np.ndarray:
    """The next candidates if the rewrite touched nothing but its own: top [..., R, L]
    (-inf where a rule has no candidate), the taken xfer [...] and its slot `place` [...]
    (< 0: the slot is unknown, or no rewrite, e.g. stop) -> [..., R, L]."""
    top = np.asarray(top, np.float32)
    lead, width = top.shape[:-2], top.shape[-1]
    flat = top.reshape(-1, *top.shape[-2:]).copy()
    xfer = np.broadcast_to(np.asarray(xfer), lead).reshape(-1)
    place = np.broadcast_to(np.asarray(place), lead).reshape(-1)
    steps = np.flatnonzero((place >= 0) & (place < width))
    rows = flat[steps, xfer[steps]]  # [n, L] the taken rules' rows
    padded = np.concatenate([rows, np.full((len(steps), 1), -np.inf, np.float32)], axis=1)
    slot = np.arange(width)[None]
    flat[steps, xfer[steps]] = np.take_along_axis(padded, slot + (slot >= place[steps, None]), axis=1)
    return flat.reshape(top.shape)


def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two candidate arrays agree: both empty, or both rewards within the tolerance."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    both_empty = ~np.isfinite(a) & ~np.isfinite(b)
    with np.errstate(invalid="ignore"):
        close = np.abs(a - b) <= np.maximum(RELATIVE * np.abs(b), ABSOLUTE)
    return both_empty | (np.isfinite(a) & np.isfinite(b) & close)


def changed(next_top: np.ndarray, top: np.ndarray, xfer, place) -> np.ndarray:
    """[..., R, L] bool: the slots of the real next candidates that `carried` gets wrong."""
    return ~same(next_top, carried(top, xfer, place))


def merged(carried_top: np.ndarray, predicted_top: np.ndarray, change: np.ndarray) -> np.ndarray:
    """The dream's next candidates: M's where it predicts a change (`change` [..., R, L]
    bool), the carried ones elsewhere; each rule's row then sorted best first, the empty
    slots last, as the env orders them."""
    top = np.where(change, predicted_top, carried_top).astype(np.float32)
    return -np.sort(-top, axis=-1)


__all__ = ["carried", "changed", "merged", "same"]
