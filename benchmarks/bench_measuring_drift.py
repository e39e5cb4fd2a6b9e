#!/usr/bin/env python
"""Does measuring drift within one process? Probe graphs (one 768x768 GEMM, one Add,
bert_base whole) are measured by fresh executors, then `--chunk` op configurations of
the cost table are measured (as `rlflow measure-costs --signatures-from` does), again
and again for `--seconds`; the SM clock, temperature, power and throttle reasons are
read at every pass (nvidia-smi).

    python benchmarks/bench_measuring_drift.py [--seconds 440] [--chunk 500]

On the H100 (2026-11-26, docs/gpu.md "What drifts is the process"): at full SM clock the
probes ran ~5% slower once a few hundred executors had been built in the process, then
flat. A cost table measured in one long process, and a benchmark whose first graphs are
measured in a fresh one, see different executors. Prints one JSON line and a markdown table.

    python benchmarks/bench_measuring_drift.py --causes

measures bert_base (three fresh executors) before and after one activity, each in a fresh
process: nothing, 500 executors built and destroyed, 150 gigabyte-scale device buffers
written and freed, and 300 convolution configurations measured with their algorithms
searched for (cuDNN Find, then each candidate timed), chosen by cuDNN's heuristics, or
read from the cache the search wrote (docs/gpu.md, "What drifts is the process").
"""

import argparse
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.gpu import conv_algorithm_search, cost_table  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _probe(kind: str) -> te.Graph:
    b = te.GraphBuilder(kind)
    x = b.input("x", [1, 128, 768])
    y = b.matmul(x, b.weight("w", [768, 768])) if kind == "gemm" else b.add(x, b.weight("bias", [768]))
    b.output(y, "y")
    return b.build()


def _gpu_state() -> str:
    query = "clocks.sm,temperature.gpu,power.draw,clocks_throttle_reasons.active"
    try:
        return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return f"nvidia-smi unavailable: {err}"


CAUSES = {  # activity -> environment of its process
    "nothing": {},
    "executors": {},
    "device_buffers_written": {},
    "conv_algorithm_search": {"RLFLOW_CONV_ALGO_CACHE": "{cache}"},
    "conv_heuristics": {"RLFLOW_CONV_ALGO_CACHE": "", "RLFLOW_CUDNN_FIND": "0"},
    "conv_cached_choices": {"RLFLOW_CONV_ALGO_CACHE": "{cache}"},  # after the search wrote them
}


def _fresh_us(graph: te.Graph, math: str) -> float:
    """The middle of three fresh executors' medians (us)."""
    return sorted(cb.measure(graph, math=math, repeats=50).median_ms for _ in range(3))[1] * 1e3


def _cause(activity: str, table: str, math: str) -> dict:
    """bert_base before and after `activity`, in this (fresh) process."""
    cb.require()
    bert = te.load_onnx(os.path.join(ROOT, "data", "models", "bert_base.onnx"))
    before = _fresh_us(bert, math)
    start = time.perf_counter()
    if activity == "executors":
        gemm = _probe("gemm")
        for _ in range(500):
            cb.measure(gemm, math=math, warmup=1, repeats=3)
    elif activity == "device_buffers_written":
        cudart = ctypes.CDLL("libcudart.so")
        rng = random.Random(0)
        for _ in range(150):
            ptr, size = ctypes.c_void_p(), rng.choice([24 << 20, 256 << 20, 512 << 20, 1 << 30, 2 << 30])
            if cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(size)) == 0:
                cudart.cudaMemset(ptr, 0, ctypes.c_size_t(size))
                cudart.cudaFree(ptr)
        cudart.cudaDeviceSynchronize()
    elif activity.startswith("conv"):
        signatures = [s for t in cost_table.load_all(table) if t.math == math for s, _, _ in t.items()]
        conv_algorithm_search.search_signatures_here(conv_algorithm_search.conv_signatures(signatures)[:300], math)
    else:
        time.sleep(15)
    took = time.perf_counter() - start
    after = _fresh_us(bert, math)
    return {"activity": activity, "seconds": round(took, 1), "bert_base_before_us": before,
            "bert_base_after_us": after, "after_vs_before": after / before}


def causes(args) -> int:
    """Each activity in a fresh process; one row each."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "conv_algos.tsv")
        for activity, env in CAUSES.items():
            env = {k: v.format(cache=cache) for k, v in env.items()}
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--cause", activity, "--table", args.table,
                                  "--math", args.math], env={**os.environ, **env}, capture_output=True, text=True,
                                 timeout=600)
            if out.returncode != 0:
                raise SystemExit(f"--cause {activity} failed:\n{out.stderr[-2000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr, flush=True)
    emit("measuring_drift_causes", rows, ["activity", "seconds", "bert_base_before_us", "bert_base_after_us",
                                         "after_vs_before"], device=cb.device_info(), math=args.math)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=440)
    parser.add_argument("--chunk", type=int, default=500, help="table configurations measured between probes")
    parser.add_argument("--table", default=os.path.join(ROOT, "data", "costs", "h100_fp32.h5"))
    parser.add_argument("--math", default="fp32", choices=cb.MATH_MODES)
    parser.add_argument("--causes", action="store_true", help="which activity makes later executors slower")
    parser.add_argument("--cause", default=None, choices=sorted(CAUSES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cause:
        print(json.dumps(_cause(args.cause, args.table, args.math)))
        return 0
    if args.causes:
        return causes(args)
    cb.require()
    tables = [t for t in cost_table.load_all(args.table) if t.math == args.math]
    signatures = [s for t in tables for s, _, _ in t.items()]
    probes = {"gemm": _probe("gemm"), "add": _probe("add"),
              "bert_base": te.load_onnx(os.path.join(ROOT, "data", "models", "bert_base.onnx"))}
    rows, done, start = [], 0, time.perf_counter()
    while True:
        row = {"seconds": round(time.perf_counter() - start, 1), "configs_measured": done}
        for name, g in probes.items():
            row[f"{name}_us"] = _fresh_us(g, args.math)
        row["gpu"] = _gpu_state()
        rows.append(row)
        print(f"{row}", file=sys.stderr, flush=True)
        if done >= len(signatures) or time.perf_counter() - start > args.seconds:
            break
        for sig in signatures[done:done + args.chunk]:
            try:
                cb.measure_signature(sig, args.math)
            except (cb.CudaBackendError, ValueError):
                pass  # an opaque or unsupported configuration: not part of what is probed
        done += args.chunk
    first = rows[0]
    for r in rows:
        r["gemm_vs_first"] = r["gemm_us"] / first["gemm_us"]
        r["bert_base_vs_first"] = r["bert_base_us"] / first["bert_base_us"]
    emit("measuring_drift", rows, ["seconds", "configs_measured", "gemm_us", "add_us", "bert_base_us", "gemm_vs_first",
                                   "bert_base_vs_first", "gpu"], device=cb.device_info(), math=args.math)
    return 0


if __name__ == "__main__":
    sys.exit(main())
