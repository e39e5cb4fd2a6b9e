#!/usr/bin/env python
"""Load / build, ONNX export, hash and cost times of the engine, per model.

    python benchmarks/bench_load_export_cost.py [--repeats 5] [--models bert_base ...]

A model is a file under data/models/ (loaded with te.load_onnx; "coverage/swin_t.onnx"
for the coverage exports), a built-in network (built with te.graphs.build), or
"<network>+weights": the network built with random weights, exported with them to a
temporary ONNX file, and that file loaded (the import of a model with real weights).
Prints one JSON line and a markdown table (times in ms).
"""

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit, median_seconds  # noqa: E402

import taso_env as te  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models")
DEFAULT = ["bert_base.onnx", "resnet50.onnx", "squeezenet1_1.onnx", "bert_base", "resnet50",
           "inception_v3", "vit_base", "nasnet_a"]


def measure(model: str, repeats: int, scratch: str) -> dict:
    path = os.path.join(DATA, model)
    if model.endswith("+weights"):
        path = os.path.join(scratch, f"{model}.onnx")
        te.graphs.build(model.removesuffix("+weights"), seed=0).export_onnx(path)
        load = lambda: te.load_onnx(path)  # noqa: E731
    elif model.endswith(".onnx"):
        load = lambda: te.load_onnx(path)  # noqa: E731
    else:
        load = lambda: te.graphs.build(model, seed=None)  # noqa: E731
    graph = load()
    return {
        "model": model,
        "ops": graph.num_ops,
        "est_cost_ms": graph.cost(),
        "load_ms": 1e3 * median_seconds(load, repeats),
        "export_ms": 1e3 * median_seconds(graph.export_onnx, repeats),
        "hash_ms": 1e3 * median_seconds(graph.hash, repeats),
        "cost_ms": 1e3 * median_seconds(graph.cost, repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        rows = [measure(m, args.repeats, scratch) for m in args.models]
    emit("load_export_cost", rows,
         ["model", "ops", "est_cost_ms", "load_ms", "export_ms", "hash_ms", "cost_ms"],
         cost_model=te.get_cost_model().name, repeats=args.repeats)


if __name__ == "__main__":
    main()
