"""Parallel rollout collection: K worker processes play episodes, one writer stores them.

    cfg = CollectConfig(graphs=("squeezenet", "bert_base"), episodes=1000, workers=4,
                        out="runs/demo/rollouts.h5")
    collect(cfg)              # rerun to resume; collect(cfg, restart=True) starts over

Episode i plays graph `graphs[i % len(graphs)]` from `reset(seed=seed + i)` with a
policy seeded the same way, so it does not depend on which worker ran it or on whether
the run was interrupted: a resumed run collects exactly the episodes an uninterrupted
one would have, and only those still missing. Workers (spawned processes) pull episode
ids from a task queue and send encoded episodes (the episode file's bytes,
`encode_episode`) back; the parent is the single writer
(taso_env.env.rollouts.RolloutWriter). Workers die with the parent, even on SIGKILL.
Each episode's attributes record the real work that played it (`LEDGER_ATTRS`, the
real-work ledger's columns; `collection_work` sums them over a rollout file).
With `ray` set the episodes run as Ray tasks instead (taso_env.env.ray_collection: the
same episodes, the same bytes, the same writer); without it Ray is never imported.

The run's settings are saved as the "collect" section of `runs/<name>/config.json`; a
rerun with different data-defining settings is refused (ConfigMismatchError) unless it
restarts. `workers` and `ray` may change between runs and `episodes` may grow.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue
import signal
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field

from tqdm import tqdm

from taso_env.engine import real_work
from taso_env.env.episode import run_episode
from taso_env.env.rollouts import (
    EncodedEpisode,
    RolloutFormatError,
    RolloutMeta,
    RolloutReader,
    RolloutWriter,
    encode_episode,
    pack_episode,
)
from taso_env.errors import ConfigError, TasoEnvError
from taso_env.run_folder import ConfigMismatchError, RunFolder

POLICIES = ("random", "random_best_location", "greedy", "epsilon_greedy", "explore_optima")
RESUMABLE_FIELDS = ("workers", "episodes", "out", "ray")  # may differ on a resumed run
COLLECT_SECTION = "collect"  # its section of runs/<name>/config.json
WRITE_THREADS = 4  # the writer's threads: their fsyncs overlap (RolloutWriter)


class CollectionError(TasoEnvError, RuntimeError):
    """A worker failed; the message carries its traceback or exit code."""


@dataclass(frozen=True)
class CollectConfig:
    """Settings of one rollout collection (saved to config.json).

    Attributes:
        graphs: built-in network names or ONNX paths; episode i plays graphs[i % n].
        episodes: episode ids 0..episodes-1 are collected.
        out: the rollout index file, runs/<name>/rollouts.h5.
        policy: "random", "random_best_location", "greedy", "epsilon_greedy" or
            "explore_optima" (taso_env.env.policies).
        workers: worker processes; 0 plays in this process. With ray: episodes in
            flight at once (0: one per CPU of the cluster), and a local Ray's CPUs.
        horizon / cost_model / max_locations: the env's settings (EnvConfig).
        seed: episode i uses seed + i.
        epsilon: random-action probability of epsilon_greedy.
        stop_prob: per-step stop probability of the random policies; explore_optima's
            at a local optimum (0: its default, 0.1).
        ray: run the episodes as Ray tasks (needs `pip install rlflow[ray]`): the flag
            alone ("local") starts a private Ray bound to 127.0.0.1 only; an address
            (host:port of a cluster's head, "auto", ray://host:10001) joins that
            cluster, whose nodes need rlflow installed. Empty: worker processes.
    """

    graphs: tuple[str, ...]
    episodes: int
    out: str
    policy: str = "random"
    workers: int = 1
    horizon: int = 50
    seed: int = 0
    cost_model: str = "analytic:h100"
    max_locations: int = 128
    epsilon: float = 0.3
    stop_prob: float = 0.0
    ray: str = field(default="", metadata={"const": "local", "metavar": "ADDRESS"})

    def __post_init__(self):
        object.__setattr__(self, "graphs", tuple(self.graphs))
        if not self.graphs:
            raise ConfigError("CollectConfig.graphs must name at least one graph")
        if self.episodes < 0 or self.workers < 0:
            raise ConfigError(f"episodes and workers must be >= 0, got {self.episodes}, {self.workers}")
        if self.policy not in POLICIES:
            raise ConfigError(f"unknown policy {self.policy!r}; use one of {POLICIES}")

    @property
    def run_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.out))

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


@dataclass
class CollectResult:
    """What one call of `collect` did."""

    collected: int  # episodes written by this call
    total: int  # episodes in the file now
    steps: int  # env steps of the episodes written by this call
    seconds: float
    backend: str = ""  # backend_name(cfg)
    driver_seconds: float = 0.0  # wall time this process spent on arrived episodes: fetching, writing, progress
    driver_cpu_seconds: float = 0.0  # CPU time of this process (all its threads) from the first arrival on


def backend_name(cfg: CollectConfig) -> str:
    """What collects the episodes, as the rollout index records it (collect_backend)."""
    if cfg.ray:
        from taso_env.ray_cluster import describe

        return describe(cfg.ray, cfg.workers)
    return "in-process" if cfg.workers == 0 else f"multiprocessing ({cfg.workers} workers)"


class DriverClock:
    """What collecting costs this process: `seconds` adds up the wall time of the `with`
    blocks (work on arrived episodes, not waiting); `cpu_seconds` is the CPU time of the
    whole process, every thread (Ray's receiving threads, the writer's), from the first
    block's start to the last one's end, so start-up is left out."""

    def __init__(self):
        self.seconds = 0.0
        self._cpu_first: float | None = None
        self._cpu_last = 0.0

    @property
    def cpu_seconds(self) -> float:
        return 0.0 if self._cpu_first is None else self._cpu_last - self._cpu_first

    def __enter__(self) -> DriverClock:
        if self._cpu_first is None:
            self._cpu_first = time.process_time()
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds += time.perf_counter() - self._start
        self._cpu_last = time.process_time()


def make_env(cfg: CollectConfig):
    """The GraphRewriteEnv every worker plays in."""
    from taso_env.env.rewrite_env import EnvConfig, GraphRewriteEnv

    env_cfg = EnvConfig(graphs=cfg.graphs, horizon=cfg.horizon, cost_model=cfg.cost_model,
                        max_locations=cfg.max_locations)
    return GraphRewriteEnv(list(cfg.graphs), config=env_cfg)


def make_collect_policy(cfg: CollectConfig, env):
    """The policy named by cfg.policy with its settings."""
    from taso_env.env.policies import make_policy

    kwargs = {"random": {"stop_prob": cfg.stop_prob}, "random_best_location": {"stop_prob": cfg.stop_prob},
              "greedy": {},
              "epsilon_greedy": {"epsilon": cfg.epsilon},
              "explore_optima": {"stop_prob": cfg.stop_prob} if cfg.stop_prob else {}}[cfg.policy]
    return make_policy(cfg.policy, env, **kwargs)


LEDGER_ATTRS = tuple(f"real_work_{column}" for column in real_work.LEDGER)
"""Episode attributes holding the real work that played the episode (`real_work.ledger`
of its reset, steps and the policy's own look-ups and cost queries)."""


def play_counted(env, policy, seed: int, *, episode_id: int, meta: RolloutMeta, policy_name: str,
                 options: dict | None = None) -> dict:
    """Plays one episode and packs it, its real work (`LEDGER_ATTRS`) among its attributes:
    what every collection, the controller's exploring one included, stores."""
    before = real_work.counts()
    episode = run_episode(env, policy, seed, options=options)
    work = real_work.ledger(real_work.since(before))
    packed = pack_episode(episode, episode_id=episode_id, seed=seed, meta=meta, policy=policy_name)
    packed["attrs"].update({f"real_work_{column}": value for column, value in work.items()})
    return packed


def play(cfg: CollectConfig, env, policy, meta: RolloutMeta, episode_id: int) -> dict:
    """Plays episode `episode_id` (graph and seed from the id) and packs it."""
    graph = env.graph_names[episode_id % len(env.graph_names)]
    return play_counted(env, policy, cfg.seed + episode_id, episode_id=episode_id, meta=meta, policy_name=cfg.policy,
                        options={"graph": graph})


def collection_work(path: str | os.PathLike) -> dict[str, int] | None:
    """The real work that played every episode of the rollout file `path`, summed by
    ledger column (`real_work.LEDGER`); None where an episode does not record it (one
    collected before episodes carried it).

    Raises:
        RolloutFormatError: the index or an episode file cannot be read.
    """
    import h5py

    total = dict.fromkeys(real_work.LEDGER, 0)
    reader = RolloutReader(path)
    try:
        with h5py.File(reader.path, "r") as index:  # each episode an external link: its attributes only are read
            for episode_id in reader.episode_ids:
                attrs = index[f"episode_{episode_id}"].attrs
                if any(name not in attrs for name in LEDGER_ATTRS):
                    return None
                for column, name in zip(real_work.LEDGER, LEDGER_ATTRS):
                    total[column] += int(attrs[name])
    except (OSError, KeyError) as e:
        raise RolloutFormatError(reader.path, f"cannot read the episodes' real work ({e})") from e
    return total


def play_encoded(cfg: CollectConfig, env, policy, meta: RolloutMeta, episode_id: int) -> EncodedEpisode:
    """Plays episode `episode_id` and encodes it as its episode file: what every
    backend's workers return."""
    return encode_episode(play(cfg, env, policy, meta, episode_id), episode_id)


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl
        os._exit(1)


def _worker(cfg: CollectConfig, meta: RolloutMeta, tasks, results, parent_pid: int) -> None:
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    episode_id = None
    try:
        env = make_env(cfg)
        policy = make_collect_policy(cfg, env)
        while (episode_id := tasks.get()) is not None and os.getppid() == parent_pid:
            results.put(("episode", episode_id, play_encoded(cfg, env, policy, meta, episode_id)))
    except BaseException:  # report everything, the parent decides
        results.put(("error", episode_id, traceback.format_exc()))


def check_config(cfg: CollectConfig, restart: bool = False) -> None:
    """Refuses to resume a run whose config.json has other data-defining settings.

    Raises:
        ConfigMismatchError: naming the differing fields.
    """
    if not restart:
        RunFolder(cfg.run_dir).check_section(COLLECT_SECTION, json.loads(cfg.to_json()), resumable=RESUMABLE_FIELDS)


def save_config(cfg: CollectConfig) -> None:
    """Writes cfg as the "collect" section of config.json (other sections are kept)."""
    RunFolder(cfg.run_dir).save_section(COLLECT_SECTION, json.loads(cfg.to_json()))


def collect(cfg: CollectConfig, *, restart: bool = False, progress: bool | None = None) -> CollectResult:
    """Collects the episodes of `cfg` still missing from cfg.out (all with restart).

    Args:
        cfg: the collection's settings.
        restart: delete the run's episodes first and ignore its saved settings.
        progress: show a tqdm bar (default: when stderr is a terminal).

    Raises:
        ConfigMismatchError: resuming with other settings (see check_config), or fewer
            episodes than the run already has.
        RuleSetMismatchError: the stored episodes used another rule set.
        CollectionError: a worker failed.
        RayUnavailableError / RayClusterError: `cfg.ray` is set but Ray is not installed
            or its cluster cannot be started or reached (taso_env.ray_cluster).
    """
    start = time.perf_counter()
    check_config(cfg, restart)
    os.makedirs(cfg.run_dir, exist_ok=True)
    env = make_env(cfg)
    backend = backend_name(cfg)
    meta = RolloutMeta.from_env(env, collect_config=cfg.to_json(), collect_backend=backend)
    with RolloutWriter(cfg.out, meta, restart=restart, write_threads=WRITE_THREADS) as writer:
        extra = sorted(i for i in writer.episode_ids if i >= cfg.episodes)
        if extra:
            raise ConfigMismatchError(cfg.out, {"episodes": (max(writer.episode_ids) + 1, cfg.episodes)})
        save_config(cfg)
        todo = [i for i in range(cfg.episodes) if i not in writer.episode_ids]
        bar = tqdm(total=cfg.episodes, initial=cfg.episodes - len(todo), unit="episode",
                   disable=not (sys.stderr.isatty() if progress is None else progress))
        steps = 0
        clock = DriverClock()
        with bar:
            for episode in _episodes(cfg, meta, env, todo, clock):
                with clock:
                    writer.write_encoded(episode)
                    steps += episode.total_steps
                    bar.update(1)
                    bar.set_postfix(steps_per_s=f"{steps / (time.perf_counter() - start):.0f}")
            with clock:
                writer.flush()  # the episodes still being stored
        total = len(writer.episode_ids)
    return CollectResult(len(todo), total, steps, time.perf_counter() - start, backend, clock.seconds,
                         clock.cpu_seconds)


def _episodes(cfg: CollectConfig, meta: RolloutMeta, env, todo: list[int], clock: DriverClock):
    """The encoded episode of every id in `todo`, in completion order."""
    if not todo:
        return
    if cfg.ray:
        from taso_env.env.ray_collection import ray_episodes

        yield from ray_episodes(cfg, meta, todo, clock)
        return
    if cfg.workers == 0:
        policy = make_collect_policy(cfg, env)
        for i in todo:
            yield play_encoded(cfg, env, policy, meta, i)
        return
    ctx = mp.get_context("spawn")
    tasks, results = ctx.Queue(), ctx.Queue()
    for i in todo:
        tasks.put(i)
    workers = [ctx.Process(target=_worker, args=(cfg, meta, tasks, results, os.getpid()), daemon=True)
               for _ in range(min(cfg.workers, len(todo)))]
    for w in workers:
        tasks.put(None)
        w.start()
    finished = False
    try:
        for _ in todo:
            kind, episode_id, payload = _next_result(results, workers)
            if kind == "error":
                raise CollectionError(f"worker failed on episode {episode_id}:\n{payload}")
            yield payload
        finished = True
    finally:
        for w in workers:
            w.join(timeout=5.0 if finished else 0.0)
            if w.is_alive():
                w.terminate()
                w.join()


def _next_result(results, workers) -> tuple:
    """The next message of a worker; CollectionError if none can come any more."""
    all_exited_before = False
    while True:
        try:
            return results.get(timeout=1.0)
        except queue.Empty:
            dead = [w.exitcode for w in workers if w.exitcode not in (None, 0)]
            if dead or all_exited_before:  # exited cleanly and the queue stayed empty a while
                raise CollectionError(f"workers exited (exit codes {[w.exitcode for w in workers]}) "
                                      f"before the collection finished") from None
            all_exited_before = all(w.exitcode is not None for w in workers)
