#!/usr/bin/env python
"""Which graphs have valleys: greedy against backtracking per graph, on the measured H100
fp32 table. A graph "is a valley graph" when backtracking ends at least 0.1% cheaper than
greedy (`--valley-gain`): its best rewrite sequence passes through a rewrite that costs
runtime before it pays, which greedy never takes.

    python benchmarks/find_valley_graphs.py [--budget 5000] [--alpha 1.05]
        [--time-limit 45] [--cost-model table:h100_fp32] [--graphs ...]
        [--progress FILE.jsonl] [--out data/valley_graphs.json]
    python benchmarks/find_valley_graphs.py --list [--sets eleven zoo valley]   # the specs only

Graphs (default, in this order, each once): the eleven evaluation graphs (docs/results.md,
"Learned agents"), the rest of the 57-graph zoo (the 8 built-in names of the zoo
evaluation and every shipped ONNX model but distilbert_dynamic.onnx, whose symbolic
dimensions need --dims) and the valley family's members (taso_env/graphs/valley_family.py,
train and held-out seeds).

Time limit: the engine's backtracking has no clock, and its time per expansion grows as
the search goes on (a probe's rate underestimated efficientnet_b0's 5000 expansions by
3.7x). So each graph's backtracking first runs with budget `--probe` (500) in the
process, then with `budget` in a forked child that is killed after `--time-limit`
seconds (45): a killed search leaves the probe's result (`budget_used` = the probe's,
`time_limited` true). A probe that ends the search (`complete`) is the result.

Each finished graph is appended to `--progress` (JSON lines) as it finishes; a rerun
with the same file skips the graphs already there under the same rules, cost model,
alpha, budget and time limit (a full-budget result under any time limit). Prints one
JSON line and a markdown table; writes `--out`.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit, file_sha  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.engine.cost_model import make_cost_model  # noqa: E402
from taso_env.graphs import valley_family  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ELEVEN = ["nasrnn", "squeezenet1_1", "resnext50", "inception_v3", "nasbench", "mobilenet_v3_large",
          "efficientnet_b0", "densenet121", "data/models/bert_base.onnx", "data/models/vit_b_16.onnx",
          "data/models/coverage/t5_small_encoder.onnx"]
ZOO_NAMES = ["nasrnn", "squeezenet1_1", "resnext50", "inception_v3", "nasbench", "mobilenet_v3_large",
             "efficientnet_b0", "densenet121"]
ZOO_EXCLUDED = {"distilbert_dynamic.onnx"}  # symbolic dims: not in the zoo evaluation


def zoo() -> list[str]:
    """The 57-graph zoo of docs/measured/2026-11-27_eval_zoo.md."""
    files = sorted(glob.glob(os.path.join(ROOT, "data", "models", "*.onnx")))
    files += sorted(glob.glob(os.path.join(ROOT, "data", "models", "coverage", "*.onnx")))
    return ZOO_NAMES + [os.path.relpath(f, ROOT) for f in files if os.path.basename(f) not in ZOO_EXCLUDED]


def default_graphs(sets=("eleven", "zoo", "valley")) -> list[str]:
    family = [valley_family.name(s) for s in valley_family.TRAIN_SEEDS + valley_family.HELD_OUT_SEEDS]
    chosen = {"eleven": ELEVEN, "zoo": zoo(), "valley": family}
    return list(dict.fromkeys(spec for name in sets for spec in chosen[name]))


def membership(spec: str) -> list[str]:
    sets = []
    if spec in ELEVEN:
        sets.append("eleven")
    if spec in zoo():
        sets.append("zoo")
    seed = valley_family.seed_of(spec)
    if seed is not None:
        sets.append("valley_train" if seed in valley_family.TRAIN_SEEDS else "valley_held_out")
    return sets


def _search_in_child(conn, graph, model, alpha: float, budget: int) -> None:
    r = te.search(graph, "backtracking", alpha=alpha, budget=budget, model=model)
    conn.send({"final_cost": r.final_cost, "expansions": r.expansions, "complete": r.complete,
               "steps": len(r.applied)})
    conn.close()


def limited_backtracking(graph, model, alpha: float, budget: int, seconds: float) -> tuple[dict | None, float]:
    """Backtracking in a forked child, killed after `seconds`: (its figures or None, seconds)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    start = time.perf_counter()
    proc = ctx.Process(target=_search_in_child, args=(child, graph, model, alpha, budget), daemon=True)
    proc.start()
    child.close()
    result = None
    if parent.poll(seconds):
        try:
            result = parent.recv()
        except EOFError:
            raise RuntimeError(f"the backtracking child process died (exit code {proc.exitcode})") from None
    else:
        proc.kill()
    proc.join()
    return result, time.perf_counter() - start


def measure(spec: str, model, budget: int, alpha: float, time_limit: float, probe: int, gain: float) -> dict:
    g = te.graphs.load(os.path.join(ROOT, spec) if spec.endswith(".onnx") else spec)
    initial = g.cost(model)
    start = time.perf_counter()
    greedy = te.search(g, "greedy", model=model)
    greedy_s = time.perf_counter() - start
    start = time.perf_counter()
    first = min(probe, budget)
    r = te.search(g, "backtracking", alpha=alpha, budget=first, model=model)
    probe_s = search_s = time.perf_counter() - start
    bt = {"final_cost": r.final_cost, "expansions": r.expansions, "complete": r.complete, "steps": len(r.applied)}
    used, limited = first, False
    if not r.complete and first < budget:
        full, seconds = limited_backtracking(g, model, alpha, budget, time_limit)
        if full is not None:
            bt, used, search_s = full, budget, seconds
        else:  # stopped at the time limit: the probe's result stands
            limited, search_s = True, seconds
    greedy_speedup = initial / greedy.final_cost
    bt_speedup = initial / bt["final_cost"]
    gain_pct = (greedy.final_cost / bt["final_cost"] - 1.0) * 100.0
    return {"graph": spec, "sets": membership(spec), "ops": g.num_ops, "initial_cost_ms": round(initial, 6),
            "greedy_speedup": round(greedy_speedup, 5), "greedy_steps": len(greedy.applied),
            "greedy_s": round(greedy_s, 3), "backtracking_speedup": round(bt_speedup, 5),
            "backtracking_steps": bt["steps"], "backtracking_s": round(search_s, 2),
            "probe_s": round(probe_s, 2), "budget_used": used, "time_limited": limited,
            "expansions": bt["expansions"], "complete": bt["complete"],
            "gain_pct": round(gain_pct, 4), "is_valley": gain_pct >= gain * 100.0 - 1e-9}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--graphs", nargs="*", default=None, help="graph specs (default: eleven + zoo + valley family)")
    p.add_argument("--sets", nargs="*", default=["eleven", "zoo", "valley"], choices=["eleven", "zoo", "valley"],
                   help="the default graphs: these sets, in this order")
    p.add_argument("--budget", type=int, default=5000)
    p.add_argument("--alpha", type=float, default=1.05)
    p.add_argument("--time-limit", type=float, default=45.0,
                   help="seconds after which a graph's full-budget backtracking is stopped")
    p.add_argument("--probe", type=int, default=500, help="budget of the first search, run in the process")
    p.add_argument("--valley-gain", type=float, default=0.001, help="backtracking / greedy - 1 that marks a valley")
    p.add_argument("--cost-model", default="table:h100_fp32")
    p.add_argument("--progress", default=None, help="JSON lines of finished graphs (resumed from)")
    p.add_argument("--out", default=os.path.join(ROOT, "data", "valley_graphs.json"))
    p.add_argument("--list", action="store_true",
                   help="print the graph specs of --sets (or --graphs), one line, and exit: "
                        "`rlflow evaluate --graphs $(python benchmarks/find_valley_graphs.py --list)`")
    args = p.parse_args(argv)
    if args.list:
        print(" ".join(args.graphs or default_graphs(args.sets)))
        return 0

    model = make_cost_model(args.cost_model)
    kind, _, arg = args.cost_model.partition(":")
    header = {"rule_set_hash": te.rules.default().hash, "rules": len(te.rules.default()),
              "cost_model": args.cost_model, "alpha": args.alpha, "budget": args.budget,
              "time_limit_s": args.time_limit, "probe_budget": args.probe, "valley_gain_pct": args.valley_gain * 100}
    if kind.startswith("table"):
        from taso_env.gpu.cost_models import table_path

        path = table_path(arg)
        header["cost_table"] = os.path.relpath(path, ROOT) if path.startswith(ROOT) else path
        header["cost_table_sha256_16"] = file_sha(path)
    specs = args.graphs or default_graphs(args.sets)
    done: dict[str, dict] = {}
    if args.progress and os.path.exists(args.progress):
        with open(args.progress) as f:
            for line in f:
                rec = json.loads(line)
                same = all(rec.get(k) == v for k, v in header.items() if k not in ("time_limit_s", "probe_budget"))
                full = rec["row"]["budget_used"] == args.budget or rec["row"]["complete"]
                if same and (full or rec.get("time_limit_s") == args.time_limit):
                    done[rec["row"]["graph"]] = rec["row"]
    rows = []
    for spec in specs:
        if spec in done:
            row = {**done[spec], "sets": membership(spec)}
        else:
            row = measure(spec, model, args.budget, args.alpha, args.time_limit, args.probe, args.valley_gain)
            if args.progress:
                with open(args.progress, "a") as f:
                    f.write(json.dumps({**header, "row": row}) + "\n")
        if row["complete"]:  # the search ended before its budget: any budget gives this result
            row = {**row, "budget_used": args.budget}
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    summary = {"n_graphs": len(rows), "valley_graphs": sum(r["is_valley"] for r in rows),
               "time_limited": sum(r["time_limited"] for r in rows)}
    out = {"date": datetime.date.today().isoformat(), **header, **summary,
           "command": "python benchmarks/find_valley_graphs.py " + " ".join(argv if argv is not None else sys.argv[1:]),
           "graphs": rows}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    emit("find_valley_graphs", rows, ["graph", "ops", "greedy_speedup", "backtracking_speedup", "gain_pct",
                                      "is_valley", "budget_used", "backtracking_s"], **header, **summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
