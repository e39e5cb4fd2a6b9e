#!/usr/bin/env python
"""Where greedy ties backtracking at budget 1000: does deeper backtracking (a larger
budget, a looser alpha) find anything cheaper? Greedy and backtracking per graph, for
every (alpha, budget), on one cost model (the measured H100 fp32 table by default).

    python benchmarks/deeper_backtracking.py [--graphs SPEC ...] [--alphas 1.05 1.2]
        [--budgets 5000] [--cost-model table:h100_fp32] [--workers N] [--gain 0.001]
        --out FILE.jsonl

Graphs (default: TIED, below): built-in names, shipped model names or ONNX paths
(relative to the working folder or to the checkout), anything `te.graphs.load` takes.
TIED: the 29 zoo graphs where greedy ties backtracking at budget 1000, alpha 1.05 (each
graph once: a shipped model by its data/models path); its committed run is
benchmarks/results/2026-11-28_tied_deeper_backtracking.jsonl.

Jobs: one per (graph, alpha, budget), run in a pool of `--workers` processes (1: in this
process). Each job loads its graph, runs greedy and backtracking (`te.search(g,
"backtracking", alpha=..., budget=..., model=...)`) and appends one JSON row to `--out`,
flushed as it finishes: graph, ops (computing ops; ops_with_weights counts weights and
inputs too, the 2026-11-27 builders file's "ops"), alpha, budget, greedy_speedup,
backtracking_speedup, initial_cost / greedy_final_cost / final_cost (ms), expansions,
graphs_seen, complete, seconds (backtracking's wall time; greedy_seconds greedy's). A
rerun with the same `--out` skips the jobs already there (same graph, alpha, budget,
cost model spec and rule set), so a stopped run resumes.

Prints, on stdout, one JSON summary line (graphs, how many of them backtracking beats
greedy on by more than `--gain` (0.1%) and which) and a markdown table: one row per
graph, greedy against each (alpha, budget). Progress (tqdm) and each row go to stderr.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import file_sha, machine  # noqa: E402
from tqdm import tqdm  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.engine.cost_model import make_cost_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The zoo graphs where greedy ties backtracking at budget 1000, alpha 1.05, each once (see
# the docstring): the built-in networks, then the ONNX exports.
TIED = [
    "resnext50", "inception_v3", "nasbench",
    "data/models/coverage/googlenet.onnx",
    "data/models/coverage/gemma_small.onnx",
    "data/models/coverage/fcn_resnet50.onnx",
    "data/models/coverage/mnasnet1_0.onnx",
    "data/models/coverage/deeplabv3_mobilenet_v3_large.onnx",
    "data/models/coverage/r3d_18.onnx",
    "data/models/convnext_tiny.onnx",
    "data/models/coverage/mobilenet_v3_small.onnx",
    "data/models/coverage/lraspp_mobilenet_v3_large.onnx",
    "data/models/coverage/gpt2.onnx",
    "data/models/coverage/resnext50_32x4d.onnx",
    "data/models/coverage/regnet_x_400mf.onnx",
    "data/models/coverage/shufflenet_v2_x1_0.onnx",
    "data/models/coverage/vgg11_bn.onnx",
    "data/models/coverage/regnet_y_400mf.onnx",
    "data/models/coverage/squeezebert.onnx",
    "data/models/coverage/albert_base.onnx",
    "data/models/coverage/wide_resnet50_2.onnx",
    "data/models/mobilenet_v2.onnx",
    "data/models/coverage/mobilevit.onnx",
    "data/models/inception_v3.onnx",
    "data/models/coverage/efficientnet_v2_s.onnx",
    "data/models/efficientnet_b0.onnx",
    "data/models/resnet50.onnx",
    "data/models/mobilenet_v3_large.onnx",
    "data/models/densenet121.onnx",
]


def resolve(spec: str) -> str:
    """An ONNX path relative to the checkout when it is not one relative to the working folder."""
    if spec.endswith(".onnx") and not os.path.isabs(spec) and not os.path.exists(spec):
        candidate = os.path.join(ROOT, spec)
        if os.path.exists(candidate):
            return candidate
    return spec


@functools.cache
def cost_model(spec: str):
    """One cost model per process (a table is read once per worker)."""
    return make_cost_model(spec)


def job_key(row: dict) -> tuple:
    return (row["graph"], float(row["alpha"]), int(row["budget"]), row["cost_model"], row["rule_set_hash"])


def run_job(job: tuple) -> dict:
    """One (graph, alpha, budget) under `cost_model_spec`: greedy and backtracking, one row."""
    spec, alpha, budget, cost_model_spec = job
    model = cost_model(cost_model_spec)
    g = te.graphs.load(resolve(spec))
    start = time.perf_counter()
    greedy = te.search(g, "greedy", model=model)
    greedy_s = time.perf_counter() - start
    start = time.perf_counter()
    bt = te.search(g, "backtracking", alpha=alpha, budget=budget, model=model)
    seconds = time.perf_counter() - start
    return {"graph": spec, "ops": g.num_ops, "ops_with_weights": len(g.ops), "alpha": alpha, "budget": budget,
            "cost_model": cost_model_spec, "rule_set_hash": te.rules.default().hash,
            "greedy_speedup": greedy.speedup, "backtracking_speedup": bt.speedup,
            "initial_cost": bt.initial_cost, "greedy_final_cost": greedy.final_cost, "final_cost": bt.final_cost,
            "final_over_initial": bt.final_cost / bt.initial_cost,
            "gain_pct": (greedy.final_cost / bt.final_cost - 1.0) * 100.0,
            "expansions": bt.expansions, "graphs_seen": bt.graphs_seen, "complete": bt.complete,
            "steps": len(bt.applied), "greedy_steps": len(greedy.applied),
            "seconds": round(seconds, 3), "greedy_seconds": round(greedy_s, 3)}


def read_done(path: str) -> dict[tuple, dict]:
    done: dict[tuple, dict] = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:  # a line cut short by a kill is left to be rerun
                    try:
                        row = json.loads(line)
                    except json.JSONDecodeError:
                        continue
                    done[job_key(row)] = row
    return done


def table(rows: list[dict], specs: list[str], settings: list[tuple[float, int]]) -> list[str]:
    """One markdown row per graph: greedy, then backtracking's speedup per (alpha, budget)
    (* where backtracking did not use its whole budget: the search ended)."""
    by = {(r["graph"], r["alpha"], r["budget"]): r for r in rows}
    head = ["graph", "ops", "greedy"] + [f"a{a:g} b{b}" for a, b in settings] + ["best gain %", "seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for spec in specs:
        mine = [by.get((spec, a, b)) for a, b in settings]
        got = [r for r in mine if r is not None]
        if not got:
            continue
        cells = [spec, str(got[0]["ops"]), f"{got[0]['greedy_speedup']:.5f}"]
        cells += ["-" if r is None else f"{r['backtracking_speedup']:.5f}" + ("*" if r["complete"] else "")
                  for r in mine]
        cells += [f"{max(r['gain_pct'] for r in got):.3f}", f"{sum(r['seconds'] for r in got):.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", nargs="+", default=None, help="graph specs (default: TIED, the 29 tied zoo graphs)")
    p.add_argument("--alphas", nargs="+", type=float, default=[1.05, 1.2])
    p.add_argument("--budgets", nargs="+", type=int, default=[5000])
    p.add_argument("--cost-model", default="table:h100_fp32",
                   help="cost model spec (table:h100_fp32 is data/costs/h100_fp32.h5; analytic:h100)")
    p.add_argument("--workers", type=int, default=1, help="processes; 1 runs the jobs in this process")
    p.add_argument("--gain", type=float, default=0.001,
                   help="greedy cost / backtracking cost - 1 above which backtracking 'beats' greedy")
    p.add_argument("--out", required=True, help="JSON lines, one per job, appended as each finishes (resumed from)")
    args = p.parse_args(argv)

    specs = list(dict.fromkeys(args.graphs or TIED))
    settings = [(a, b) for a in args.alphas for b in args.budgets]
    rule_hash = te.rules.default().hash
    cost_model(args.cost_model)  # a bad spec fails here, before any job
    done = read_done(args.out)
    jobs = [(s, a, b, args.cost_model) for s in specs for a, b in settings]
    todo = [j for j in jobs if (j[0], j[1], j[2], j[3], rule_hash) not in done]
    rows = [done[(s, a, b, m, rule_hash)] for s, a, b, m in jobs if (s, a, b, m, rule_hash) in done]
    print(f"{len(jobs)} jobs, {len(jobs) - len(todo)} already in {args.out}, {len(todo)} to run "
          f"with {args.workers} worker(s)", file=sys.stderr, flush=True)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "a") as out, tqdm(total=len(todo), desc="jobs", unit="job", file=sys.stderr) as bar:
        def record(row: dict) -> None:
            out.write(json.dumps(row) + "\n")
            out.flush()
            rows.append(row)
            bar.write(json.dumps(row), file=sys.stderr)
            bar.update(1)

        if args.workers <= 1 or len(todo) <= 1:
            for job in todo:
                record(run_job(job))
        elif todo:
            with multiprocessing.get_context("fork").Pool(min(args.workers, len(todo))) as pool:
                for row in pool.imap_unordered(run_job, todo, chunksize=1):
                    record(row)

    order = {j[:3]: i for i, j in enumerate(jobs)}
    rows.sort(key=lambda r: order[(r["graph"], r["alpha"], r["budget"])])
    beating = [r for r in rows if r["gain_pct"] > args.gain * 100.0]
    beating_graphs = list(dict.fromkeys(r["graph"] for r in beating))
    summary = {"benchmark": "deeper_backtracking", "machine": machine(), "cost_model": args.cost_model,
               "rule_set_hash": rule_hash, "rules": len(te.rules.default()), "alphas": args.alphas,
               "budgets": args.budgets, "gain_pct": args.gain * 100.0, "graphs": len(specs), "jobs": len(rows),
               "complete": sum(r["complete"] for r in rows),
               "cpu_seconds": round(sum(r["seconds"] + r["greedy_seconds"] for r in rows), 1),
               "beats_greedy": len(beating_graphs), "beating_graphs": beating_graphs,
               "beating": [{k: r[k] for k in ("graph", "alpha", "budget", "greedy_speedup", "backtracking_speedup",
                                              "gain_pct")} for r in beating]}
    kind, _, arg = args.cost_model.partition(":")
    if kind.startswith("table"):
        from taso_env.gpu.cost_models import table_path

        path = table_path(arg)
        summary["cost_table"] = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
        summary["cost_table_sha256_16"] = file_sha(path)
    print(json.dumps(summary))
    print()
    print("\n".join(table(rows, specs, settings)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
