"""Rollouts as training data: a train / held-out split by episode, graph batches for V
and z sequences for M.

    train, held_out, reader = load_splits("runs/demo/rollouts.h5", DataConfig())
    graphs, targets = next(train.vae_batches(32, rng))       # V: batch dict + targets
    encoded = EncodedEpisodes(train, *encode_observations(train, vae_encode_fn))  # M
    batch = next(encoded.batches(16, rng))                    # z [B, L, Z], actions [B, L], ...

An `EpisodeSet` keeps the observations of its episodes in memory, compactly: the one-hot
op type of each node row is stored as one int8 (a node row is NUM_OP_TYPES one-hot
columns followed by a few real-valued ones, taso_env/env/features.py). On squeezenet,
resnet50, inception_v3 and bert_base that is ~15 KB per observation (V's targets
included), a quarter of the unpadded float32 rows: 100,000 steps fit in 1.5 GB.

The split is by episode id (a hash of (split_seed, id)), so an episode stays on its side
when a rollout file grows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import zlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from taso_env.env.features import GLOBAL_DIM, NODE_DIM, NUM_OP_TYPES
from taso_env.env.rollouts import RolloutReader
from worldmodel import candidate_carry
from worldmodel.configs import DataConfig
from worldmodel.moves import move, place_of_reward, xfer_and_place
from worldmodel.targets import TARGET_KEYS, batch_targets


class MissingCandidateRewardsError(ValueError):
    """Rollouts without infos/top_rewards (recorded before the env gave them)."""


def is_held_out(episode_id: int, fraction: float, seed: int) -> bool:
    """Whether an episode belongs to the held-out split (stable per (seed, id))."""
    return zlib.crc32(f"{seed}:{episode_id}".encode()) / 2**32 < fraction


class EpisodeSet:
    """Episodes of one split: their observations (compact), steps and V's targets.

    Observation k (over all episodes, in episode order) has node rows
    node_start[k]:node_start[k+1], edge rows edge_start[k]:edge_start[k+1]; episode j
    has observations obs_start[j] .. obs_start[j] + steps[j] (steps[j] + 1 of them) and
    steps step_start[j] .. step_start[j] + steps[j] - 1 of the per-step arrays.

    Args:
        arrays: the compact arrays (ARRAYS), as `from_episodes` makes them or as
            `save` wrote them.
    """

    ARRAYS = ("episode_ids", "node_types", "node_values", "edges", "senders", "receivers", "globals", "n_node",
              "n_edge", "steps", "xfers", "rewards", "terminations", "top_rewards",
              *(f"target_{k}" for k in TARGET_KEYS))

    def __init__(self, arrays: dict[str, np.ndarray]):
        missing = [k for k in self.ARRAYS if k not in arrays]
        if missing:
            raise ValueError(f"EpisodeSet arrays lack {missing}")
        for k in self.ARRAYS:
            setattr(self, k, np.asarray(arrays[k]))
        if not len(self.steps):
            raise ValueError("an EpisodeSet needs at least one episode")
        self.targets = {k: getattr(self, f"target_{k}") for k in TARGET_KEYS}
        self.node_start = np.concatenate([[0], np.cumsum(self.n_node, dtype=np.int64)])
        self.edge_start = np.concatenate([[0], np.cumsum(self.n_edge, dtype=np.int64)])
        self.obs_start = np.concatenate([[0], np.cumsum(self.steps + 1)])[:-1]
        self.step_start = np.concatenate([[0], np.cumsum(self.steps)])
        self.n_actions = self.targets["mask"].shape[1]

    @classmethod
    def from_episodes(cls, episodes: Sequence[tuple[int, dict]]) -> EpisodeSet:
        """From (episode id, arrays) pairs; arrays use the field paths of the rollout
        file (taso_env/env/rollouts.py), e.g. RolloutReader.episode(i).arrays.

        Raises:
            ValueError: no episodes, node rows that are not one-hot in the op type, or an
                action xfer outside the rule set.
        """
        if not episodes:
            raise ValueError("an EpisodeSet needs at least one episode")
        cat = lambda name: np.concatenate([a[name] for _, a in episodes])  # noqa: E731
        nodes = cat("observations/nodes")
        types = np.argmax(nodes[:, :NUM_OP_TYPES], axis=1)
        one_hot = nodes[:, :NUM_OP_TYPES]
        if not (np.all(one_hot[np.arange(len(types)), types] == 1.0) and np.all(one_hot.sum(1) == 1.0)):
            raise ValueError("node rows are not one-hot in their first NUM_OP_TYPES columns")
        xfers = np.asarray(cat("actions"), np.int32).reshape(-1, 2)[:, 0]
        n_actions = cat("infos/xfer_mask").shape[1]
        bad = np.flatnonzero((xfers < 0) | (xfers >= n_actions))
        if len(bad):
            raise ValueError(f"action xfer {xfers[bad[0]]} is outside the rule set's {n_actions} xfers "
                             f"(step {bad[0]} of the episodes' steps; {len(bad)} such steps)")
        lacking = [i for i, a in episodes if "infos/top_rewards" not in a]
        if lacking:
            raise MissingCandidateRewardsError(
                f"episodes {lacking[:5]}{' ...' if len(lacking) > 5 else ''} have no infos/top_rewards (the "
                "candidates' rewards the world model learns to predict): the rollouts were recorded before "
                "the env gave them; collect them again (rlflow collect --restart)")
        globals_ = cat("observations/globals").astype(np.float32).reshape(-1, GLOBAL_DIM)
        n_node = cat("observations/n_node").astype(np.int32)
        targets = batch_targets({"nodes": nodes, "n_node": n_node, "globals": globals_}, costs=cat("infos/cost"),
                                xfer_masks=cat("infos/xfer_mask"), location_counts=cat("infos/location_counts"))
        return cls({
            "episode_ids": np.array([i for i, _ in episodes], np.int64),
            "node_types": types.astype(np.int8),
            "node_values": np.ascontiguousarray(nodes[:, NUM_OP_TYPES:], np.float32),
            "edges": cat("observations/edges").astype(np.float32),
            "senders": cat("observations/senders").astype(np.int32),
            "receivers": cat("observations/receivers").astype(np.int32),
            "globals": globals_, "n_node": n_node, "n_edge": cat("observations/n_edge").astype(np.int32),
            "steps": np.array([len(a["actions"]) for _, a in episodes], np.int64),
            "xfers": xfers,
            "rewards": cat("rewards").astype(np.float32), "terminations": cat("terminations").astype(bool),
            "top_rewards": cat("infos/top_rewards").astype(np.float16),
            **{f"target_{k}": v for k, v in targets.items()}})

    def save(self, path: str) -> None:
        """Writes the arrays to `path` (.npz, uncompressed), atomically."""
        np.savez(path + ".tmp.npz", **{k: getattr(self, k) for k in self.ARRAYS})
        os.replace(path + ".tmp.npz", path)

    @classmethod
    def load(cls, path: str) -> EpisodeSet:
        with np.load(path) as f:
            return cls({k: f[k] for k in f.files})

    def episode_steps(self, name: str, j: int) -> np.ndarray:
        """Per-step array `name` ("xfers", "rewards", "terminations") of episode j."""
        return getattr(self, name)[self.step_start[j]:self.step_start[j + 1]]

    @property
    def num_observations(self) -> int:
        return len(self.n_node)

    @property
    def num_episodes(self) -> int:
        return len(self.steps)

    def graphs(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """Observations `indices` as one batch dict (worldmodel/graphs_tuple.py)."""
        indices = np.asarray(indices, np.int64)
        node_rows = np.concatenate([np.arange(self.node_start[k], self.node_start[k + 1]) for k in indices])
        edge_rows = np.concatenate([np.arange(self.edge_start[k], self.edge_start[k + 1]) for k in indices])
        n_node, n_edge = self.n_node[indices], self.n_edge[indices]
        nodes = np.zeros((len(node_rows), NODE_DIM), np.float32)
        nodes[np.arange(len(node_rows)), self.node_types[node_rows]] = 1.0
        nodes[:, NUM_OP_TYPES:] = self.node_values[node_rows]
        offsets = np.repeat(np.cumsum(n_node) - n_node, n_edge).astype(np.int32)
        return {"nodes": nodes, "edges": self.edges[edge_rows], "senders": self.senders[edge_rows] + offsets,
                "receivers": self.receivers[edge_rows] + offsets, "globals": self.globals[indices],
                "n_node": n_node, "n_edge": n_edge}

    def target_batch(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """V's targets (worldmodel/targets.py) of observations `indices`."""
        return {k: self.targets[k][np.asarray(indices)] for k in TARGET_KEYS}

    def vae_batches(self, batch_size: int, rng: np.random.Generator) -> Iterator[tuple[dict, dict]]:
        """Endless (graphs, targets) batches, each epoch a new permutation."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        while True:
            order = rng.permutation(self.num_observations)
            for start in range(0, len(order) - batch_size + 1, batch_size):
                chosen = np.sort(order[start:start + batch_size])
                yield self.graphs(chosen), self.target_batch(chosen)
            if len(order) < batch_size:
                yield self.graphs(order), self.target_batch(order)


def check_rule_count(path: str, n_rules: int) -> None:
    """Raises ValueError unless the rollouts at `path` were recorded with `n_rules` rules."""
    recorded = RolloutReader(path).meta.n_rules
    if recorded != n_rules:
        raise ValueError(f"the model has n_rules={n_rules} but {path} was recorded with {recorded} rules")


def load_splits(path: str, config: DataConfig, *, expected_rule_set_hash: str | None = None,
                progress: bool = False, cache_dir: str | None = None,
                ) -> tuple[EpisodeSet, EpisodeSet | None, RolloutReader]:
    """Reads a rollout file into (train, held_out, reader); held_out is None when no
    episode falls on that side (tiny files).

    With `cache_dir`, the two EpisodeSets are also saved there (one .npz per split) and
    read back on the next call for the same episode files and config, which is much
    faster than decompressing the rollouts again.
    """
    reader = RolloutReader(path, expected_rule_set_hash=expected_rule_set_hash)
    ids = reader.episode_ids[: config.max_episodes or None]
    if not ids:
        raise ValueError(f"{path} holds no episodes")
    held = [i for i in ids if is_held_out(i, config.held_out_fraction, config.split_seed)]
    if len(held) == len(ids):  # every episode hashed to held-out: keep one to train on
        held = held[:-1]
    held_set = set(held)
    sides = {"train": [i for i in ids if i not in held_set], "held_out": held}
    files = {}
    if cache_dir is not None:
        key = _cache_key(path, ids, config)
        files = {side: os.path.join(cache_dir, f"{side}_{key}.npz") for side in sides}
        if all(os.path.exists(f) or not sides[side] for side, f in files.items()):
            loaded = {side: EpisodeSet.load(f) if sides[side] else None for side, f in files.items()}
            return loaded["train"], loaded["held_out"], reader
    bar = tqdm(total=len(ids), desc="reading rollouts", unit="episode", disable=not progress)
    sets = {}
    with bar:
        for side, side_ids in sides.items():
            episodes = []
            for i in side_ids:
                episodes.append((i, reader.episode(i).arrays))
                bar.update(1)
            sets[side] = EpisodeSet.from_episodes(episodes) if episodes else None
    if cache_dir is not None:
        os.makedirs(cache_dir, exist_ok=True)
        for name in os.listdir(cache_dir):  # an older key: other episodes or settings
            if name.endswith(".npz") and name not in {os.path.basename(f) for f in files.values()}:
                os.remove(os.path.join(cache_dir, name))
        for side, episode_set in sets.items():
            if episode_set is not None:
                episode_set.save(files[side])
    return sets["train"], sets["held_out"], reader


def _cache_key(path: str, ids: Sequence[int], config: DataConfig) -> str:
    """Hash of the config and of every episode file's id, size and modification time
    (episode files are written once, atomically: a rewrite changes its time)."""
    folder = path + ".episodes"  # the layout of taso_env/env/rollouts.py
    stats = []
    for i in ids:
        st = os.stat(os.path.join(folder, f"episode_{i}.h5"))
        stats.append([int(i), st.st_size, st.st_mtime_ns])
    blob = json.dumps([dataclasses.asdict(config), stats, EpisodeSet.ARRAYS]).encode()  # new arrays: a new key
    return hashlib.sha1(blob).hexdigest()[:16]


def encode_observations(episodes: EpisodeSet, encode_fn: Callable, batch_size: int = 256,
                        progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(mu, log_sigma) [num_observations, Z]: `encode_fn(batch dict) -> (mu, log_sigma)`
    run over every observation of `episodes` in order."""
    mus, log_sigmas = [], []
    starts = range(0, episodes.num_observations, batch_size)
    for s in tqdm(starts, desc="encoding", unit="batch", disable=not progress):
        mu, log_sigma = encode_fn(episodes.graphs(np.arange(s, min(s + batch_size, episodes.num_observations))))
        mus.append(np.asarray(mu, np.float32))
        log_sigmas.append(np.asarray(log_sigma, np.float32))
    return np.concatenate(mus), np.concatenate(log_sigmas)


class EncodedEpisodes:
    """The episodes of an EpisodeSet as V posteriors, padded to the longest episode L.

    Arrays (J episodes, L steps, Z latents, R actions):
        mu, log_sigma  [J, L + 1, Z]   V's posterior of every observation
        actions        [J, L] int32     move of each step (worldmodel.moves.move: the xfer
                                        and its location's rank among the rule's best)
        rewards        [J, L]
        dones          [J, L]           terminated by step t
        next_masks     [J, L, R]        xfer mask after step t
        mask           [J, L]           1 on real steps
        next_obs       [J, L] int64     the observation after step t (its index in the
                                        EpisodeSet; 0 on padding), whose candidates'
                                        rewards (`top_rewards`) a batch gathers
    """

    def __init__(self, episodes: EpisodeSet, mu: np.ndarray, log_sigma: np.ndarray):
        if mu.shape != log_sigma.shape or len(mu) != episodes.num_observations:
            raise ValueError(f"mu {mu.shape} / log_sigma {log_sigma.shape} do not match "
                             f"{episodes.num_observations} observations")
        j, length, z = episodes.num_episodes, int(episodes.steps.max()), mu.shape[1]
        self.mu = np.zeros((j, length + 1, z), np.float32)
        self.log_sigma = np.zeros((j, length + 1, z), np.float32)
        self.actions = np.zeros((j, length), np.int32)
        self.rewards = np.zeros((j, length), np.float32)
        self.dones = np.zeros((j, length), np.float32)
        self.next_masks = np.zeros((j, length, episodes.n_actions), np.float32)
        self.mask = np.zeros((j, length), np.float32)
        self.next_obs = np.zeros((j, length), np.int64)
        self.top_rewards = episodes.top_rewards
        for e, (start, steps) in enumerate(zip(episodes.obs_start, episodes.steps)):
            rows = slice(start, start + steps + 1)
            self.mu[e, : steps + 1], self.log_sigma[e, : steps + 1] = mu[rows], log_sigma[rows]
            xfers, rewards = episodes.episode_steps("xfers", e), episodes.episode_steps("rewards", e)
            before = episodes.top_rewards[start:start + steps]
            places = place_of_reward(rewards, before[np.arange(steps), xfers])
            self.actions[e, :steps] = move(xfers, places, episodes.n_actions)
            self.rewards[e, :steps] = rewards
            self.dones[e, :steps] = episodes.episode_steps("terminations", e)
            self.next_masks[e, :steps] = episodes.targets["mask"][start + 1: start + steps + 1]
            self.mask[e, :steps] = 1.0
            self.next_obs[e, :steps] = np.arange(start + 1, start + steps + 1)

    @property
    def num_episodes(self) -> int:
        return len(self.actions)

    def sample_z(self, rng: np.random.Generator) -> np.ndarray:
        """[J, L + 1, Z] one draw of z from every posterior."""
        return self.mu + np.exp(self.log_sigma) * rng.standard_normal(self.mu.shape, np.float32)

    def batch(self, indices: Sequence[int], z: np.ndarray) -> dict[str, np.ndarray]:
        """Episodes `indices` of the z draw `z` as M's inputs and targets:
        {"z" [B, L, Z], "next_z" [B, L, Z], "actions", "rewards", "dones", "next_masks",
        "next_top_rewards" [B, L, R, K] (float32, -inf where a rule has fewer than K
        locations), "mask", "next_changed" [B, L, R, K] (float32: 1 where the next
        candidates differ from this step's carried over, worldmodel/candidate_carry)}."""
        idx = np.asarray(indices)
        next_top = self.top_rewards[self.next_obs[idx]].astype(np.float32)
        top = self.top_rewards[np.maximum(self.next_obs[idx] - 1, 0)]
        xfers, places = xfer_and_place(self.actions[idx], top.shape[-2])
        return {"z": z[idx, :-1], "next_z": z[idx, 1:], "actions": self.actions[idx],
                "rewards": self.rewards[idx], "dones": self.dones[idx], "next_masks": self.next_masks[idx],
                "next_top_rewards": next_top, "mask": self.mask[idx],
                "next_changed": candidate_carry.changed(next_top, top, xfers, places).astype(np.float32)}

    def batches(self, batch_size: int, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
        """Endless sequence batches; z is drawn afresh from V's posteriors every epoch."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        while True:
            z = self.sample_z(rng)
            order = rng.permutation(self.num_episodes)
            for start in range(0, max(len(order) - batch_size + 1, 1), batch_size):
                yield self.batch(order[start:start + batch_size], z)
