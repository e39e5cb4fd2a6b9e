"""Optimise a model with a search method: ONNX (or a built-in network) in, ONNX out.

    rlflow optimize data/models/squeezenet1_1.onnx -o runs/optimize/squeezenet.onnx
    rlflow optimize bert_base --method greedy --cost-model analytic:h100-tf32
    rlflow optimize nasbench --method eqsat --time-limit 10    # equality saturation (egglog)
    rlflow optimize resnet50 --measure cuda --math tf32      # on a GPU machine

Prints the estimated cost before and after, the search time and how often each rule
fired; then checks the optimised model against the original in onnxruntime on random
inputs and weights (exit code 1 if they differ). With --measure cuda both graphs are
also timed end to end on the GPU (CUDA-graph replay, median).
"""

from __future__ import annotations

import argparse
import json
import os

from rlflow.commands import MATH_MODES, add_dims_argument, parse_dims


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from taso_env.engine.search import METHODS

    parser.add_argument("model", help="ONNX file, built-in network or shipped model name")
    add_dims_argument(parser)
    parser.add_argument("-o", "--output", help="where to write the optimised ONNX model")
    parser.add_argument("--method", default="backtracking", choices=METHODS)
    parser.add_argument("--alpha", type=float, default=1.05, help="backtracking's relaxation (default: 1.05)")
    parser.add_argument("--budget", type=int, default=1000, help="backtracking's expansions (default: 1000)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="eqsat's saturation seconds (default: 10)")
    parser.add_argument("--node-limit", type=int, default=20000, help="eqsat's e-graph size (default: 20000)")
    parser.add_argument("--cost-model", default="analytic:h100",
                        help="analytic[:profile], table:<file or shipped name> or cuda (default: analytic:h100)")
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure", choices=["cuda"], help="also measure both graphs end to end on the GPU")
    parser.add_argument("--math", default="fp32", choices=MATH_MODES, help="math mode of --measure")


def run(args: argparse.Namespace) -> int:
    import onnx

    import taso_env as te
    from taso_env.engine.report import markdown_table
    from taso_env.onnx.check import check_equivalent, random_feeds

    te.set_cost_model(args.cost_model)
    graph = te.graphs.load(args.model, dims=parse_dims(args.dims))
    if args.measure == "cuda":
        from taso_env.gpu import cuda_backend

        cuda_backend.require()  # fail before the search, not after it
    extra = {"time_limit": args.time_limit, "node_limit": args.node_limit} if args.method == "eqsat" else {}
    result = te.search(graph, args.method, alpha=args.alpha, budget=args.budget, **extra)
    print(f"# {graph.name}: {args.method} search ({args.cost_model})")
    print(f"estimated cost: {result.initial_cost:.4f} ms -> {result.final_cost:.4f} ms "
          f"(speedup {result.speedup:.3f}x)")
    print(f"compute ops: {graph.num_ops} -> {result.graph.num_ops}")
    print(f"search time: {result.seconds:.2f} s, {result.expansions} expansions, "
          f"{result.graphs_seen} graphs seen")
    if result.details:
        print("details: " + ", ".join(f"{k} {v}" for k, v in result.details.items()
                                      if not isinstance(v, dict)))
    rows = [{"rule": name, "fired": n} for name, n in result.rule_fires.most_common()]
    print("\n" + (markdown_table(rows, ["rule", "fired"]) if rows else "no rule fired"))

    summary = {"graph": graph.name, "method": args.method, "initial_cost_ms": result.initial_cost,
               "final_cost_ms": result.final_cost, "speedup": result.speedup, "seconds": result.seconds,
               "expansions": result.expansions, "rule_fires": dict(result.rule_fires)}
    if args.measure == "cuda":
        measured = _measure(graph, result.graph, args.math)
        summary.update(measured_original_ms=measured["original"], measured_optimised_ms=measured["optimised"],
                       measured_math=args.math)
    ok = True
    if not args.no_check:
        source_file = graph.metadata.get("source")
        source = onnx.load(source_file) if source_file and os.path.isfile(source_file) else graph.export_onnx()
        report = check_equivalent(source, result.graph, random_feeds(graph, args.seed))
        ok = report.equivalent
        print(f"\nonnxruntime check against the original: {report}")
        summary["equivalent"] = ok
        summary["max_abs_diff"] = report.max_abs_diff
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        result.graph.export_onnx(args.output)
        print(f"wrote {args.output}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if ok else 1


def _measure(original, optimised, math: str) -> dict[str, float]:
    from taso_env.gpu import cuda_backend

    opaque = "host" if any(o.type == "Opaque" for o in original.ops) else "error"
    measured = {label: cuda_backend.measure(g, math=math, opaque=opaque).median_ms
                for label, g in (("original", original), ("optimised", optimised))}
    print(f"measured on {cuda_backend.device_name()} ({math}, CUDA-graph replay, median): "
          f"{measured['original']:.4f} ms -> {measured['optimised']:.4f} ms "
          f"(speedup {measured['original'] / measured['optimised']:.3f}x)")
    return measured
