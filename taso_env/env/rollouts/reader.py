"""RolloutReader: checked reading of a rollout file and batches for learners."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, fields

import h5py
import numpy as np

from taso_env.env.features import GLOBAL_DIM
from taso_env.env.rollouts.format import (
    EPISODE_ATTRS,
    FORMAT_VERSION,
    GRAPH_FIELDS,
    INFO_FIELDS,
    OPTIONAL_INFO_FIELDS,
    STEP_FIELDS,
    EpisodeData,
    RolloutFormatError,
    RolloutMeta,
    RuleSetMismatchError,
    _empty_graph,
    batch_graphs,
)
from taso_env.env.rollouts.untrusted_open import check_in_child


class RolloutReader:
    """Reads a rollout file (see the module docstring); holds no file open between calls.

    Args:
        path: the index file (runs/<name>/rollouts.h5).
        expected_rule_set_hash: if given, the rollouts must have been recorded with this
            rule set (e.g. `taso_env.rules.default().hash`).
        untrusted: the file may be corrupt or crafted (not written by rlflow in its own
            run folder): it and its episode files are read once in a child process
            first, so that a crash of libhdf5 becomes a CorruptRolloutError instead of
            killing this process (taso_env/env/rollouts/untrusted_open.py).

    Raises:
        RolloutFormatError: the index is corrupt or truncated, lacks attributes, has
            another format version, or links to a missing episode file.
        CorruptRolloutError: with `untrusted`, reading the file crashed or hung libhdf5.
        RuleSetMismatchError: the rule set differs from `expected_rule_set_hash`.
    """

    def __init__(self, path: str | os.PathLike, expected_rule_set_hash: str | None = None, *,
                 untrusted: bool = False):
        self.path = os.path.abspath(path)
        if untrusted:
            check_in_child(self.path)
        try:
            with h5py.File(self.path, "r") as f:
                attrs = dict(f.attrs)
                links = {name: f.get(name, getlink=True) for name in f}
        except (OSError, KeyError, ValueError, RuntimeError, TypeError) as e:  # h5py's errors for corrupt files
            raise RolloutFormatError(self.path, f"cannot read the rollout index ({type(e).__name__}: {e})") from e
        if attrs.get("format_version") != FORMAT_VERSION:
            raise RolloutFormatError(self.path, f"format_version {attrs.get('format_version')!r}, this "
                                                f"reader reads {FORMAT_VERSION}")
        missing = [f.name for f in fields(RolloutMeta) if f.name not in attrs and f.default is MISSING]
        if missing:
            raise RolloutFormatError(self.path, f"index lacks root attributes {missing}")
        try:
            self.meta = RolloutMeta(**{f.name: _py(attrs[f.name]) for f in fields(RolloutMeta) if f.name in attrs})
        except (ValueError, TypeError) as e:  # an attribute of the wrong kind, bytes that are not UTF-8
            raise RolloutFormatError(self.path, f"root attributes unreadable ({type(e).__name__}: {e})") from None
        _check_meta(self.meta, self.path)
        if expected_rule_set_hash is not None and self.meta.rule_set_hash != expected_rule_set_hash:
            raise RuleSetMismatchError(self.path, f"recorded with rule set {self.meta.rule_set_hash}, "
                                                  f"expected {expected_rule_set_hash}")
        self._files: dict[int, str] = {}
        folder = os.path.dirname(self.path)
        for name, link in links.items():
            match = re.fullmatch(r"episode_(\d+)", name)
            if not match or not isinstance(link, h5py.ExternalLink):
                raise RolloutFormatError(self.path, f"{name!r} is not an episode link")
            if not isinstance(link.filename, str):
                raise RolloutFormatError(self.path, f"{name} links to a file name that is not text")
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
                arrays.update({f"infos/{n}": f[f"infos/{n}"][()] for n in OPTIONAL_INFO_FIELDS if f"infos/{n}" in f})
                attrs = {k: _py(v) for k, v in f.attrs.items()}
        except (OSError, KeyError, ValueError, RuntimeError, TypeError, AttributeError) as e:
            if isinstance(e, RolloutFormatError):
                raise
            raise RolloutFormatError(path, f"cannot read episode {episode_id} ({type(e).__name__}: {e})") from e
        recorded = attrs.get("rule_set_hash")
        if not isinstance(recorded, str) or recorded != self.meta.rule_set_hash:
            raise RuleSetMismatchError(path, f"rule set {recorded!r}, the index has "
                                             f"{self.meta.rule_set_hash}")
        for name in ("observations/n_node", "observations/n_edge"):
            counts = arrays[name]
            if not isinstance(counts, np.ndarray) or counts.ndim != 1 or counts.dtype.kind not in "iu" \
                    or (counts.size and counts.min() < 0):
                raise RolloutFormatError(path, f"{name}: must be a 1-d array of counts >= 0")
        ep = EpisodeData(path, arrays, attrs, _offsets(arrays["observations/n_node"]),
                         _offsets(arrays["observations/n_edge"]))
        try:
            _check_episode(ep, self.meta)
        except (ValueError, TypeError, IndexError, AttributeError) as e:
            if isinstance(e, RolloutFormatError):
                raise
            raise RolloutFormatError(path, f"episode {episode_id} breaks the layout ({type(e).__name__}: {e})") from e
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
            except (OSError, KeyError, ValueError, RuntimeError, TypeError) as e:
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


def _check_meta(meta: RolloutMeta, path: str) -> None:
    """The root attributes that size arrays are non-negative integers."""
    for name in ("n_rules", "horizon", "max_nodes", "max_edges", "max_locations", "node_dim", "edge_dim"):
        value = getattr(meta, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise RolloutFormatError(path, f"root attribute {name}: {value!r} is not a non-negative integer")
    if not isinstance(meta.rule_set_hash, str):
        raise RolloutFormatError(path, f"root attribute rule_set_hash: {meta.rule_set_hash!r} is not text")


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
    top = a.get("infos/top_rewards")
    if top is not None and (top.ndim != 3 or top.shape[:2] != (steps + 1, meta.n_rules + 1)
                            or top.dtype.kind != "f"):
        raise bad("infos/top_rewards", f"shape {top.shape} ({top.dtype}), expected ({steps + 1}, "
                                       f"{meta.n_rules + 1}, L) floats")
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
