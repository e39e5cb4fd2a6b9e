"""The rollout file: episodes of GraphRewriteEnv in HDF5, its writer and its reader.

This module is the one place that says what the file holds; `RolloutReader` checks it.

Files (crash-safe appending)::

    runs/<name>/rollouts.h5                     index: root attributes + one HDF5
                                                external link per episode
    runs/<name>/rollouts.h5.episodes/
        episode_<i>.h5                          one complete episode per file

`rollouts.h5["episode_<i>"]` is an external link to the root group of
`rollouts.h5.episodes/episode_<i>.h5` (path relative to the index's folder), so plain
h5py sees one file with one group per episode. Every file is written under a temporary
name and `os.replace`d into place: an episode file is complete or absent, the index is
the old one or the new one. The index holds links only and is rebuilt from the episode
folder whenever a writer opens the run (leftover temporary files are deleted then), so a
process killed at any moment loses at most the episodes it had not written yet.

Root attributes of the index: `format_version`, `rule_set_hash`, `n_rules`,
`cost_model`, `horizon`, `max_nodes`, `max_edges`, `max_locations`, `node_dim`,
`edge_dim`, `env_config` (EnvConfig as JSON) and `collect_config` (JSON or "").

One episode of T steps (field names follow Minari; step t's observation and infos are
those *before* action t, index T is the final state)::

    observations/nodes      float32 [sum_n, NODE_DIM]   real node rows of obs 0..T, stacked
    observations/edges      float32 [sum_e, EDGE_DIM]   real edge rows, stacked
    observations/senders    int32   [sum_e]   producer node of each edge, local to its step
    observations/receivers  int32   [sum_e]   consumer node, local to its step
    observations/globals    float32 [T+1, GLOBAL_DIM]
    observations/n_node     int32   [T+1]     rows of step t = cumsum offsets of n_node
    observations/n_edge     int32   [T+1]
    actions                 int32   [T, 2]    (xfer, location); xfer == n_rules is stop
    rewards                 float32 [T]
    terminations            bool    [T]
    truncations             bool    [T]
    infos/xfer_mask         bool    [T+1, n_rules+1]
    infos/location_counts   int16   [T+1, n_rules+1]  valid locations per rule; the
                                              location_mask row is True for the first count
    infos/cost              float32 [T+1]     estimated cost (ms) under the env's cost model
    infos/invalid_action    bool    [T+1]

Episode attributes: `id`, `seed`, `graph`, `total_steps` (T), `horizon`,
`rule_set_hash`, `n_rules`, `cost_model`, `policy`, `episode_return`, `initial_cost`,
`final_cost`. Observation fields are gzip-compressed. Re-padded to the index's maxima an
observation equals what the env returned (taso_env/features.py), bit for bit.

Batches handed to learners follow graph_nets' GraphsTuple convention: `nodes`/`edges`
concatenated over graphs, `senders`/`receivers` offset by the cumulative node count,
`n_node`/`n_edge` per graph, `globals` stacked.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, fields

import h5py
import numpy as np

from taso_env.errors import TasoEnvError
from taso_env.features import EDGE_DIM, GLOBAL_DIM, NODE_DIM

FORMAT_VERSION = 1
EPISODE_FILE = re.compile(r"^episode_(\d+)\.h5$")
GRAPH_FIELDS = ("nodes", "edges", "senders", "receivers", "globals", "n_node", "n_edge")
STEP_FIELDS = ("actions", "rewards", "terminations", "truncations")
INFO_FIELDS = ("xfer_mask", "location_counts", "cost", "invalid_action")
EPISODE_ATTRS = ("id", "seed", "graph", "total_steps", "horizon", "rule_set_hash", "n_rules", "cost_model")
_COMPRESSED = {"nodes", "edges", "senders", "receivers", "xfer_mask", "location_counts"}


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

    @classmethod
    def from_env(cls, env, collect_config: str = "") -> RolloutMeta:
        """The meta of rollouts recorded from `env` (a GraphRewriteEnv, possibly wrapped)."""
        base = env.unwrapped
        return cls(rule_set_hash=base.rules.hash, n_rules=base.n_rules, cost_model=base.config.cost_model,
                   horizon=base.config.horizon, max_nodes=base.max_nodes, max_edges=base.max_edges,
                   max_locations=base.config.max_locations,
                   env_config=json.dumps(asdict(base.config), sort_keys=True), collect_config=collect_config)


def pack_episode(episode, *, episode_id: int, seed: int, meta: RolloutMeta, policy: str = "") -> dict:
    """Compacts an Episode (taso_env.episode) into the arrays and attributes of the file.

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
    n_node = np.array([o["n_node"] for o in obs], np.int32)
    n_edge = np.array([o["n_edge"] for o in obs], np.int32)
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
    m = episode.metrics
    attrs = {"id": episode_id, "seed": seed, "graph": m["graph"], "total_steps": steps,
             "horizon": meta.horizon, "rule_set_hash": meta.rule_set_hash, "n_rules": meta.n_rules,
             "cost_model": meta.cost_model, "policy": policy, "episode_return": m["return"],
             "initial_cost": m["initial_cost"], "final_cost": m["final_cost"]}
    return {"arrays": arrays, "attrs": attrs}


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class RolloutWriter:
    """The single writer of a rollout file; see the module docstring for the layout.

    Opening resumes: leftover temporary files are removed, the episodes already on disk
    are checked against `meta` and the index is rebuilt. `restart=True` deletes them
    instead. A lock file keeps a second writer off the same run.

    Args:
        path: the index file, e.g. runs/<name>/rollouts.h5.
        meta: what the episodes share; must match the episodes already there.
        restart: delete existing episodes first.
        index_interval_s: the index is rebuilt at most this often while writing (and
            always on flush/close).
        fsync: flush files to disk before they replace the old ones (survives power
            loss, not only a killed process).

    Raises:
        RuleSetMismatchError / RolloutFormatError: an existing episode has another rule
            set or meta, or cannot be read.
        RolloutBusyError: another writer holds the run.
    """

    def __init__(self, path: str | os.PathLike, meta: RolloutMeta, *, restart: bool = False,
                 index_interval_s: float = 2.0, fsync: bool = True):
        self.path = os.path.abspath(path)
        self.episode_dir = self.path + ".episodes"
        self.meta = meta
        self.index_interval_s = index_interval_s
        self.fsync = fsync
        os.makedirs(self.episode_dir, exist_ok=True)
        self._lock = open(self.path + ".lock", "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise RolloutBusyError(f"{self.path}: another process is writing these rollouts") from None
        try:
            self._recover(restart)
        except BaseException:
            self._lock.close()
            raise

    def _recover(self, restart: bool) -> None:
        """Deletes temporary files (and with restart the episodes), checks the episodes
        left and rebuilds the index from them."""
        if os.path.exists(self.path + ".tmp"):
            os.remove(self.path + ".tmp")
        for name in os.listdir(self.episode_dir):
            if name.endswith(".tmp") or (restart and EPISODE_FILE.match(name)):
                os.remove(os.path.join(self.episode_dir, name))
        self.episode_ids: set[int] = set()
        for name in sorted(os.listdir(self.episode_dir)):
            if match := EPISODE_FILE.match(name):
                self._check_existing(os.path.join(self.episode_dir, name), int(match.group(1)))
                self.episode_ids.add(int(match.group(1)))
        self._dirty = True
        self._last_index = 0.0
        self.flush()

    def _check_existing(self, path: str, episode_id: int) -> None:
        try:
            with h5py.File(path, "r") as f:
                attrs = {k: f.attrs[k] for k in ("id", "rule_set_hash", "n_rules", "cost_model", "horizon")}
        except (OSError, KeyError) as e:
            raise RolloutFormatError(path, f"unreadable episode file ({e}); delete it to recollect it") from e
        if attrs["rule_set_hash"] != self.meta.rule_set_hash:
            raise RuleSetMismatchError(path, f"recorded with rule set {attrs['rule_set_hash']}, this run "
                                             f"uses {self.meta.rule_set_hash}; use restart")
        for key in ("n_rules", "cost_model", "horizon"):
            if attrs[key] != getattr(self.meta, key):
                raise RolloutFormatError(path, f"recorded with {key}={attrs[key]!r}, this run uses "
                                               f"{getattr(self.meta, key)!r}; use restart")
        if attrs["id"] != episode_id:
            raise RolloutFormatError(path, f"attribute id {attrs['id']} differs from the file name")

    def _atomic_h5(self, final: str, fill) -> None:
        tmp = final + ".tmp"
        with h5py.File(tmp, "w") as f:
            fill(f)
        if self.fsync:
            _fsync_file(tmp)
        os.replace(tmp, final)

    def write(self, episode_id: int, packed: dict) -> None:
        """Stores one packed episode (pack_episode) atomically as episode `episode_id`."""
        if packed["attrs"]["rule_set_hash"] != self.meta.rule_set_hash:
            raise RuleSetMismatchError(self.path, f"episode {episode_id} has rule set "
                                                  f"{packed['attrs']['rule_set_hash']}")

        def fill(f: h5py.File) -> None:
            for name, value in packed["arrays"].items():
                compress = name.rsplit("/", 1)[-1] in _COMPRESSED and value.size > 0
                f.create_dataset(name, data=value, **({"compression": "gzip", "shuffle": True}
                                                      if compress else {}))
            f.attrs.update({**packed["attrs"], "id": episode_id})

        self._atomic_h5(os.path.join(self.episode_dir, f"episode_{episode_id}.h5"), fill)
        self.episode_ids.add(episode_id)
        self._dirty = True
        if time.monotonic() - self._last_index >= self.index_interval_s:
            self.flush()

    def flush(self) -> None:
        """Rebuilds the index now if episodes landed since the last rebuild."""
        if not self._dirty:
            return
        folder = os.path.basename(self.episode_dir)

        def fill(f: h5py.File) -> None:
            f.attrs.update({**asdict(self.meta), "format_version": FORMAT_VERSION})
            for i in sorted(self.episode_ids):
                f[f"episode_{i}"] = h5py.ExternalLink(f"{folder}/episode_{i}.h5", "/")

        self._atomic_h5(self.path, fill)
        self._dirty = False
        self._last_index = time.monotonic()

    def close(self) -> None:
        """Rebuilds the index and releases the run."""
        if self._lock.closed:
            return
        try:
            self.flush()
        finally:
            self._lock.close()

    def __enter__(self) -> RolloutWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
        n, e = int(g["n_node"]), int(g["n_edge"])
        if n > max_nodes or e > max_edges:
            raise ValueError(f"step {t} has {n} nodes / {e} edges; maxima are {max_nodes} / {max_edges}")
        out = {"nodes": np.zeros((max_nodes, g["nodes"].shape[1]), np.float32),
               "edges": np.zeros((max_edges, g["edges"].shape[1]), np.float32),
               "senders": np.zeros(max_edges, np.int32), "receivers": np.zeros(max_edges, np.int32)}
        for name in out:
            out[name][: n if name == "nodes" else e] = g[name]
        return {**out, "globals": g["globals"].copy(), "n_node": np.array(n, np.int32),
                "n_edge": np.array(e, np.int32)}

    def location_mask(self, t: int, max_locations: int) -> np.ndarray:
        """info["location_mask"] of step t, [n_rules + 1, max_locations] bool."""
        return np.arange(max_locations) < self.arrays["infos/location_counts"][t][:, None]


def batch_graphs(graphs: Sequence[dict]) -> dict[str, np.ndarray]:
    """Unpadded single graphs (EpisodeData.graph) -> one GraphsTuple-style dict."""
    n_node = np.array([g["n_node"] for g in graphs], np.int32)
    offsets = np.concatenate([[0], np.cumsum(n_node)[:-1]]).astype(np.int32)
    return {"nodes": np.concatenate([g["nodes"] for g in graphs]),
            "edges": np.concatenate([g["edges"] for g in graphs]),
            "senders": np.concatenate([g["senders"] + o for g, o in zip(graphs, offsets)]),
            "receivers": np.concatenate([g["receivers"] + o for g, o in zip(graphs, offsets)]),
            "globals": np.stack([g["globals"] for g in graphs]), "n_node": n_node,
            "n_edge": np.array([g["n_edge"] for g in graphs], np.int32)}


def _empty_graph() -> dict[str, np.ndarray]:
    return {"nodes": np.zeros((0, NODE_DIM), np.float32), "edges": np.zeros((0, EDGE_DIM), np.float32),
            "senders": np.zeros(0, np.int32), "receivers": np.zeros(0, np.int32),
            "globals": np.zeros(GLOBAL_DIM, np.float32), "n_node": 0, "n_edge": 0}


class RolloutReader:
    """Reads a rollout file (see the module docstring); holds no file open between calls.

    Args:
        path: the index file (runs/<name>/rollouts.h5).
        expected_rule_set_hash: if given, the rollouts must have been recorded with this
            rule set (e.g. `taso_env.rules.default().hash`).

    Raises:
        RolloutFormatError: the index is corrupt or truncated, lacks attributes, has
            another format version, or links to a missing episode file.
        RuleSetMismatchError: the rule set differs from `expected_rule_set_hash`.
    """

    def __init__(self, path: str | os.PathLike, expected_rule_set_hash: str | None = None):
        self.path = os.path.abspath(path)
        try:
            with h5py.File(self.path, "r") as f:
                attrs = dict(f.attrs)
                links = {name: f.get(name, getlink=True) for name in f}
        except OSError as e:
            raise RolloutFormatError(self.path, f"cannot read the rollout index ({e})") from e
        if attrs.get("format_version") != FORMAT_VERSION:
            raise RolloutFormatError(self.path, f"format_version {attrs.get('format_version')!r}, this "
                                                f"reader reads {FORMAT_VERSION}")
        missing = [f.name for f in fields(RolloutMeta) if f.name not in attrs]
        if missing:
            raise RolloutFormatError(self.path, f"index lacks root attributes {missing}")
        self.meta = RolloutMeta(**{f.name: _py(attrs[f.name]) for f in fields(RolloutMeta)})
        if expected_rule_set_hash is not None and self.meta.rule_set_hash != expected_rule_set_hash:
            raise RuleSetMismatchError(self.path, f"recorded with rule set {self.meta.rule_set_hash}, "
                                                  f"expected {expected_rule_set_hash}")
        self._files: dict[int, str] = {}
        folder = os.path.dirname(self.path)
        for name, link in links.items():
            match = re.fullmatch(r"episode_(\d+)", name)
            if not match or not isinstance(link, h5py.ExternalLink):
                raise RolloutFormatError(self.path, f"{name!r} is not an episode link")
            file = os.path.join(folder, link.filename)
            if not os.path.isfile(file):
                raise RolloutFormatError(self.path, f"{name} links to missing file {file}")
            self._files[int(match.group(1))] = file
        self.episode_ids: list[int] = sorted(self._files)

    def __len__(self) -> int:
        return len(self.episode_ids)

    def episode(self, episode_id: int) -> EpisodeData:
        """Loads and checks one episode.

        Raises:
            KeyError: no such episode.
            RolloutFormatError: the episode file is corrupt, truncated or inconsistent.
            RuleSetMismatchError: its rule set is not the index's.
        """
        path = self._files[episode_id]
        names = [f"observations/{f}" for f in GRAPH_FIELDS] + list(STEP_FIELDS) + [
            f"infos/{f}" for f in INFO_FIELDS]
        try:
            with h5py.File(path, "r") as f:
                missing = [n for n in names if n not in f]
                if missing:
                    raise RolloutFormatError(path, f"missing fields {missing}")
                arrays = {n: f[n][()] for n in names}
                attrs = {k: _py(v) for k, v in f.attrs.items()}
        except (OSError, KeyError, ValueError) as e:
            if isinstance(e, RolloutFormatError):
                raise
            raise RolloutFormatError(path, f"cannot read episode {episode_id} ({e})") from e
        if attrs.get("rule_set_hash") != self.meta.rule_set_hash:
            raise RuleSetMismatchError(path, f"rule set {attrs.get('rule_set_hash')}, the index has "
                                             f"{self.meta.rule_set_hash}")
        ep = EpisodeData(path, arrays, attrs, _offsets(arrays["observations/n_node"]),
                         _offsets(arrays["observations/n_edge"]))
        _check_episode(ep, self.meta)
        return ep

    def total_steps(self) -> int:
        """Environment steps recorded in all episodes (reads episode attributes only).

        Raises:
            RolloutFormatError: an episode file cannot be read or lacks `total_steps`.
        """
        total = 0
        for episode_id in self.episode_ids:
            path = self._files[episode_id]
            try:
                with h5py.File(path, "r") as f:
                    total += int(f.attrs["total_steps"])
            except (OSError, KeyError) as e:
                raise RolloutFormatError(path, f"cannot read total_steps of episode {episode_id} ({e})") from e
        return total

    def steps(self, episode_id: int) -> Iterator[dict]:
        """Transitions of one episode, observations padded as the env returned them:
        {observation, action, reward, terminated, truncated, next_observation,
        xfer_mask, location_mask, cost}."""
        ep, m = self.episode(episode_id), self.meta
        obs = ep.observation(0, m.max_nodes, m.max_edges)
        for t in range(ep.num_steps):
            nxt = ep.observation(t + 1, m.max_nodes, m.max_edges)
            yield {"observation": obs, "action": ep["actions"][t], "reward": ep["rewards"][t],
                   "terminated": ep["terminations"][t], "truncated": ep["truncations"][t],
                   "next_observation": nxt, "xfer_mask": ep["infos/xfer_mask"][t],
                   "location_mask": ep.location_mask(t, m.max_locations), "cost": ep["infos/cost"][t]}
            obs = nxt

    def _shuffled(self, items_of, make_batch, batch_size: int, rng, pool_episodes: int,
                  drop_remainder: bool) -> Iterator[dict]:
        """Batches of the items of all episodes, shuffled within pools of episodes loaded
        together; `items_of(episode)` lists (episode, index) items."""
        if batch_size < 1 or pool_episodes < 1:
            raise ValueError(f"batch_size and pool_episodes must be >= 1, got {batch_size}, {pool_episodes}")
        rng = rng if rng is not None else np.random.default_rng(0)
        ids, pending = rng.permutation(self.episode_ids), []
        for start in range(0, len(ids), pool_episodes):
            items = [item for i in ids[start:start + pool_episodes] for item in items_of(self.episode(int(i)))]
            pending += [items[k] for k in rng.permutation(len(items))]
            while len(pending) >= batch_size:
                yield make_batch(pending[:batch_size])
                pending = pending[batch_size:]
        if pending and not drop_remainder:
            yield make_batch(pending)

    def batches(self, batch_size: int, rng: np.random.Generator | None = None, *, transitions: bool = True,
                pool_episodes: int = 256, drop_remainder: bool = False) -> Iterator[dict]:
        """One shuffled pass over the steps, as graph-net batches.

        Steps are shuffled within pools of `pool_episodes` episodes (loaded together).

        Args:
            batch_size: items per batch (B).
            rng: shuffling; default seed 0.
            transitions: items are transitions t < T with next-step targets; otherwise
                every state t <= T (for the graph VAE).
            drop_remainder: skip the last, smaller batch.

        Yields:
            {"graphs": GraphsTuple dict of B graphs, "xfer_mask" [B, R+1],
            "location_counts" [B, R+1], "cost" [B], "episode" [B], "step" [B]}; with
            transitions also "actions" [B, 2], "rewards" [B], "terminations" [B],
            "truncations" [B], "next_graphs", "next_xfer_mask", "next_location_counts",
            "next_cost".
        """
        extra = 0 if transitions else 1
        return self._shuffled(lambda ep: [(ep, t) for t in range(ep.num_steps + extra)],
                              lambda items: _batch(items, transitions), batch_size, rng, pool_episodes,
                              drop_remainder)

    def sequences(self, seq_len: int, batch_size: int, rng: np.random.Generator | None = None, *,
                  include_graphs: bool = True, pool_episodes: int = 256,
                  drop_remainder: bool = False) -> Iterator[dict]:
        """Padded windows of `seq_len` steps for the MDN-RNN, one shuffled pass.

        Each episode is cut into windows starting at steps 0, L, 2L, ...; a short last
        window is padded and masked. Position l of window b is step start[b] + l.

        Yields:
            {"actions" [B, L, 2], "rewards" [B, L], "terminations" [B, L],
            "truncations" [B, L], "mask" [B, L] (real transitions),
            "obs_mask" [B, L+1] (real states), "xfer_mask" [B, L+1, R+1],
            "location_counts" [B, L+1, R+1], "cost" [B, L+1], "episode" [B], "start" [B]}
            and, with include_graphs, "graphs": a GraphsTuple dict of B * (L+1) graphs
            in row-major [b, l] order, empty graphs where obs_mask is False.
        """
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        return self._shuffled(lambda ep: [(ep, s) for s in range(0, ep.num_steps, seq_len)],
                              lambda windows: _sequence_batch(windows, seq_len, include_graphs), batch_size,
                              rng, pool_episodes, drop_remainder)


def _py(value):
    """HDF5 attribute -> plain Python value."""
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if isinstance(value, np.generic) else value


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])


def _check_episode(ep: EpisodeData, meta: RolloutMeta) -> None:
    """Shapes and indices against the layout; RolloutFormatError naming the field."""
    a, steps = ep.arrays, ep.num_steps

    def bad(field: str, message: str) -> RolloutFormatError:
        return RolloutFormatError(ep.path, f"{field}: {message}")

    expected = {"observations/globals": (steps + 1, GLOBAL_DIM), "observations/n_node": (steps + 1,),
                "observations/n_edge": (steps + 1,), "actions": (steps, 2), "rewards": (steps,),
                "terminations": (steps,), "truncations": (steps,),
                "infos/xfer_mask": (steps + 1, meta.n_rules + 1),
                "infos/location_counts": (steps + 1, meta.n_rules + 1), "infos/cost": (steps + 1,),
                "infos/invalid_action": (steps + 1,),
                "observations/nodes": (int(ep.node_start[-1]), meta.node_dim),
                "observations/edges": (int(ep.edge_start[-1]), meta.edge_dim),
                "observations/senders": (int(ep.edge_start[-1]),),
                "observations/receivers": (int(ep.edge_start[-1]),)}
    for name, shape in expected.items():
        if a[name].shape != shape:
            raise bad(name, f"shape {a[name].shape}, expected {shape}")
    missing = [k for k in EPISODE_ATTRS if k not in ep.attrs]
    if missing:
        raise bad("attributes", f"missing {missing}")
    if ep.attrs["total_steps"] != steps:
        raise bad("total_steps", f"attribute {ep.attrs.get('total_steps')} but {steps} actions")
    limit = np.repeat(a["observations/n_node"], a["observations/n_edge"])
    for name in ("observations/senders", "observations/receivers"):
        idx = a[name]
        if idx.size and (idx.min() < 0 or np.any(idx >= limit)):
            raise bad(name, "index outside its step's nodes")


def _batch(items: Sequence[tuple[EpisodeData, int]], transitions: bool) -> dict:
    def info(name: str, shift: int = 0) -> np.ndarray:
        return np.stack([ep[f"infos/{name}"][t + shift] for ep, t in items])

    out = {"graphs": batch_graphs([ep.graph(t) for ep, t in items]), "xfer_mask": info("xfer_mask"),
           "location_counts": info("location_counts"), "cost": info("cost"),
           "episode": np.array([ep.attrs["id"] for ep, _ in items], np.int32),
           "step": np.array([t for _, t in items], np.int32)}
    if transitions:
        for name in STEP_FIELDS:
            out[name] = np.stack([ep[name][t] for ep, t in items])
        out["next_graphs"] = batch_graphs([ep.graph(t + 1) for ep, t in items])
        for name in ("xfer_mask", "location_counts", "cost"):
            out[f"next_{name}"] = info(name, 1)
    return out


def _sequence_batch(windows: Sequence[tuple[EpisodeData, int]], seq_len: int, include_graphs: bool) -> dict:
    b, n_rules1 = len(windows), windows[0][0]["infos/xfer_mask"].shape[1]
    out = {"actions": np.zeros((b, seq_len, 2), np.int32), "rewards": np.zeros((b, seq_len), np.float32),
           "terminations": np.zeros((b, seq_len), bool), "truncations": np.zeros((b, seq_len), bool),
           "mask": np.zeros((b, seq_len), bool), "obs_mask": np.zeros((b, seq_len + 1), bool),
           "xfer_mask": np.zeros((b, seq_len + 1, n_rules1), bool),
           "location_counts": np.zeros((b, seq_len + 1, n_rules1), np.int16),
           "cost": np.zeros((b, seq_len + 1), np.float32),
           "episode": np.array([ep.attrs["id"] for ep, _ in windows], np.int32),
           "start": np.array([s for _, s in windows], np.int32)}
    graphs = []
    for k, (ep, s) in enumerate(windows):
        n = min(seq_len, ep.num_steps - s)
        for name in STEP_FIELDS:
            out[name][k, :n] = ep[name][s:s + n]
        out["mask"][k, :n] = True
        out["obs_mask"][k, :n + 1] = True
        for name in ("xfer_mask", "location_counts", "cost"):
            out[name][k, :n + 1] = ep[f"infos/{name}"][s:s + n + 1]
        if include_graphs:
            graphs += [ep.graph(s + i) if i <= n else _empty_graph() for i in range(seq_len + 1)]
    if include_graphs:
        out["graphs"] = batch_graphs(graphs)
    return out
