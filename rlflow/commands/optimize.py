"""Optimise a model with a search method or a trained agent: ONNX (or a built-in network)
in, ONNX out.

    rlflow optimize data/models/squeezenet1_1.onnx -o runs/optimize/squeezenet.onnx
    rlflow optimize bert_base --method greedy --cost-model analytic:h100-tf32
    rlflow optimize nasbench --method eqsat --time-limit 10    # equality saturation (egglog)
    rlflow optimize my_model.onnx --run runs/demo             # the run's trained controller
    rlflow optimize resnet50 --measure cuda --math tf32      # on a GPU machine

Graphs are priced by the H100 cost table measured in the --math mode (fp32 by default;
--cost-model chooses another model). Prints the estimated cost before and after, the
optimisation time (a trained agent's loading apart) and how often each rule fired; then
checks the optimised model against the original in onnxruntime on random inputs and
weights (exit code 1 if they differ). With --measure cuda both graphs are also timed end
to end on the GPU (CUDA-graph replay, interleaved rounds), and -o writes the original
model where the optimised one measures slower (--keep-slower: the optimised one anyway).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import Counter
from pathlib import Path

from rlflow.commands import MATH_MODES, add_dims_argument, parse_dims


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from taso_env.engine.search import METHODS

    parser.add_argument("model", help="ONNX file, built-in network or shipped model name")
    add_dims_argument(parser)
    parser.add_argument("-o", "--output", help="where to write the optimised ONNX model")
    parser.add_argument("--method", choices=METHODS, help="search method (default: backtracking; not with --run)")
    parser.add_argument("--run", help="optimise with the trained agent of this run folder instead of a search")
    parser.add_argument("--agent", default="controller", choices=["controller", "controller_lookahead", "model_free"],
                        help="which of the run's agents (default: controller, the dream-trained policy; "
                             "controller_lookahead: greedy plus M-guided detours)")
    parser.add_argument("--horizon", type=int, default=150, help="the agent's episode length (default: 150)")
    parser.add_argument("--alpha", type=float, default=1.05, help="backtracking's relaxation (default: 1.05)")
    parser.add_argument("--budget", type=int, default=1000, help="backtracking's expansions (default: 1000)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="eqsat's saturation seconds (default: 10)")
    parser.add_argument("--node-limit", type=int, default=20000, help="eqsat's e-graph size (default: 20000)")
    parser.add_argument("--cost-model", default=None,
                        help="analytic[:profile], table:<file or shipped name> or cuda (default: the shipped H100 "
                             "table of --math, e.g. table:h100_fp32; bf16 uses the fp16 table)")
    parser.add_argument("--json", help="write the results as JSON here")
    parser.add_argument("--no-check", action="store_true", help="skip the onnxruntime check")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--measure", choices=["cuda"], help="also measure both graphs end to end on the GPU")
    parser.add_argument("--math", default="fp32", choices=MATH_MODES,
                        help="the GPU math mode optimised for (which measured table prices the graphs) and "
                             "measured in (default: fp32)")
    parser.add_argument("--keep-slower", action="store_true",
                        help="with --measure cuda, write the optimised model even where it measures slower "
                             "than the original")


def run(args: argparse.Namespace) -> int:
    import onnx

    import taso_env as te
    from taso_env.engine.report import markdown_table
    from taso_env.errors import ConfigError
    from taso_env.onnx.check import check_equivalent, random_feeds

    if args.run and args.method:
        raise ConfigError("--method and --run: optimise with a search method or with a run's agent, not both")
    if args.run and not os.path.isdir(args.run):
        raise ConfigError(f"--run {args.run}: no such run folder")
    if args.cost_model is None:
        from taso_env.gpu.cost_models import measured_table_spec

        args.cost_model = measured_table_spec(args.math)
    te.set_cost_model(args.cost_model)
    graph = te.graphs.load(args.model, dims=parse_dims(args.dims))
    if args.measure == "cuda":
        from taso_env.gpu import cuda_backend

        cuda_backend.require()  # fail before the search, not after it
    best, summary = _with_agent(graph, args) if args.run else _with_search(graph, args)

    rows = [{"rule": name, "fired": n} for name, n in Counter(summary["rule_fires"]).most_common()]
    print("\n" + (markdown_table(rows, ["rule", "fired"]) if rows else "no rule fired"))
    summary["cost_model"] = args.cost_model
    written = best
    if args.measure == "cuda":
        measured = _measure(graph, best, args.math)
        summary.update(measured_original_ms=measured["original"], measured_optimised_ms=measured["optimised"],
                       measured_math=args.math)
        if measured["optimised"] > measured["original"] and not args.keep_slower:
            written = graph
            print(f"the optimised model measures slower than the original on this GPU "
                  f"({measured['optimised']:.4f} vs {measured['original']:.4f} ms): "
                  f"{'writing the original' if args.output else 'the original is the faster'} "
                  "(--keep-slower writes the optimised one)")
    summary["written"] = "optimised" if written is best else "original"
    ok = True
    if not args.no_check:
        source_file = graph.metadata.get("source")
        source = onnx.load(source_file) if source_file and os.path.isfile(source_file) else graph.export_onnx()
        report = check_equivalent(source, best, random_feeds(graph, args.seed))
        ok = report.equivalent
        print(f"\nonnxruntime check against the original: {report}")
        summary["equivalent"] = ok
        summary["max_abs_diff"] = report.max_abs_diff
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        written.export_onnx(args.output)
        print(f"wrote {args.output} ({summary['written']} model)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0 if ok else 1


def _with_search(graph, args: argparse.Namespace):
    """The search method's graph and summary (printing what it did)."""
    import taso_env as te

    method = args.method or "backtracking"
    extra = {"time_limit": args.time_limit, "node_limit": args.node_limit} if method == "eqsat" else {}
    result = te.search(graph, method, alpha=args.alpha, budget=args.budget, **extra)
    print(f"# {graph.name}: {method} search ({args.cost_model})")
    _print_costs(graph, result.graph, result.initial_cost, result.final_cost)
    print(f"search time: {result.seconds:.2f} s, {result.expansions} expansions, "
          f"{result.graphs_seen} graphs seen")
    if result.details:
        print("details: " + ", ".join(f"{k} {v}" for k, v in result.details.items()
                                      if not isinstance(v, dict)))
    return result.graph, {"graph": graph.name, "method": method, "initial_cost_ms": result.initial_cost,
                          "final_cost_ms": result.final_cost, "speedup": result.speedup,
                          "seconds": result.seconds, "expansions": result.expansions,
                          "rule_fires": dict(result.rule_fires)}


def _with_agent(graph, args: argparse.Namespace):
    """The best graph one episode of the run's trained agent visits, and its summary (the
    same agent and lookahead as `rlflow evaluate`; loading timed apart)."""
    from controller.evaluation import episode_graph, learned_agent
    from taso_env import rules as rules_module
    from taso_env.engine import real_work
    from taso_env.env.rewrite_env import GraphRewriteEnv

    env = GraphRewriteEnv(graph, horizon=args.horizon, cost_model=args.cost_model, lazy_observations=True)
    t0 = time.perf_counter()
    agent = learned_agent(args.agent, Path(args.run), env)
    load_s = time.perf_counter() - t0
    start, work = time.perf_counter(), real_work.counts()
    best, taken, best_step = episode_graph(env, agent, args.seed)
    seconds, work, steps = time.perf_counter() - start, real_work.since(work), len(taken)
    names = rules_module.default().names()
    fired = Counter(names[xfer] for xfer in taken[:best_step])  # the rewrites that led to the graph returned
    print(f"# {graph.name}: the {args.agent} agent of {args.run} ({args.cost_model})")
    initial, final = graph.cost(), best.cost()
    _print_costs(graph, best, initial, final)
    print(f"optimisation time: {seconds:.2f} s ({load_s:.1f} s loading the agent apart), {steps} steps, "
          f"best graph at step {best_step}, {real_work.enumerations(work)} enumerations")
    return best, {"graph": graph.name, "method": args.agent, "run": args.run, "initial_cost_ms": initial,
                  "final_cost_ms": final, "speedup": initial / final, "seconds": seconds,
                  "model_load_s": load_s, "steps": steps, "best_step": best_step, "rule_fires": dict(fired)}


def _print_costs(graph, best, initial: float, final: float) -> None:
    print(f"estimated cost: {initial:.4f} ms -> {final:.4f} ms (speedup {initial / final:.3f}x)")
    print(f"compute ops: {graph.num_ops} -> {best.num_ops}")


def _measure(original, optimised, math: str) -> dict[str, float]:
    from taso_env.gpu import cuda_backend
    from taso_env.gpu import interleaved_measurement as im

    opaque = "host" if any(o.type == "Opaque" for o in original.ops) else "error"
    measured = dict(zip(("original", "optimised"), im.measure_side_by_side([original, optimised], math=math,
                                                                          opaque=opaque)))
    print(f"measured on {cuda_backend.device_name()} ({math}, CUDA-graph replay, {im.ROUNDS} interleaved rounds, "
          "median): "
          f"{measured['original']:.4f} ms -> {measured['optimised']:.4f} ms "
          f"(speedup {measured['original'] / measured['optimised']:.3f}x)")
    return measured
