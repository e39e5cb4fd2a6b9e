"""The location head: on the real graph, scores the candidates of the chosen xfer.

Locations exist only in the real environment (the dream models xfers), so the head is
a small linear scorer over per-candidate features computed from the real graph:

    features(c) = [cost delta as % of the start cost, rank of c by delta in [0, 1],
                   1 if c has the lowest delta of its xfer]
    score(c)    = w . features(c) + b           choose argmax

Its default weights prefer the candidate with the lowest estimated cost delta (the
immediate reward of a location is exactly -delta, in % of the start cost); `fit` refits
them by least squares on observed (features, reward) pairs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

NUM_FEATURES = 3


def candidate_features(deltas: np.ndarray, initial_cost: float) -> np.ndarray:
    """[K, NUM_FEATURES] features of K candidates with cost deltas `deltas` (ms)."""
    deltas = np.asarray(deltas, np.float64)
    k = len(deltas)
    feats = np.zeros((k, NUM_FEATURES))
    if k == 0:
        return feats
    feats[:, 0] = 100.0 * deltas / initial_cost
    ranks = np.argsort(np.argsort(deltas, kind="stable"), kind="stable")
    feats[:, 1] = ranks / max(k - 1, 1)
    feats[:, 2] = deltas == deltas.min()
    return feats


@dataclass
class LocationHead:
    weights: list = field(default_factory=lambda: [-1.0, -0.01, 0.0])
    bias: float = 0.0

    def scores(self, feats: np.ndarray) -> np.ndarray:
        return feats @ np.asarray(self.weights) + self.bias

    def choose(self, deltas: np.ndarray, initial_cost: float) -> int:
        """Index of the best-scored candidate."""
        if len(deltas) == 0:
            raise ValueError("no candidate to choose from")
        return int(np.argmax(self.scores(candidate_features(deltas, initial_cost))))

    def fit(self, feats: np.ndarray, rewards: np.ndarray) -> None:
        """Least-squares fit of the scores to observed immediate rewards."""
        x = np.concatenate([feats, np.ones((len(feats), 1))], 1)
        coef, *_ = np.linalg.lstsq(x, np.asarray(rewards, np.float64), rcond=None)
        self.weights, self.bias = [float(v) for v in coef[:-1]], float(coef[-1])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"weights": self.weights, "bias": self.bias}, indent=2))

    @classmethod
    def load(cls, path: str | Path) -> LocationHead:
        data = json.loads(Path(path).read_text())
        return cls(weights=list(data["weights"]), bias=float(data["bias"]))
