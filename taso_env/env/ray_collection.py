"""Rollout collection on Ray: episodes run as Ray tasks, this process is the only writer.

`taso_env.env.collection.collect` hands its missing episode ids here when
`CollectConfig.ray` is set (`rlflow collect --ray [ADDRESS]`); progress, throughput,
resume and the config checks stay in `collect`. The guarantees are those of the local
path:

- Same episodes, same bytes: the task for episode i plays graph i % n from seed + i and
  returns the episode file's bytes made by `encode_episode`, the function the local
  path stores through, so a Ray run's episode files equal a local run's byte for byte.
- Workers return data and never write: the driver (this process) writes each episode
  file atomically and rebuilds the index (RolloutWriter).
- A killed worker or node loses only its episodes in flight: Ray re-runs a task whose
  worker died (TASK_RETRIES times); an exception raised by an episode is not retried
  and stops the run with CollectionError and its traceback.
- A killed driver: Ray ends its job and the job's tasks; the episodes written survive
  and rerunning the same command collects the missing ones only.

At most WINDOW_PER_WORKER tasks per worker are in flight, so the driver's memory does
not grow with the run, and every worker process keeps its environment between tasks
(built once per worker, as a local worker does). Workers import the rlflow the driver
imports, also where the driver runs in a source checkout, and resolve relative paths
(an ONNX graph, a cost table) in the driver's working folder (taso_env.ray_cluster).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

from taso_env.env.collection import (
    CollectConfig,
    CollectionError,
    DriverClock,
    make_collect_policy,
    make_env,
    play_encoded,
)
from taso_env.env.rollouts import EncodedEpisode, RolloutMeta

TASK_RETRIES = 5  # re-runs of an episode whose worker or node died
WINDOW_PER_WORKER = 2  # tasks in flight per worker: one running, one queued

_worker_state: dict[str, tuple] = {}  # in a Ray worker process: config -> (env, policy)


def rlflow_collect_episode(cfg: CollectConfig, meta: RolloutMeta, episode_id: int,
                           driver_folder: str | None = None) -> EncodedEpisode:
    """The Ray task: plays episode `episode_id` in this worker's environment (made on
    the worker's first task of this config, in `driver_folder`, the driver's working
    folder) and returns its encoded file."""
    from taso_env.ray_cluster import working_folder

    key = cfg.to_json()
    with working_folder(driver_folder):
        if key not in _worker_state:
            _worker_state.clear()
            env = make_env(cfg)
            _worker_state[key] = (env, make_collect_policy(cfg, env))
        env, policy = _worker_state[key]
        return play_encoded(cfg, env, policy, meta, episode_id)


def ray_episodes(cfg: CollectConfig, meta: RolloutMeta, todo: list[int],
                 clock: DriverClock) -> Iterator[EncodedEpisode]:
    """The encoded episode of every id in `todo`, in completion order, played as Ray
    tasks on the cluster `cfg.ray` names (taso_env.ray_cluster); `clock` adds up the
    time spent fetching finished episodes and submitting new ones."""
    from taso_env.ray_cluster import import_ray, ray_cluster

    with ray_cluster(cfg.ray, num_cpus=cfg.workers or None) as cluster:
        ray = import_ray()
        workers = cfg.workers or max(cluster.cpus, 1)
        window = WINDOW_PER_WORKER * workers
        task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(rlflow_collect_episode)
        cfg_ref, meta_ref = ray.put(cfg), ray.put(meta)
        folder = os.getcwd()
        ids = iter(todo)
        pending: dict = {}

        def submit() -> None:
            for i in itertools.islice(ids, window - len(pending)):
                pending[task.remote(cfg_ref, meta_ref, i, folder)] = i

        submit()
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                if not ready:
                    continue
                ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
                for ref in ready:
                    with clock:
                        episode = _fetch(ray, ref, pending.pop(ref))
                        submit()
                    yield episode
        finally:
            for ref in pending:  # stopped early (an error, Ctrl-C): drop the rest
                ray.cancel(ref)


def _fetch(ray, ref, episode_id: int) -> EncodedEpisode:
    """The result of one task; CollectionError if the episode failed or was lost."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        raise CollectionError(f"episode {episode_id} failed on a Ray worker:\n{err}") from None
    except ray.exceptions.RayError as err:
        raise CollectionError(f"episode {episode_id} was lost {TASK_RETRIES + 1} times (its worker or "
                              f"node died each time): {err}") from None
