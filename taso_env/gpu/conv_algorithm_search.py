"""cuDNN's convolution algorithm search, run in a child process before measuring.

Searching for convolution algorithms (cuDNN Find, then each candidate timed) leaves the
process that searched ~5% slower on every op it measures afterwards, unevenly across op
types, convolution or not (docs/gpu.md, "What makes the process slower"). A cost table
measured in that state prices ops as no fresh process runs them. The choices a search
makes persist in the algorithm cache file (RLFLOW_CONV_ALGO_CACHE), so a measuring
process can have a child search first and then measure every convolution with the
choices the child cached: the same algorithms, without the slowed state.

    python -m taso_env.gpu.conv_algorithm_search --math fp32 SIGNATURES.txt

measures each convolution signature of the file (one per line) once, so that its
algorithm is chosen and cached; prints one JSON line {searched, failed, seconds}.

    python -m taso_env.gpu.conv_algorithm_search --math fp32 --graphs resnet50 model.onnx

builds (and runs once) an executor of each graph, so that the algorithms of its
convolutions as the executor runs them (with their fused epilogues) are chosen and
cached: what `rlflow measure` has done before it measures graphs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable

CONV_PREFIX = "Conv2D|"


class ConvSearchError(RuntimeError):
    """The child process that searches convolution algorithms failed (names why)."""


def conv_signatures(signatures: Iterable[str]) -> list[str]:
    """The cost-table signatures among `signatures` that name a convolution, in order,
    without repeats."""
    return list(dict.fromkeys(s for s in signatures if s.startswith(CONV_PREFIX)))


def child_search_skipped() -> str | None:
    """Why a child search would not help here (None when it would): the choices come
    from cuDNN's heuristics (RLFLOW_CUDNN_FIND=0, nothing searched), or the cache file
    is turned off (RLFLOW_CONV_ALGO_CACHE empty: the child's choices could not reach
    this process)."""
    if os.environ.get("RLFLOW_CUDNN_FIND") == "0":
        return "RLFLOW_CUDNN_FIND=0: algorithms come from cuDNN's heuristics, nothing is searched"
    from taso_env.gpu import cuda_backend

    cuda_backend.require()  # sets RLFLOW_CONV_ALGO_CACHE to its default when unset
    if not os.environ.get(cuda_backend.ALGO_CACHE_ENV):
        return f"{cuda_backend.ALGO_CACHE_ENV} is empty: no cache file carries a child's choices here"
    return None


def child_python() -> list[str]:
    """The command that starts a Python child of rlflow's: this interpreter without the
    working folder on its module path (`-P`, Python >= 3.11), so that a child started in a
    source checkout imports the installed rlflow, not the unbuilt tree."""
    return [sys.executable, "-P"] if sys.version_info >= (3, 11) else [sys.executable]


def search_in_child(signatures: Iterable[str], math: str, *, timeout: float | None = None) -> dict:
    """Has a child process choose (and cache) the algorithm of every convolution among
    `signatures` under `math`. Call it before this process runs any convolution: the
    process reads the cache file once, at its first convolution.

    Returns the child's summary {searched, failed, seconds} ({searched: 0} when there
    is nothing to search); raises ConvSearchError when the child fails.
    """
    convs = conv_signatures(signatures)
    if not convs:
        return {"searched": 0, "failed": 0, "seconds": 0.0}
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(convs) + "\n")
        path = f.name
    try:
        return _run_child([*child_python(), "-m", __name__, "--math", math, path], timeout)
    finally:
        os.unlink(path)


def graph_search_in_child(specs: list[str], math: str, *, dims: dict[str, int] | None = None,
                          timeout: float | None = None) -> dict:
    """Has a child process build and run once an executor (convolutions fused as it fuses
    them, opaque ops on the host) of each graph of `specs` (files, built-in or shipped
    names), so that this process later finds their convolutions' algorithms in the cache.
    Call it before this process runs any convolution. Returns the child's summary
    {searched (graphs), failed, seconds}; raises ConvSearchError when the child fails."""
    command = [*child_python(), "-m", __name__, "--math", math, "--graphs", *specs]
    if dims:
        command += ["--dims-json", json.dumps(dims)]
    return _run_child(command, timeout)


def _run_child(command: list[str], timeout: float | None) -> dict:
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise ConvSearchError(f"the convolution algorithm search did not finish in {timeout} s") from err
    if proc.returncode != 0:
        raise ConvSearchError(f"the convolution algorithm search exited with status {proc.returncode}")
    lines = proc.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError) as err:
        raise ConvSearchError(f"the convolution algorithm search printed no summary: {proc.stdout[-200:]!r}") from err


def has_convolution(graph) -> bool:
    """Whether `graph` has a convolution, i.e. anything for a search to choose."""
    return any(op.type == "Conv2D" for op in graph.ops)


def _each(items: list[str], unit: str, attempt, errors: tuple[type[BaseException], ...]) -> dict:
    """`attempt(item)` for each item, with progress; a failure is reported (to stderr) and
    counted, not raised: the parent meets the same error when it measures, and says so.
    Returns {searched, failed, seconds}."""
    from tqdm import tqdm

    start, failed = time.perf_counter(), 0
    for item in tqdm(items, desc="convolution algorithms", unit=unit, file=sys.stderr):
        try:
            attempt(item)
        except errors as err:
            failed += 1
            print(f"{item}: {err}", file=sys.stderr)
    return {"searched": len(items) - failed, "failed": failed, "seconds": time.perf_counter() - start}


def search_graphs_here(specs: list[str], math: str, dims: dict[str, int] | None = None) -> dict:
    """In this process: an executor of each graph of `specs` with a convolution built and
    run once (what the child of `graph_search_in_child` does)."""
    from taso_env.gpu import cuda_backend
    from taso_env.graphs import load

    def build(spec: str) -> None:
        graph = load(spec, dims=dims)
        if has_convolution(graph):
            cuda_backend.measure(graph, warmup=1, repeats=1, math=math, opaque="host")

    return _each(specs, "graph", build, (Exception,))  # loading fails in many typed ways


def search_signatures_here(signatures: list[str], math: str) -> dict:
    """In this process: each convolution signature of `signatures` measured once, its
    algorithm chosen (and cached); what the child of `search_in_child` does."""
    from taso_env.gpu import cuda_backend

    return _each(conv_signatures(signatures), "conv",
                 lambda sig: cuda_backend.measure_signature(sig, math), (cuda_backend.CudaBackendError, ValueError))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("signatures", nargs="?", help="file of convolution signatures, one per line")
    parser.add_argument("--graphs", nargs="+", default=[], help="graphs whose executors to build instead")
    parser.add_argument("--dims-json", default=None, help="sizes of symbolic input dimensions, as a JSON object")
    parser.add_argument("--math", default="fp32")
    args = parser.parse_args(argv)
    if args.graphs:
        dims = json.loads(args.dims_json) if args.dims_json else None
        print(json.dumps(search_graphs_here(args.graphs, args.math, dims)), flush=True)
        return 0
    if not args.signatures:
        parser.error("give a signatures file or --graphs")
    with open(args.signatures) as f:
        signatures = [line.strip() for line in f]
    print(json.dumps(search_signatures_here(signatures, args.math)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
