"""Observations as graph_nets GraphsTuples: batching, conversion and tf.function specs.

The one thin layer between rlflow's observation format (taso_env/env/features.py) and
graph_nets. A *batch dict* is graph_nets' batched format in numpy:

    nodes      float32 [N, NODE_DIM]   the real node rows of every graph, concatenated
    edges      float32 [E, EDGE_DIM]   the real edge rows of every graph, concatenated
    senders    int32   [E]             absolute row of the producer in `nodes`
    receivers  int32   [E]             absolute row of the consumer in `nodes`
    globals    float32 [B, GLOBAL_DIM]
    n_node     int32   [B]             real nodes of each graph (sum = N)
    n_edge     int32   [B]             real edges of each graph (sum = E)

Padding rows of an observation never enter a batch dict, so they cannot influence a
model (graph_nets 1.1.0 has no padding helpers; dropping rows is simpler than masking).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf
from graph_nets import graphs

from taso_env.env.features import EDGE_DIM, GLOBAL_DIM, NODE_DIM, count

BATCH_FIELDS = ("nodes", "edges", "senders", "receivers", "globals", "n_node", "n_edge")


def batch_observations(observations: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Concatenates observations (padded or not) into one batch dict.

    Args:
        observations: dicts in the format of taso_env/env/features.py; rows at or beyond
            `n_node` / `n_edge` are padding and are dropped.

    Returns:
        A batch dict (module docstring) whose senders/receivers are offset by the node
        rows of the graphs before them.

    Raises:
        ValueError: no observations, or an observation whose indices point outside its
            real nodes.
    """
    if not observations:
        raise ValueError("batch_observations needs at least one observation")
    n_node = np.array([count(o, "n_node") for o in observations], np.int32)
    n_edge = np.array([count(o, "n_edge") for o in observations], np.int32)
    offsets = np.concatenate([[0], np.cumsum(n_node)[:-1]]).astype(np.int32)
    senders, receivers = [], []
    for i, (o, n, e, off) in enumerate(zip(observations, n_node, n_edge, offsets)):
        s, r = np.asarray(o["senders"][:e], np.int32), np.asarray(o["receivers"][:e], np.int32)
        if e and (min(s.min(), r.min()) < 0 or max(s.max(), r.max()) >= n):
            raise ValueError(f"observation {i}: senders/receivers outside its {n} real nodes")
        senders.append(s + off)
        receivers.append(r + off)
    return {
        "nodes": np.concatenate([np.asarray(o["nodes"][:n], np.float32)
                                 for o, n in zip(observations, n_node)]).reshape(-1, NODE_DIM),
        "edges": np.concatenate([np.asarray(o["edges"][:e], np.float32)
                                 for o, e in zip(observations, n_edge)]).reshape(-1, EDGE_DIM),
        "senders": np.concatenate(senders).astype(np.int32),
        "receivers": np.concatenate(receivers).astype(np.int32),
        "globals": np.stack([np.asarray(o["globals"], np.float32) for o in observations]),
        "n_node": n_node,
        "n_edge": n_edge,
    }


def placeholder_observation() -> dict[str, np.ndarray | int]:
    """An observation of one node of zero features and no edges: what a model's
    tf.functions are traced on before a real graph arrives (warming up an agent)."""
    return {"nodes": np.zeros((1, NODE_DIM), np.float32), "edges": np.zeros((0, EDGE_DIM), np.float32),
            "senders": np.zeros(0, np.int32), "receivers": np.zeros(0, np.int32),
            "globals": np.zeros(GLOBAL_DIM, np.float32), "n_node": 1, "n_edge": 0}


def check_batch(batch: Mapping[str, np.ndarray]) -> None:
    """Validates a batch dict's fields, shapes and index ranges.

    Raises:
        ValueError: naming the field that breaks the format.
    """
    missing = [f for f in BATCH_FIELDS if f not in batch]
    if missing:
        raise ValueError(f"batch lacks fields {missing}")
    n_graphs = len(batch["n_node"])
    n, e = int(np.sum(batch["n_node"])), int(np.sum(batch["n_edge"]))
    expected = {"nodes": (n, NODE_DIM), "edges": (e, EDGE_DIM), "senders": (e,), "receivers": (e,),
                "globals": (n_graphs, GLOBAL_DIM), "n_edge": (n_graphs,)}
    for field, shape in expected.items():
        if tuple(np.shape(batch[field])) != shape:
            raise ValueError(f"batch field {field!r} has shape {np.shape(batch[field])}, expected {shape}")
    for field in ("senders", "receivers"):
        idx = np.asarray(batch[field])
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"batch field {field!r} indexes outside the {n} nodes")


def to_graphs_tuple(batch: Mapping[str, np.ndarray]) -> graphs.GraphsTuple:
    """A batch dict (numpy) as a GraphsTuple of tf tensors with the signature's dtypes.

    Raises:
        ValueError: the batch breaks the format (see `check_batch`).
    """
    check_batch(batch)
    dtypes = {"nodes": tf.float32, "edges": tf.float32, "globals": tf.float32, "senders": tf.int32,
              "receivers": tf.int32, "n_node": tf.int32, "n_edge": tf.int32}
    return graphs.GraphsTuple(**{f: tf.convert_to_tensor(np.asarray(batch[f]), dtypes[f])
                                 for f in BATCH_FIELDS})


def graphs_tuple_signature() -> graphs.GraphsTuple:
    """tf.TensorSpecs of a GraphsTuple of any number of graphs, nodes and edges (for
    tf.function input signatures, so that a new batch size does not retrace)."""
    return graphs.GraphsTuple(
        nodes=tf.TensorSpec([None, NODE_DIM], tf.float32),
        edges=tf.TensorSpec([None, EDGE_DIM], tf.float32),
        senders=tf.TensorSpec([None], tf.int32),
        receivers=tf.TensorSpec([None], tf.int32),
        globals=tf.TensorSpec([None, GLOBAL_DIM], tf.float32),
        n_node=tf.TensorSpec([None], tf.int32),
        n_edge=tf.TensorSpec([None], tf.int32),
    )
