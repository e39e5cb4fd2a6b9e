#!/usr/bin/env python
"""When a GEMV's weight stays in the GPU's L2 and when it does not: the measurements
behind the weight-residency term of the cost table (docs/gpu.md).

    python benchmarks/profile_weight_residency.py [--repeats 30] [--graph nasrnn]

Three parts, fp32 (TF32 off), batch 1, each GEMV a [1,K] x [K,N] matmul:

1. `hot_cold`: per shape, the time of one GEMV when 64 of them read one weight
   ("shared": the weight stays in L2, as the cost table times an op: copies reading one
   weight) and when each reads its own ("distinct": 64 weights overflow L2, so each is read
   from HBM). cuBLAS through PyTorch, captured in a CUDA graph, median of `--repeats`
   samples of `--inner` replays.
2. `ramp`: a chain of distinct [1,512] x [512,1024] GEMVs (2 MiB of weights each) whose
   weights add up to 4 ... 96 MiB, replayed back to back: the time per GEMV against the
   weights one replay reads. Below L2's share the weights stay resident between
   replays (hot); past it every GEMV reads HBM (cold).
3. `graph`: `--graph` (nasrnn: an unrolled RNN of GEMVs) and its greedy-optimised graph
   (the shipped H100 fp32 table) on rlflow's CUDA executor: the measured median
   (`Executor.measure`, CUDA-graph replay), the executor's arena, and the weights the
   GEMVs read per run, summed read by read and counting equal constants once
   (`_core.weight_residency`: the executor stores equal constants once).

Prints one JSON line and a markdown table per part. Needs a CUDA GPU, PyTorch and
rlflow's CUDA backend (part 3); no TensorFlow.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine  # noqa: E402

HOT_COLD_SHAPES = [(512, 512), (512, 1536), (512, 4096), (768, 768), (768, 2304), (768, 3072)]
RAMP_MIB = [4, 8, 12, 16, 20, 22, 24, 26, 28, 30, 32, 36, 40, 48, 64, 96]
MIB = 2 ** 20


def time_chain(torch, x, weights, repeats: int, inner: int) -> float:
    """Microseconds per GEMV of `x @ w` for every w in `weights`, in one captured CUDA
    graph replayed `inner` times per sample; the median of `repeats` samples."""
    from profile_vs_pytorch import graph_replay_ms

    outs = [torch.empty(1, w.shape[1], device="cuda") for w in weights]

    def chain():
        for w, o in zip(weights, outs):
            torch.matmul(x, w, out=o)

    return graph_replay_ms(chain, warmup=10, samples=repeats, inner=inner) * 1000.0 / len(weights)


def hot_cold(torch, repeats: int, inner: int) -> list[dict]:
    rows = []
    for k, n in HOT_COLD_SHAPES:
        x = torch.randn(1, k, device="cuda")
        shared_w = torch.randn(k, n, device="cuda")
        distinct_w = [torch.randn(k, n, device="cuda") for _ in range(64)]
        shared = time_chain(torch, x, [shared_w] * 64, repeats, inner)
        distinct = time_chain(torch, x, distinct_w, repeats, inner)
        rows.append({"shape": f"[1,{k}]x[{k},{n}]", "weight_mib": round(k * n * 4 / MIB, 2),
                     "shared_us": round(shared, 3), "distinct_us": round(distinct, 3),
                     "cold_over_hot": round(distinct / shared, 3)})
        del distinct_w
        torch.cuda.empty_cache()
    return rows


def ramp(torch, repeats: int, inner: int) -> list[dict]:
    rows = []
    x = torch.randn(1, 512, device="cuda")
    for total in RAMP_MIB:
        weights = [torch.randn(512, 1024, device="cuda") for _ in range(total // 2)]
        us = time_chain(torch, x, weights, repeats, inner)
        rows.append({"weights_mib": total, "gemvs": len(weights), "us_per_gemv": round(us, 3)})
        del weights
        torch.cuda.empty_cache()
    return rows


def graph_rows(name: str, repeats: int) -> list[dict]:
    import taso_env as te
    from taso_env import _core
    from taso_env.gpu import cuda_backend as cb

    original = te.graphs.load(name)
    result = te.search(original, "greedy", model="table:h100_fp32")
    rows = []
    for label, g in (("original", original), ("greedy", result.graph)):
        residency = _core.weight_residency(g.core)
        with cb.Executor(g, math="fp32") as ex:
            times = [ex.measure(warmup=20, repeats=50).median_ms for _ in range(repeats // 10 or 1)]
            rows.append({"graph": f"{name} {label}", "table_ms": round(g.cost(model="table:h100_fp32"), 4),
                         "measured_us": round(statistics.median(times) * 1000, 1),
                         "rounds_us": [round(t * 1000, 1) for t in times], "steps": ex.num_steps,
                         "arena_mib": round(ex.arena_bytes / MIB, 1), "gemv_reads": len(residency["reads"]),
                         "weights_read_mib": round(sum(b for b, _ in residency["reads"].values()) / MIB, 1),
                         "distinct_weights_mib": round(residency["distinct_bytes"] / MIB, 1)})
    return rows


def table(rows: list[dict], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(r[c]) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--inner", type=int, default=20, help="CUDA-graph replays per sample")
    ap.add_argument("--graph", default="nasrnn", help="the graph of part 3 ('' skips it)")
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("profile_weight_residency: no CUDA GPU", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)
    info = {"machine": machine(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "l2_mib": round(torch.cuda.get_device_properties(0).L2_cache_size / MIB, 1)}
    parts = [("hot_cold", hot_cold(torch, args.repeats, args.inner),
              ["shape", "weight_mib", "shared_us", "distinct_us", "cold_over_hot"]),
             ("ramp", ramp(torch, args.repeats, args.inner), ["weights_mib", "gemvs", "us_per_gemv"])]
    if args.graph:
        parts.append(("graph", graph_rows(args.graph, args.repeats),
                      ["graph", "table_ms", "measured_us", "steps", "arena_mib", "gemv_reads",
                       "weights_read_mib", "distinct_weights_mib"]))
    for name, rows, columns in parts:
        print(json.dumps({"benchmark": "profile_weight_residency", "part": name, **info, "rows": rows}))
        print()
        print(table(rows, columns))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
