"""The rollout file format (see taso_env.env.rollouts for the layout): constants,
errors, episode metadata, packing an episode, and one stored episode."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import h5py
import numpy as np

from taso_env.env.features import EDGE_DIM, GLOBAL_DIM, NODE_DIM, count
from taso_env.errors import TasoEnvError

FORMAT_VERSION = 1
EPISODE_FILE = re.compile(r"^episode_(\d+)\.h5$")
GRAPH_FIELDS = ("nodes", "edges", "senders", "receivers", "globals", "n_node", "n_edge")
STEP_FIELDS = ("actions", "rewards", "terminations", "truncations")
INFO_FIELDS = ("xfer_mask", "location_counts", "cost", "invalid_action")
# Recorded where the env gives it; files written before it existed lack it.
OPTIONAL_INFO_FIELDS = ("top_rewards",)
EPISODE_ATTRS = ("id", "seed", "graph", "total_steps", "horizon", "rule_set_hash", "n_rules", "cost_model")
_COMPRESSED = {"nodes", "edges", "senders", "receivers", "xfer_mask", "location_counts", "top_rewards"}


class RolloutFormatError(TasoEnvError, ValueError):
    """A rollout file is corrupt, truncated, misses a field or breaks the layout."""

    def __init__(self, path: str | os.PathLike, message: str):
        self.path = str(path)
        super().__init__(f"{self.path}: {message}")


class RuleSetMismatchError(RolloutFormatError):
    """Rollouts were recorded with another rule set than the one expected."""


class RolloutBusyError(TasoEnvError, RuntimeError):
    """Another process is writing the same rollout file."""


@dataclass(frozen=True)
class RolloutMeta:
    """What every episode of one rollout file shares (the index's root attributes)."""

    rule_set_hash: str
    n_rules: int
    cost_model: str
    horizon: int
    max_nodes: int
    max_edges: int
    max_locations: int
    env_config: str
    collect_config: str = ""
    node_dim: int = NODE_DIM
    edge_dim: int = EDGE_DIM
    collect_backend: str = ""  # what collected the episodes last, e.g. "ray 2.60.0 (local, 2 workers)"

    @classmethod
    def from_env(cls, env, collect_config: str = "", collect_backend: str = "") -> RolloutMeta:
        """The meta of rollouts recorded from `env` (a GraphRewriteEnv, possibly wrapped)."""
        base = env.unwrapped
        return cls(rule_set_hash=base.rules.hash, n_rules=base.n_rules, cost_model=base.config.cost_model,
                   horizon=base.config.horizon, max_nodes=base.max_nodes, max_edges=base.max_edges,
                   max_locations=base.config.max_locations,
                   env_config=json.dumps(asdict(base.config), sort_keys=True), collect_config=collect_config,
                   collect_backend=collect_backend)


def pack_episode(episode, *, episode_id: int, seed: int, meta: RolloutMeta, policy: str = "") -> dict:
    """Compacts an Episode (taso_env.env.episode) into the arrays and attributes of the file.

    Returns:
        {"arrays": {field path: array}, "attrs": {name: value}}: small enough to send
        between processes; `RolloutWriter.write` stores it.

    Raises:
        ValueError: the episode was not recorded (record=False) or a location mask is
            not a prefix mask.
    """
    obs, infos = episode.observations, episode.infos
    steps = len(episode.actions)
    if len(obs) != steps + 1 or len(infos) != steps + 1:
        raise ValueError(f"episode {episode_id}: {len(obs)} observations for {steps} steps; record it")
    n_node = np.array([count(o, "n_node") for o in obs], np.int32)
    n_edge = np.array([count(o, "n_edge") for o in obs], np.int32)
    loc_mask = np.stack([i["location_mask"] for i in infos])
    counts = loc_mask.sum(axis=2).astype(np.int16)
    if not np.array_equal(np.arange(loc_mask.shape[2]) < counts[..., None], loc_mask):
        raise ValueError(f"episode {episode_id}: a location_mask row is not a prefix mask")
    arrays = {
        "observations/nodes": np.concatenate([o["nodes"][:n] for o, n in zip(obs, n_node)]),
        "observations/edges": np.concatenate([o["edges"][:e] for o, e in zip(obs, n_edge)]),
        "observations/senders": np.concatenate([o["senders"][:e] for o, e in zip(obs, n_edge)]),
        "observations/receivers": np.concatenate([o["receivers"][:e] for o, e in zip(obs, n_edge)]),
        "observations/globals": np.stack([o["globals"] for o in obs]).astype(np.float32),
        "observations/n_node": n_node, "observations/n_edge": n_edge,
        "actions": np.asarray(episode.actions, np.int32).reshape(steps, 2),
        "rewards": np.asarray(episode.rewards, np.float32),
        "terminations": np.asarray(episode.terminations, bool),
        "truncations": np.asarray(episode.truncations, bool),
        "infos/xfer_mask": np.stack([i["xfer_mask"] for i in infos]).astype(bool),
        "infos/location_counts": counts,
        "infos/cost": np.array([i["cost"] for i in infos], np.float32),
        "infos/invalid_action": np.array([i.get("invalid_action", False) for i in infos], bool),
    }
    if all("top_rewards" in i for i in infos):
        arrays["infos/top_rewards"] = np.stack([i["top_rewards"] for i in infos]).astype(np.float32)
    m = episode.metrics
    attrs = {"id": episode_id, "seed": seed, "graph": m["graph"], "total_steps": steps,
             "horizon": meta.horizon, "rule_set_hash": meta.rule_set_hash, "n_rules": meta.n_rules,
             "cost_model": meta.cost_model, "policy": policy, "episode_return": m["return"],
             "initial_cost": m["initial_cost"], "final_cost": m["final_cost"]}
    return {"arrays": arrays, "attrs": attrs}


@dataclass(frozen=True)
class EncodedEpisode:
    """One episode as the complete bytes of its episode file (`encode_episode`): what a
    worker hands the writer, so compression happens in the worker and the writer only
    stores bytes."""

    episode_id: int
    total_steps: int
    rule_set_hash: str
    data: bytes


_IMAGES = itertools.count()


def encode_episode(packed: dict, episode_id: int) -> EncodedEpisode:
    """The episode file of a packed episode (pack_episode), built in memory.

    Every collection backend stores episodes through this function, so the same episode
    gives the same bytes whichever process or machine encoded it (with the same h5py and
    HDF5): no timestamps are recorded.
    """
    name = f"episode_{episode_id}_{os.getpid()}_{next(_IMAGES)}.h5"
    with h5py.File(name, "w", driver="core", backing_store=False) as f:
        for path, value in packed["arrays"].items():
            compress = path.rsplit("/", 1)[-1] in _COMPRESSED and value.size > 0
            f.create_dataset(path, data=value, **({"compression": "gzip", "shuffle": True} if compress else {}))
        f.attrs.update({**packed["attrs"], "id": episode_id})
        f.flush()
        data = f.id.get_file_image()
    attrs = packed["attrs"]
    return EncodedEpisode(episode_id, int(attrs["total_steps"]), str(attrs["rule_set_hash"]), bytes(data))


@dataclass
class EpisodeData:
    """One episode as stored (ragged observations) with helpers to index it.

    `arrays` maps the field paths of the module docstring to arrays; `attrs` holds the
    episode attributes; `node_start` / `edge_start` [T+2] are the row offsets of step t.
    """

    path: str
    arrays: dict
    attrs: dict
    node_start: np.ndarray
    edge_start: np.ndarray

    @property
    def num_steps(self) -> int:
        return len(self.arrays["actions"])

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def graph(self, t: int) -> dict[str, np.ndarray]:
        """Observation t unpadded (views: nodes [n, NODE_DIM], ..., n_node/n_edge scalars)."""
        a, (n0, n1), (e0, e1) = self.arrays, self.node_start[t:t + 2], self.edge_start[t:t + 2]
        return {"nodes": a["observations/nodes"][n0:n1], "edges": a["observations/edges"][e0:e1],
                "senders": a["observations/senders"][e0:e1],
                "receivers": a["observations/receivers"][e0:e1],
                "globals": a["observations/globals"][t], "n_node": a["observations/n_node"][t],
                "n_edge": a["observations/n_edge"][t]}

    def observation(self, t: int, max_nodes: int, max_edges: int) -> dict[str, np.ndarray]:
        """Observation t re-padded to these maxima (the env's format, features.py)."""
        g = self.graph(t)
        n, e = count(g, "n_node"), count(g, "n_edge")
        if n > max_nodes or e > max_edges:
            raise ValueError(f"step {t} has {n} nodes / {e} edges; maxima are {max_nodes} / {max_edges}")
        out = {"nodes": np.zeros((max_nodes, g["nodes"].shape[1]), np.float32),
               "edges": np.zeros((max_edges, g["edges"].shape[1]), np.float32),
               "senders": np.zeros(max_edges, np.int32), "receivers": np.zeros(max_edges, np.int32)}
        for name in out:
            out[name][: n if name == "nodes" else e] = g[name]
        return {**out, "globals": g["globals"].copy(), "n_node": np.array([n], np.int32),
                "n_edge": np.array([e], np.int32)}

    def location_mask(self, t: int, max_locations: int) -> np.ndarray:
        """info["location_mask"] of step t, [n_rules + 1, max_locations] bool."""
        return np.arange(max_locations) < self.arrays["infos/location_counts"][t][:, None]


def batch_graphs(graphs: Sequence[dict]) -> dict[str, np.ndarray]:
    """Unpadded single graphs (EpisodeData.graph) -> one GraphsTuple-style dict."""
    n_node = np.array([count(g, "n_node") for g in graphs], np.int32)
    offsets = np.concatenate([[0], np.cumsum(n_node)[:-1]]).astype(np.int32)
    return {"nodes": np.concatenate([g["nodes"] for g in graphs]),
            "edges": np.concatenate([g["edges"] for g in graphs]),
            "senders": np.concatenate([g["senders"] + o for g, o in zip(graphs, offsets)]),
            "receivers": np.concatenate([g["receivers"] + o for g, o in zip(graphs, offsets)]),
            "globals": np.stack([g["globals"] for g in graphs]), "n_node": n_node,
            "n_edge": np.array([count(g, "n_edge") for g in graphs], np.int32)}


def _empty_graph() -> dict[str, np.ndarray]:
    return {"nodes": np.zeros((0, NODE_DIM), np.float32), "edges": np.zeros((0, EDGE_DIM), np.float32),
            "senders": np.zeros(0, np.int32), "receivers": np.zeros(0, np.int32),
            "globals": np.zeros(GLOBAL_DIM, np.float32), "n_node": 0, "n_edge": 0}
