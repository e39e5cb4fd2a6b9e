"""Inspect a model: size, op types, estimated cost, and an ONNX round-trip check.

    rlflow inspect data/models/squeezenet1_1.onnx
    rlflow inspect bert_base --cost-model table:h100_fp32
    rlflow inspect --list

The model is an ONNX file, a built-in network or a shipped model name. The round trip
exports the graph back to ONNX and compares it with the source in onnxruntime (exit
code 1 if they differ).
"""

from __future__ import annotations

import argparse
import json
import os
import time

from rlflow.commands import add_dims_argument, parse_dims


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", nargs="?", default="squeezenet1_1",
                        help="ONNX file, built-in network or shipped model name (default: squeezenet1_1)")
    add_dims_argument(parser)
    parser.add_argument("--cost-model", default="analytic:h100",
                        help="analytic[:profile], table:<file or shipped name> or cuda")
    parser.add_argument("--export", help="also write the exported ONNX model here")
    parser.add_argument("--json", help="write the summary and check results as JSON here")
    parser.add_argument("--no-check", action="store_true", help="skip the round-trip check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--list", action="store_true", help="list built-in networks and shipped models and exit")


def run(args: argparse.Namespace) -> int:
    import onnx

    import taso_env as te
    from taso_env import shipped_data
    from taso_env.engine.report import graph_summary, markdown_table
    from taso_env.onnx.check import round_trip_check

    if args.list:
        print("built-in networks:", " ".join(te.graphs.names()))
        print("shipped models:   ", " ".join(shipped_data.models()))
        return 0
    te.set_cost_model(args.cost_model)
    start = time.perf_counter()
    graph = te.graphs.load(args.model, dims=parse_dims(args.dims), seed=0)
    load_s = time.perf_counter() - start
    source_file = graph.metadata.get("source")  # the ONNX file it was loaded from, if any
    is_file = source_file is not None and os.path.isfile(source_file)

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
        source = onnx.load(source_file) if is_file else None
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
