"""RolloutWriter: the single, crash-safe writer of a rollout file."""

from __future__ import annotations

import fcntl
import os
import time
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict

import h5py

from taso_env.env.rollouts.format import (
    EPISODE_FILE,
    FORMAT_VERSION,
    EncodedEpisode,
    RolloutBusyError,
    RolloutFormatError,
    RolloutMeta,
    RuleSetMismatchError,
    encode_episode,
)

INDEX_SPACING = 10  # index rebuilds are at least this many rebuild durations apart


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
            always on flush/close); at least INDEX_SPACING times its last rebuild's
            duration apart, so rebuilding a large index (about 40 us per episode) stays
            under a tenth of the writer's time however many episodes the run has.
        fsync: flush files to disk before they replace the old ones (survives power
            loss, not only a killed process).
        write_threads: store episodes from this many threads, so their fsyncs overlap
            (an fsync waits on the disk, milliseconds, without using the CPU); an
            episode counts in `episode_ids` and the index once its file is in place.
            0: store each episode before `write` returns.

    Raises:
        RuleSetMismatchError / RolloutFormatError: an existing episode has another rule
            set or meta, or cannot be read.
        RolloutBusyError: another writer holds the run.
    """

    def __init__(self, path: str | os.PathLike, meta: RolloutMeta, *, restart: bool = False,
                 index_interval_s: float = 2.0, fsync: bool = True, write_threads: int = 0):
        self.path = os.path.abspath(path)
        self.episode_dir = self.path + ".episodes"
        self.meta = meta
        self.index_interval_s = index_interval_s
        self.fsync = fsync
        self._threads = write_threads
        self._pool: ThreadPoolExecutor | None = None
        self._pending: dict[Future, int] = {}
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
        self._index_every = self.index_interval_s
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
        self.write_encoded(encode_episode(packed, episode_id))

    def write_encoded(self, episode: EncodedEpisode) -> None:
        """Stores one encoded episode (encode_episode) atomically: its bytes under a
        temporary name, then renamed into place (in a writer thread with write_threads;
        a failed store raises from a later write, flush or close)."""
        if episode.rule_set_hash != self.meta.rule_set_hash:
            raise RuleSetMismatchError(self.path, f"episode {episode.episode_id} has rule set "
                                                  f"{episode.rule_set_hash}")
        if self._threads:
            self._pool = self._pool or ThreadPoolExecutor(self._threads, thread_name_prefix="rollout-writer")
            self._collect(wait=len(self._pending) >= 2 * self._threads)
            self._pending[self._pool.submit(self._store, episode)] = episode.episode_id
        else:
            self._store(episode)
            self.episode_ids.add(episode.episode_id)
            self._dirty = True
        if time.monotonic() - self._last_index >= self._index_every:
            self._rebuild_index()

    def _store(self, episode: EncodedEpisode) -> None:
        final = os.path.join(self.episode_dir, f"episode_{episode.episode_id}.h5")
        with open(final + ".tmp", "wb") as f:
            f.write(episode.data)
            if self.fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(final + ".tmp", final)

    def _collect(self, wait: bool, everything: bool = False) -> None:
        """Counts the stores that finished (waiting for one, or for all, if asked)."""
        if wait and self._pending:
            futures.wait(self._pending, return_when=futures.ALL_COMPLETED if everything else futures.FIRST_COMPLETED)
        for future in [f for f in self._pending if f.done()]:
            episode_id = self._pending.pop(future)
            future.result()  # a failed store raises here
            self.episode_ids.add(episode_id)
            self._dirty = True

    def flush(self) -> None:
        """Waits for the episodes being stored and rebuilds the index if any landed
        since the last rebuild."""
        self._collect(wait=True, everything=True)
        self._rebuild_index()

    def _rebuild_index(self) -> None:
        if not self._dirty:
            return
        folder = os.path.basename(self.episode_dir)

        def fill(f: h5py.File) -> None:
            f.attrs.update({**asdict(self.meta), "format_version": FORMAT_VERSION})
            for i in sorted(self.episode_ids):
                f[f"episode_{i}"] = h5py.ExternalLink(f"{folder}/episode_{i}.h5", "/")

        start = time.monotonic()
        self._atomic_h5(self.path, fill)
        self._dirty = False
        self._last_index = time.monotonic()
        self._index_every = max(self.index_interval_s, INDEX_SPACING * (self._last_index - start))

    def close(self) -> None:
        """Rebuilds the index and releases the run."""
        if self._lock.closed:
            return
        try:
            self.flush()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
            self._lock.close()

    def __enter__(self) -> RolloutWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
