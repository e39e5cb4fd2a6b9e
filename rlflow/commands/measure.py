"""Measure graphs end to end on the GPU (CUDA backend; no TensorFlow needed).

    rlflow measure data/models/resnet50.onnx
    rlflow measure runs/x/eval/graphs/*.onnx --math tf32 --json runtimes.json

Each graph: all buffers allocated once, warm-up, CUDA-graph replay, median of repeats,
by a fresh executor in each of `--rounds` rounds; every round visits all graphs in a new
random order with the tensors shifted in memory at random, and a graph's runtime is the
middle of its rounds (taso_env/gpu/interleaved_measurement.py: measured one after
another, graphs differing by a few tenths of a percent rank by when and where they were
measured). Weights without data get deterministic random data. Prints a markdown table
with the device and math mode; `spread` is (slowest - fastest round) / runtime.

Before measuring, a child process builds each graph's executor once, so that the
algorithms of its convolutions are searched for there and reach this process through
the algorithm cache file: a process that searches runs every graph after it ~5% slower
(docs/gpu.md, "What makes the process slower"), which would make the figures depend on
the order of the graphs and on whether the cache was warm. `--search-here` searches in
the measuring process instead.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlflow.commands import MATH_MODES, add_dims_argument, parse_dims, search_convolutions_in_child


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graphs", nargs="+", help="ONNX files, built-in networks or shipped model names")
    add_dims_argument(parser)
    parser.add_argument("--math", default="fp32", choices=MATH_MODES)
    parser.add_argument("--repeats", type=int, default=50, help="timed replays per executor")
    parser.add_argument("--rounds", type=int, default=5, help="fresh executors per graph, interleaved across graphs")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--search-here", action="store_true",
                        help="search convolution algorithms in the measuring process, not in a child process first")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import taso_env as te
    from taso_env.engine.report import markdown_table
    from taso_env.errors import ConfigError
    from taso_env.gpu import conv_algorithm_search, cuda_backend, interleaved_measurement

    if args.rounds < 1 or args.repeats < 1:
        raise ConfigError(f"--rounds and --repeats must be at least 1, got {args.rounds} and {args.repeats}")
    cuda_backend.require()
    dims = parse_dims(args.dims)
    graphs = [te.graphs.load(spec, dims=dims) for spec in args.graphs]
    with_convs = [spec for spec, g in zip(args.graphs, graphs) if conv_algorithm_search.has_convolution(g)]
    search = {"skipped": "no convolutions"}
    if with_convs:
        search = search_convolutions_in_child(args, graphs=with_convs, dims=dims)
    with tqdm(total=len(graphs) * args.rounds, desc="measuring", unit="executor") as bar:
        runs = interleaved_measurement.measure_interleaved(graphs, rounds=args.rounds, repeats=args.repeats,
                                                           math=args.math, opaque="host",
                                                           on_measured=lambda *_: bar.update())
    device = cuda_backend.device_name()
    rows = []
    for graph, each in zip(graphs, runs):
        ms = interleaved_measurement.middle(each)
        rows.append({"graph": graph.name, "ops": graph.num_ops, "estimated_ms": graph.cost(), "measured_ms": ms,
                     "spread": (max(each) - min(each)) / ms, "rounds_ms": each, "device": device, "math": args.math})
    print(markdown_table(rows, ["graph", "ops", "estimated_ms", "measured_ms", "spread", "device", "math"]))
    if search.get("seconds"):
        print(f"(convolution algorithms searched in a child process first: {search['seconds']:.1f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0
