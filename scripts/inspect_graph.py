#!/usr/bin/env python
"""Load a model, print its op table and estimated cost, and check the ONNX round trip.

    python scripts/inspect_graph.py data/models/squeezenet1_1.onnx
    python scripts/inspect_graph.py resnet50 --cost-model analytic:h100-tf32
    python scripts/inspect_graph.py bert_base --export runs/inspect/bert.onnx --json out.json

MODEL is an ONNX file or a built-in network name (see --list). The round-trip check
exports the graph to ONNX, reloads it, and runs the export in onnxruntime against the
source model (ONNX input) or the numpy reference executor (built-in networks) on random
inputs and weights. Exits 1 if the check fails.
"""

import argparse
import json
import os
import sys
import time

import onnx

import taso_env as te
from taso_env.engine.report import graph_summary, markdown_table
from taso_env.onnx.check import round_trip_check


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", nargs="?", default="data/models/squeezenet1_1.onnx",
                        help="ONNX file or built-in network name")
    parser.add_argument("--cost-model", default="analytic:h100", help="analytic[:profile]")
    parser.add_argument("--export", help="also write the exported ONNX model here")
    parser.add_argument("--json", help="write the summary and check results as JSON here")
    parser.add_argument("--no-check", action="store_true", help="skip the round-trip check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true", help="list built-in networks and exit")
    args = parser.parse_args(argv)

    if args.list:
        print("\n".join(te.graphs.names()))
        return 0
    te.set_cost_model(args.cost_model)
    start = time.perf_counter()
    is_file = os.path.exists(args.model)
    graph = te.load_onnx(args.model) if is_file else te.graphs.build(args.model)
    load_s = time.perf_counter() - start

    summary = graph_summary(graph)
    print(f"# {graph.name}  ({'ONNX file' if is_file else 'built-in network'}, loaded in {load_s:.2f} s)")
    print(f"compute ops: {summary['num_ops']}   parameters: {summary['params_m']:.2f} M   "
          f"GFLOPs: {summary['gflops']:.2f}")
    print(f"inputs:  {summary['inputs']}")
    print(f"outputs: {summary['outputs']}")
    print(f"estimated cost ({args.cost_model}): {summary['cost_ms']:.4f} ms\n")
    print(markdown_table(graph.op_table(), ["op", "count", "ms", "share", "gflops", "mb"]))

    result = {"graph": graph.name, "load_s": load_s, "cost_model": args.cost_model, **summary}
    if args.export:
        os.makedirs(os.path.dirname(os.path.abspath(args.export)), exist_ok=True)
        graph.export_onnx(args.export)
        print(f"\nexported to {args.export}")
    ok = True
    if not args.no_check:
        source = onnx.load(args.model) if is_file else None
        report = round_trip_check(graph, source, seed=args.seed)
        ok = report.ok
        structure = {True: "kept", None: "lowered (fused activations)", False: "CHANGED"}
        print(f"\nONNX round trip: structure {structure[report.same_structure]}; "
              f"numerics vs {report.checked_against}: {report.numerics}")
        print("round-trip check:", "PASSED" if ok else "FAILED")
        result["round_trip"] = {"ok": ok, "same_structure": report.same_structure,
                                "max_abs_diff": report.numerics.max_abs_diff}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
