"""The CUDA backend's settings that a caller may leave to the environment: the executor's
switches (BackendSwitches, from keyword arguments or RLFLOW_FUSE / RLFLOW_CUDNN_FIND /
RLFLOW_TUNE_LOG) and the files where the convolution and GEMM algorithm choices persist
between processes (RLFLOW_CONV_ALGO_CACHE / RLFLOW_GEMM_ALGO_CACHE, seeded with the
shipped choices). Nothing here needs the compiled backend."""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Conveniences of the command line: where a caller leaves a switch of the backend unset
#: (None), its variable sets it. RLFLOW_FUSE=0 turns executor fusion off; RLFLOW_CUDNN_FIND=0
#: takes cuDNN's heuristic convolution algorithm instead of timing the candidates;
#: RLFLOW_TUNE_LOG (any value) prints each algorithm choice and timing to stderr.
FUSE_ENV = "RLFLOW_FUSE"
CUDNN_FIND_ENV = "RLFLOW_CUDNN_FIND"
TUNE_LOG_ENV = "RLFLOW_TUNE_LOG"


@dataclass(frozen=True)
class BackendSwitches:
    """Switches of the executor and the per-op measurements (C++ ExecutorOptions).

    Attributes:
        fuse: executor fusions (conv and GEMM epilogues, element-wise chains, strided
            views, in-place Concats and Splits); False runs every op alone, for comparison.
        cudnn_find: time cuDNN's algorithms for a convolution not cached yet; False takes
            cuDNN's heuristic choice.
        tune_log: print each algorithm choice and timing to stderr.
    """

    fuse: bool = True
    cudnn_find: bool = True
    tune_log: bool = False


def backend_switches(fuse: bool | None = None, cudnn_find: bool | None = None,
                     tune_log: bool | None = None) -> BackendSwitches:
    """The switches as given, each None read from its environment variable (FUSE_ENV,
    CUDNN_FIND_ENV: "0" turns it off; TUNE_LOG_ENV: set turns it on), read at each call."""
    return BackendSwitches(
        fuse=os.environ.get(FUSE_ENV) != "0" if fuse is None else bool(fuse),
        cudnn_find=os.environ.get(CUDNN_FIND_ENV) != "0" if cudnn_find is None else bool(cudnn_find),
        tune_log=TUNE_LOG_ENV in os.environ if tune_log is None else bool(tune_log))


ALGO_CACHE_ENV = "RLFLOW_CONV_ALGO_CACHE"
GEMM_ALGO_CACHE_ENV = "RLFLOW_GEMM_ALGO_CACHE"
_CACHE_KINDS = {ALGO_CACHE_ENV: "conv", GEMM_ALGO_CACHE_ENV: "gemm"}


def default_algo_cache(env: str = ALGO_CACHE_ENV) -> str:
    """Where the convolution (RLFLOW_CONV_ALGO_CACHE) or cuBLASLt GEMM
    (RLFLOW_GEMM_ALGO_CACHE) algorithm choices persist between processes when that
    variable is unset: ~/.cache/rlflow/conv_algos.tsv or gemm_algos.tsv (docs/gpu.md)."""
    return os.path.join(os.path.expanduser("~"), ".cache", "rlflow", f"{_CACHE_KINDS[env]}_algos.tsv")


def seed_algo_cache(path: str, kind: str) -> int:
    """Appends to the cache file `path` the shipped choices of `kind` ("conv", "gemm") whose
    configuration it has no choice for yet: the algorithms the shipped cost tables were
    measured with, so that this machine's executor runs (where its device and library
    versions are those of the keys) the kernels the table priced. The lines added."""
    from taso_env import shipped_data

    have = set()
    if os.path.exists(path):
        with open(path) as f:
            have = {line.split("\t", 1)[0] for line in f}
    new = []
    for shipped in shipped_data.algorithm_choices(kind):
        with open(shipped) as f:
            for line in f:
                key = line.split("\t", 1)[0]
                if "\t" in line and key not in have:
                    have.add(key)
                    new.append(line if line.endswith("\n") else line + "\n")
    if new:
        with open(path, "a") as f:
            f.writelines(new)
    return len(new)


def install_algo_caches() -> None:
    """The C++ side reads each cache file once, at the first convolution or GEMM; an empty
    value turns that file off. Where a variable is unset, its default file is used, seeded
    with the shipped choices (`seed_algo_cache`)."""
    for env, kind in _CACHE_KINDS.items():
        if env in os.environ:
            continue
        path = default_algo_cache(env)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            seed_algo_cache(path, kind)
        except OSError:
            continue
        os.environ[env] = path
