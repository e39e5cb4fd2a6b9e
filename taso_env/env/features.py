"""The observation format of GraphRewriteEnv: a graph as graph-net arrays.

This module is the one place that says what each field means; `check_observation`
enforces it. An observation is a dict of numpy arrays padded to fixed maxima (so that it
lives in a fixed gymnasium space and batches stack):

    nodes      float32 [max_nodes, NODE_DIM]  one row per op of the graph (graph inputs
               and weights included), row i = op id i; rows >= n_node are zero.
               Columns:
                 [0, NUM_OP_TYPES)   one-hot op type (OP_TYPES order, the C++ enum)
                 COST_COLUMN         log1p(estimated op cost in microseconds) / 10
                 CONSTANT_COLUMN     1 if the op's value is known before run time
                 OUTPUT_COLUMN       1 if an output of the op is a graph output
    edges      float32 [max_edges, EDGE_DIM]  one row per (producer output -> consumer
               input slot), in consumer order then slot order; rows >= n_edge are zero.
               Columns: the tensor's last 4 dims right-aligned as log2(1 + d) / 16 (0 where
               the rank is smaller), rank / 8, log2(1 + number of elements) / 32
    senders    int32 [max_edges]   producer op id of each edge (0 in padding)
    receivers  int32 [max_edges]   consumer op id of each edge (0 in padding)
    globals    float32 [GLOBAL_DIM]  current cost / initial cost, step / horizon,
               n_node / max_nodes
    n_node     int32 [1]           number of real node rows
    n_edge     int32 [1]           number of real edge rows

`n_node` / `n_edge` have shape (1,), not (): standard RL libraries (stable-baselines3's
checker and its Dict policies) index every observation field and reject 0-d ones. Read
them with `count(obs, "n_node")`, which accepts either shape (stored rollouts and older
callers hold plain scalars).

Indices are absolute within one observation (graph_nets' convention for a single
graph); batching offsets them (worldmodel.dataset does that).

The flat-action form (`rewrite_env.FlatCandidateActions`) adds one field, so that a
standard policy sees what each of its actions means:

    candidates float32 [max_candidates, CANDIDATE_DIM]  row k describes flat action k
               (the k-th candidate rewrite; rows past the offered candidates are zero).
               Columns:
                 0  1 if action k is a candidate rewrite (the action mask without stop)
                 1  the candidate's estimated cost delta, % of the episode's initial
                    cost, clipped to [-100, 100], / 10 (negative: the rewrite is faster)
                 2  sign(d) * log1p(100 * |d|) / 10 for that delta d (% as above): tells
                    apart the small deltas most rewrites have
                 3  1 if the delta is below -1e-9 % (the rewrite is estimated faster)
                 4  rule id / number of rules
                 5  first matched op id / max_nodes (where in the graph)
                 6  k / max_candidates (the rank in the offered order)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from gymnasium import spaces

from taso_env import _core
from taso_env.engine.graph import Graph

OP_TYPES: tuple[str, ...] = tuple(_core.list_op_types())
NUM_OP_TYPES = len(OP_TYPES)
COST_COLUMN = NUM_OP_TYPES
CONSTANT_COLUMN = NUM_OP_TYPES + 1
OUTPUT_COLUMN = NUM_OP_TYPES + 2
NODE_DIM = NUM_OP_TYPES + 3
EDGE_DIM = 6
GLOBAL_DIM = 3
FIELDS = ("nodes", "edges", "senders", "receivers", "globals", "n_node", "n_edge")
CANDIDATE_DIM = 7
# Upper bound of every float feature (all are normalised well below it).
FEATURE_MAX = 100.0


class ObservationLimitError(ValueError):
    """A graph has more nodes or edges than the observation's fixed maxima."""


def observation_space(max_nodes: int, max_edges: int) -> spaces.Dict:
    """The gymnasium space of observations padded to these maxima."""
    return spaces.Dict({
        "nodes": spaces.Box(0.0, FEATURE_MAX, (max_nodes, NODE_DIM), np.float32),
        "edges": spaces.Box(0.0, FEATURE_MAX, (max_edges, EDGE_DIM), np.float32),
        "senders": spaces.Box(0, max(max_nodes - 1, 0), (max_edges,), np.int32),
        "receivers": spaces.Box(0, max(max_nodes - 1, 0), (max_edges,), np.int32),
        "globals": spaces.Box(0.0, FEATURE_MAX, (GLOBAL_DIM,), np.float32),
        "n_node": spaces.Box(0, max_nodes, (1,), np.int32),
        "n_edge": spaces.Box(0, max_edges, (1,), np.int32),
    })


def candidate_space(max_candidates: int) -> spaces.Box:
    """The gymnasium space of the flat form's `candidates` field."""
    return spaces.Box(-FEATURE_MAX, FEATURE_MAX, (max_candidates, CANDIDATE_DIM), np.float32)


def candidate_features(rule_ids: np.ndarray, first_ops: np.ndarray, cost_deltas: np.ndarray, *,
                       initial_cost: float, n_rules: int, max_nodes: int, max_candidates: int) -> np.ndarray:
    """The `candidates` field (see the module docstring) of K <= max_candidates offered
    candidates, given in the flat action order: their rule ids, first matched op ids and
    estimated cost deltas (ms)."""
    k = len(rule_ids)
    if k > max_candidates:
        raise ValueError(f"{k} candidates for {max_candidates} rows")
    out = np.zeros((max_candidates, CANDIDATE_DIM), np.float32)
    if k == 0:
        return out
    pct = 100.0 * np.asarray(cost_deltas, np.float64) / initial_cost if initial_cost > 0 else np.zeros(k)
    out[:k, 0] = 1.0
    out[:k, 1] = np.clip(pct, -100.0, 100.0) / 10.0
    out[:k, 2] = np.sign(pct) * np.log1p(100.0 * np.abs(pct)) / 10.0
    out[:k, 3] = pct < -1e-9
    out[:k, 4] = np.asarray(rule_ids, np.float64) / max(n_rules, 1)
    out[:k, 5] = np.asarray(first_ops, np.float64) / max(max_nodes, 1)
    out[:k, 6] = np.arange(k) / max_candidates
    return out


def graph_size(graph: Graph) -> tuple[int, int]:
    """(nodes, edges) that `graph` needs in an observation."""
    return graph.core.sizes()


def graph_features(graph: Graph, *, op_costs: np.ndarray, initial_cost: float, step: int,
                   horizon: int, max_nodes: int, max_edges: int) -> dict[str, np.ndarray]:
    """The observation of `graph` (see the module docstring).

    Raises:
        ObservationLimitError: the graph needs more rows than max_nodes / max_edges.
    """
    types, constant, is_output, senders, receivers, dims, ranks, numels = graph.core.structure()
    n, e = len(types), len(senders)
    if n > max_nodes or e > max_edges:
        raise ObservationLimitError(
            f"graph {graph.name!r} has {n} nodes and {e} edges; the observation holds at most "
            f"{max_nodes} nodes and {max_edges} edges")
    nodes = np.zeros((max_nodes, NODE_DIM), np.float32)
    nodes[np.arange(n), types] = 1.0
    nodes[:n, COST_COLUMN] = np.log1p(np.asarray(op_costs, np.float64) * 1e3) / 10.0
    nodes[:n, CONSTANT_COLUMN] = constant
    nodes[:n, OUTPUT_COLUMN] = is_output
    edges = np.zeros((max_edges, EDGE_DIM), np.float32)
    if e:
        edges[:e, :4] = np.log2(1.0 + np.asarray(dims, np.float64).reshape(e, 4)) / 16.0
        edges[:e, 4] = np.asarray(ranks, np.float64) / 8.0
        edges[:e, 5] = np.log2(1.0 + np.asarray(numels, np.float64)) / 32.0
    snd = np.zeros(max_edges, np.int32)
    rcv = np.zeros(max_edges, np.int32)
    snd[:e], rcv[:e] = senders, receivers
    current = float(np.sum(op_costs))
    globals_ = np.array([min(current / initial_cost, FEATURE_MAX) if initial_cost > 0 else 1.0,
                         step / max(horizon, 1), n / max_nodes], np.float32)
    return {"nodes": nodes, "edges": edges, "senders": snd, "receivers": rcv, "globals": globals_,
            "n_node": np.array([n], np.int32), "n_edge": np.array([e], np.int32)}


def count(obs: Mapping[str, np.ndarray], name: str) -> int:
    """`obs[name]` ("n_node" or "n_edge") as an int, whether it is stored with shape (1,)
    (the env's observations) or as a scalar."""
    return int(np.asarray(obs[name]).reshape(-1)[0])


class LazyObservation(Mapping):
    """An observation computed on its first read (GraphRewriteEnv with
    `lazy_observations`): a read-only Mapping of the FIELDS, for agents that read few of
    the observations they are given (the dream-trained controller encodes the graph only
    at local optima). `compute` must not depend on state that changes later."""

    def __init__(self, compute):
        self._compute, self._obs = compute, None

    def _fields(self) -> dict[str, np.ndarray]:
        if self._obs is None:
            self._obs, self._compute = self._compute(), None
        return self._obs

    def __getitem__(self, name: str) -> np.ndarray:
        return self._fields()[name]

    def __iter__(self):
        return iter(FIELDS)

    def __len__(self) -> int:
        return len(FIELDS)


def check_observation(obs: Mapping[str, np.ndarray]) -> None:
    """Validates an observation against the format; ValueError naming the field."""
    missing = [f for f in FIELDS if f not in obs]
    if missing:
        raise ValueError(f"observation lacks fields {missing}")
    max_nodes, node_dim = obs["nodes"].shape
    max_edges = obs["edges"].shape[0]
    if node_dim != NODE_DIM or obs["edges"].shape[1] != EDGE_DIM:
        raise ValueError(f"nodes/edges have {node_dim}/{obs['edges'].shape[1]} columns, "
                         f"expected {NODE_DIM}/{EDGE_DIM}")
    for f in ("n_node", "n_edge"):
        if np.asarray(obs[f]).size != 1:
            raise ValueError(f"{f} must hold one count, got shape {np.asarray(obs[f]).shape}")
    n, e = count(obs, "n_node"), count(obs, "n_edge")
    if not (0 <= n <= max_nodes and 0 <= e <= max_edges):
        raise ValueError(f"n_node {n} / n_edge {e} outside [0, {max_nodes}] / [0, {max_edges}]")
    for f in ("senders", "receivers"):
        idx = obs[f][:e]
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{f} index outside the {n} real nodes")
    if obs["globals"].shape != (GLOBAL_DIM,):
        raise ValueError(f"globals has shape {obs['globals'].shape}, expected ({GLOBAL_DIM},)")
