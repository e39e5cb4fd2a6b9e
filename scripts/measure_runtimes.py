#!/usr/bin/env python
"""Measure ONNX graphs end to end on the GPU (CUDA backend; no TensorFlow needed).

    python scripts/measure_runtimes.py runs/x/eval/graphs/*.onnx --json runtimes.json [--math fp32|tf32]

Each graph: all buffers allocated once, warm-up, CUDA-graph replay, median of repeats.
Weights without data get deterministic random data. Prints a markdown table.
"""

import argparse
import json
import sys
from pathlib import Path

import taso_env as te
from taso_env.engine.report import markdown_table
from taso_env.gpu import cuda_backend


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("onnx", nargs="+")
    p.add_argument("--math", default="fp32", choices=("fp32", "tf32"))
    p.add_argument("--repeats", type=int, default=100)
    p.add_argument("--json", help="write the results here")
    args = p.parse_args(argv)
    cuda_backend.require()
    rows = []
    for path in args.onnx:
        graph = te.load_onnx(path)
        m = cuda_backend.measure(graph, repeats=args.repeats, math=args.math, opaque="host")
        rows.append({"graph": Path(path).stem, "ops": graph.num_ops, "estimated_ms": graph.cost(),
                     "measured_ms": m.median_ms, "min_ms": m.min_ms, "device": m.device, "math": m.math})
    print(markdown_table(rows, ["graph", "ops", "estimated_ms", "measured_ms", "min_ms", "math"]))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
