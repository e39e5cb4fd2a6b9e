#!/usr/bin/env python
"""Where rlflow's CUDA executor loses to `torch.compile`: the kernels of one forward pass
of each, side by side, for one model and math mode.

    python benchmarks/profile_vs_torch_compile.py --model efficientnet_b0 [--math fp16] [--top 15]

PyTorch: the model of torch_compile_baseline.torch_model in that math mode, compiled in
inductor's default mode (from inductor's cache where it is warm), its kernels under
torch.profiler summed by name and by family (Triton, convolution, GEMM, other). rlflow:
data/models/<model>.onnx (random weights) in the same math mode, the kernels of one run,
the executor's planning report (steps by call and op type) and its convolution choices. Both
end-to-end times are CUDA-graph replay medians. Prints one JSON line and a short table.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import torch  # before taso_env: both load the same cuDNN wheel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from profile_vs_pytorch import graph_replay_ms, kernels  # noqa: E402
from torch_compile_baseline import compile_model, in_math, set_math, torch_model  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def family(name: str) -> str:
    n = name.lower()
    if n.startswith("triton"):
        return "triton"
    if "memcpy" in n or "memset" in n:
        return "copy"
    if "conv" in n or "implicit" in n or "dgrad" in n or "fprop" in n or "winograd" in n:
        return "conv"
    if "gemm" in n or "nvjet" in n or "cutlass" in n or "gemv" in n or "xmma" in n:
        return "gemm"
    if "attention" in n or "fmha" in n or "flash" in n:
        return "attention"
    return "other"


def summary(ks) -> dict:
    fam: dict[str, list] = collections.defaultdict(lambda: [0.0, 0])
    for name, us, calls in ks:
        fam[family(name)][0] += us
        fam[family(name)][1] += calls
    return {"kernel_us": round(sum(k[1] for k in ks), 1), "kernels": sum(k[2] for k in ks),
            "by_family": {k: [round(v[0], 1), v[1]] for k, v in sorted(fam.items(), key=lambda kv: -kv[1][0])}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="efficientnet_b0")
    ap.add_argument("--math", default="fp16")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    row: dict = {"model": args.model, "math": args.math, "device": cb.device_name(), "torch": torch.__version__}
    set_math(args.math)
    model, x = in_math(*torch_model(args.model), args.math)
    fn, row["compile_s"], row["compile_cache"] = compile_model(model, x)
    row["compile_ms"] = graph_replay_ms(fn)
    ks = kernels(fn)
    row["compile"] = {**summary(ks), "top": [(n, round(t, 1), c) for n, t, c in ks[:args.top]]}
    del fn, model
    torch.cuda.empty_cache()
    g = te.load_onnx(os.path.join(ROOT, "data", "models", f"{args.model}.onnx"))
    with cb.Executor(g, math=args.math) as ex:
        row["rlflow_ms"] = ex.measure(repeats=30).median_ms
        feeds = {op.name: np.random.default_rng(0).standard_normal(op.outputs[0].shape).astype(np.float32)
                 for op in g.inputs}
        ks = kernels(lambda: ex.run(feeds))
        report = ex.planning_report()
        calls = collections.Counter(f"{s.call}:{g.ops[s.op].type}" for s in report.steps if not s.constant)
        algos = collections.Counter(f"algo{c.get('conv_algo')}/math{c.get('conv_math')}/fused{c.get('conv_fused_call')}"
                                    for c in ex.conv_choices().values())
        row["rlflow"] = {**summary(ks), "steps": ex.num_steps, "steps_by_call": dict(calls.most_common()),
                         "conv_choices": dict(algos.most_common()), "fused_ops": ex.fused_ops,
                         "top": [(n, round(t, 1), c) for n, t, c in ks[:args.top]]}
    print(json.dumps(row), flush=True)
    print()
    print("| side | replay ms | kernel us | kernels | by family (us, calls) |")
    print("|---|---|---|---|---|")
    for side, ms in (("compile", row["compile_ms"]), ("rlflow", row["rlflow_ms"])):
        s = row[side]
        fams = "; ".join(f"{k} {v[0]} ({v[1]})" for k, v in s["by_family"].items())
        print(f"| {side} | {ms:.4g} | {s['kernel_us']} | {s['kernels']} | {fams} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
