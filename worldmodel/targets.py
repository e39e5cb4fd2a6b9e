"""What the graph VAE reconstructs: per-graph targets computed from an observation and
its info (or the same fields read back from a rollout file).

For a batch of B graphs and R = n_rules + 1 actions (the last is stop):

    cost       float32 [B, 2]                globals[0] (= current cost / initial cost) and
                                             log(total estimated cost in ms)
    histogram  float32 [B, NUM_OP_TYPES]     fraction of each op type among the computing
                                             ops (not constant, not a graph input); sums to 1
    counts     float32 [B, R]                log1p(candidate locations per rule), as capped
                                             by the env's max_locations; stop counts 1
    mask       float32 [B, R]                the xfer mask (1 = valid); stop is always 1

These are what the dream needs from z: the cost (to report dreamed speedups), the graph's
composition, and which rules apply where (to mask the controller's xfer choice).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from taso_env.env.features import CONSTANT_COLUMN, NUM_OP_TYPES, OP_TYPES
from worldmodel.graphs_tuple import batch_observations

TARGET_KEYS = ("cost", "histogram", "counts", "mask")
_INPUT_TYPE = OP_TYPES.index("Input")
# Log of a cost that is zero (an empty graph): keeps the target finite.
_MIN_COST_MS = 1e-6


def batch_targets(batch: Mapping[str, np.ndarray], *, costs: np.ndarray, xfer_masks: np.ndarray,
                  location_counts: np.ndarray) -> dict[str, np.ndarray]:
    """Targets of every graph of a batch dict (worldmodel/graphs_tuple.py).

    Args:
        batch: the graphs, B of them.
        costs: [B] total estimated cost in ms (info["cost"]).
        xfer_masks: [B, R] info["xfer_mask"].
        location_counts: [B, R] candidate locations per rule (info["location_mask"]
            summed over locations; rollout files store it as infos/location_counts).

    Returns:
        The dict of the module docstring.

    Raises:
        ValueError: mismatched numbers of graphs or of rules.
    """
    n_node = np.asarray(batch["n_node"])
    n_graphs = len(n_node)
    xfer_masks = np.asarray(xfer_masks)
    location_counts = np.asarray(location_counts)
    if xfer_masks.ndim != 2 or xfer_masks.shape != location_counts.shape:
        raise ValueError(f"xfer_masks {xfer_masks.shape} and location_counts {location_counts.shape} "
                         "must both be [B, n_rules + 1]")
    if not len(costs) == len(xfer_masks) == n_graphs:
        raise ValueError(f"{n_graphs} graphs but {len(costs)} costs and {len(xfer_masks)} masks")
    nodes = np.asarray(batch["nodes"])
    graph_of_node = np.repeat(np.arange(n_graphs), n_node)
    types = np.argmax(nodes[:, :NUM_OP_TYPES], axis=1)
    computing = (nodes[:, CONSTANT_COLUMN] < 0.5) & (types != _INPUT_TYPE)
    histogram = np.zeros((n_graphs, NUM_OP_TYPES), np.float64)
    np.add.at(histogram, (graph_of_node[computing], types[computing]), 1.0)
    histogram /= np.maximum(histogram.sum(axis=1, keepdims=True), 1.0)
    cost_ratio = np.asarray(batch["globals"])[:, 0]
    log_cost = np.log(np.maximum(np.asarray(costs, np.float64), _MIN_COST_MS))
    return {
        "cost": np.stack([cost_ratio, log_cost], axis=1).astype(np.float32),
        "histogram": histogram.astype(np.float32),
        "counts": np.log1p(location_counts.astype(np.float64)).astype(np.float32),
        "mask": xfer_masks.astype(np.float32),
    }


def info_location_counts(info: Mapping) -> np.ndarray:
    """[R] candidate locations per rule from an env info (its location_mask)."""
    return np.asarray(info["location_mask"]).sum(axis=-1).astype(np.int32)


def observation_targets(observation: Mapping[str, np.ndarray], info: Mapping) -> dict[str, np.ndarray]:
    """Targets of one env observation and the info returned with it (a batch of one)."""
    return batch_targets(batch_observations([observation]), costs=np.array([info["cost"]]),
                         xfer_masks=np.asarray(info["xfer_mask"])[None],
                         location_counts=info_location_counts(info)[None])
