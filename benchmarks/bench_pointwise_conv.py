#!/usr/bin/env python
"""Pointwise convolutions on the CUDA executor: cuDNN's best algorithm against the
cuBLASLt GEMM path, per model and math mode (docs/gpu.md, "Pointwise convolutions as
GEMMs").

    python benchmarks/bench_pointwise_conv.py [--models resnet50 mobilenet_v2 ...] [--math fp32 tf32]

For every distinct pointwise Conv2D (1x1 kernel, stride 1, no padding, one group) of
each model, a graph of that one convolution (with its bias) is timed through
`conv_choice_space`: every cuDNN algorithm cuDNN runs and the GEMM path, each as the
executor runs it (8 calls in a CUDA graph, median of 5 replays). Per model and mode:
the pointwise convolutions (counted with repeats), their summed time with cuDNN's best,
with the GEMM, with the faster of the two (what the executor's search keeps), and on how
many configurations the GEMM is the faster. Needs the CUDA backend and a GPU. Prints
one JSON line and a markdown table.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env import _core  # noqa: E402
from taso_env.gpu import cost_table  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402

GEMM = 100  # kConvAlgoGemm (csrc/gpu/library_ops.h)
DEFAULT = ["resnet50", "inception_v3.onnx", "mobilenet_v2.onnx", "mobilenet_v3_large.onnx", "efficientnet_b0.onnx",
           "densenet121.onnx"]


def pointwise_convs(graph: te.Graph) -> Counter:
    """{(input shape, output channels, bias): how many Conv2D ops of the graph have it}
    (the ops `cost_table.signature_is(..., "pointwise-conv")` selects)."""
    found = Counter()
    for _, _, sig, _ in cost_table.op_configs(graph):
        if cost_table.signature_is(sig, "pointwise-conv"):
            inputs = _core.parse_op_signature(sig)["inputs"]
            found[(inputs[0][1], inputs[1][1][0], len(inputs) > 2)] += 1
    return found


def timings(config, math: str) -> tuple[float, float]:
    """(cuDNN's best ms, the GEMM's ms) of one pointwise convolution."""
    x_shape, out_channels, bias = config
    b = te.GraphBuilder("pointwise", seed=0)
    b.output(b.conv2d(b.input("x", list(x_shape)), out_channels, 1, bias=bias), "y")
    g = b.build()
    conv = next(op.id for op in g.ops if op.type == "Conv2D")
    choices = cb.conv_choice_space(g, conv, False, math=math)
    cudnn = min(c["ms"] for c in choices if c["conv_algo"] != GEMM)
    gemm = min((c["ms"] for c in choices if c["conv_algo"] == GEMM), default=float("nan"))
    return cudnn, gemm


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=DEFAULT)
    ap.add_argument("--math", nargs="+", default=["fp32", "tf32"])
    args = ap.parse_args(argv)
    cb.require()
    measured: dict[tuple, tuple[float, float]] = {}
    rows = []
    for spec in args.models:
        convs = pointwise_convs(te.graphs.load(spec))
        for math in args.math:
            for config in convs:
                if (config, math) not in measured:
                    measured[config, math] = timings(config, math)
            t = {c: measured[c, math] for c in convs}
            row = {"model": spec, "math": math, "pointwise_convs": sum(convs.values()), "configs": len(convs),
                   "gemm_faster": sum(g < c for c, g in t.values()),
                   "cudnn_ms": sum(n * t[c][0] for c, n in convs.items()),
                   "gemm_ms": sum(n * t[c][1] for c, n in convs.items()),
                   "chosen_ms": sum(n * min(t[c]) for c, n in convs.items())}
            row["speedup"] = row["cudnn_ms"] / row["chosen_ms"] if row["chosen_ms"] else float("nan")
            rows.append(row)
            print(rows[-1], file=sys.stderr, flush=True)
    info = cb.device_info()
    emit("pointwise_conv", rows, ["model", "math", "pointwise_convs", "configs", "gemm_faster", "cudnn_ms", "gemm_ms",
                                  "chosen_ms", "speedup"],
         device=info["name"], cudnn=info["cudnn"], cublas=info["cublas"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
