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
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.gpu import cost_table  # noqa: E402
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=440)
    parser.add_argument("--chunk", type=int, default=500, help="table configurations measured between probes")
    parser.add_argument("--table", default=os.path.join(ROOT, "data", "costs", "h100_fp32.h5"))
    parser.add_argument("--math", default="fp32", choices=cb.MATH_MODES)
    args = parser.parse_args(argv)
    cb.require()
    tables = [t for t in cost_table.load_all(args.table) if t.math == args.math]
    signatures = [s for t in tables for s, _, _ in t.items()]
    probes = {"gemm": _probe("gemm"), "add": _probe("add"),
              "bert_base": te.load_onnx(os.path.join(ROOT, "data", "models", "bert_base.onnx"))}
    rows, done, start = [], 0, time.perf_counter()
    while True:
        row = {"seconds": round(time.perf_counter() - start, 1), "configs_measured": done}
        for name, g in probes.items():  # the middle of three fresh executors' medians
            row[f"{name}_us"] = sorted(cb.measure(g, math=args.math, repeats=50).median_ms for _ in range(3))[1] * 1e3
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
