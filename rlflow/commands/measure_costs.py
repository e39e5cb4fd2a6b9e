"""Measure op costs on this GPU into a cost table (HDF5), for graphs and their rewrites.

Fills the table for the given graphs and for every op configuration that search and
rollouts reach from them.

    rlflow measure-costs --graphs squeezenet resnet50 data/models/bert_base.onnx \
        --out data/costs/h100_fp32.h5 --random-walk 4

For each graph: the graph itself, the candidate graphs along a greedy descent and
along `--random-walk` random walks, and `--rewrites` random-rewrite graphs; each op
configuration missing from the table is measured once in isolation (~100 back-to-back
copies in a CUDA graph, median) and merged into `--out`. Opaque ops are skipped (they
stay on the analytic fallback). Prints a JSON summary.

`--signatures-from TABLE.h5` measures every op configuration of an existing table (all
its tables, any device or math mode) that `--out` lacks for this GPU and `--math`: how a
table is re-measured after the executor changes, or measured in another math mode:

    rlflow measure-costs --signatures-from data/costs/h100_fp32.h5 --out new.h5 --math tf32

`--only KIND` (with `--signatures-from`) measures only the source's configurations of
one kind: an op type, `pointwise-conv` or `depthwise-conv` (the convolutions the
executor runs on its own paths; `taso_env.gpu.cost_table.SIGNATURE_KINDS`). Where `--out`
does not exist yet it starts as the source's table for this GPU and `--math` less those
entries, so one command measures one kind of op again after the executor changed how it
runs it, and rerunning it resumes (the H100 tables' pointwise and depthwise
convolutions were re-measured so, docs/gpu.md):

    rlflow measure-costs --signatures-from data/costs/h100_fp32.h5 --only pointwise-conv \
        --out h100_fp32.h5 --math fp32

Convolution algorithms are searched for in a child process before anything is measured
(their choices reach this process through the algorithm cache file): a process that
searches runs every op ~5% slower afterwards (docs/gpu.md, "What makes the process
slower"), and the table should price ops as a fresh process runs them. `--search-here`
searches in the measuring process instead.

The table is saved every 100 measurements: a killed run loses at most that, and the same
command resumes it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from rlflow.commands import MATH_MODES, search_convolutions_in_child


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--graphs", nargs="+", default=[], help="builder names or ONNX files")
    parser.add_argument("--signatures-from", default=None,
                        help="measure every op configuration of this cost table file (HDF5) that --out lacks")
    parser.add_argument("--out", required=True, help="HDF5 cost table to create or extend")
    parser.add_argument("--only", default=None, metavar="KIND",
                        help="with --signatures-from: measure only its op configurations of this kind (an op type, "
                             "pointwise-conv or depthwise-conv); a new --out starts as the source's table less them")
    parser.add_argument("--math", default="fp32", choices=MATH_MODES)
    parser.add_argument("--greedy-steps", type=int, default=5)
    parser.add_argument("--random-walk", type=int, default=2, help="random walks per graph")
    parser.add_argument("--walk-length", type=int, default=10)
    parser.add_argument("--rewrites", type=int, default=0, help="random-rewrite graphs per graph")
    parser.add_argument("--max-candidates", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=0, help="stop measuring after this many seconds")
    parser.add_argument("--search-here", action="store_true",
                        help="search convolution algorithms in the measuring process instead of a child process "
                             "first (faster, but every op measured after the search is priced ~5%% higher: "
                             "docs/gpu.md)")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    import taso_env as te
    from taso_env.gpu import cost_table, cuda_backend

    if not args.graphs and not args.signatures_from:
        raise SystemExit("rlflow measure-costs: give --graphs, --signatures-from or both")
    if args.only and not args.signatures_from:
        raise SystemExit("rlflow measure-costs: --only selects among the op configurations of --signatures-from")
    sources = cost_table.load_all(args.signatures_from) if args.signatures_from else []
    known = set(cost_table.SIGNATURE_KINDS).union(*(t.op_types() for t in sources))
    if args.only and args.only not in known:
        raise SystemExit(f"rlflow measure-costs: --only {args.only!r} is neither an op type of {args.signatures_from} "
                         f"nor one of {sorted(cost_table.SIGNATURE_KINDS)}")
    cuda_backend.require()
    device = cuda_backend.device_name()
    what = " ".join(args.graphs + ([f"--signatures-from {args.signatures_from}"] if args.signatures_from else [])
                    + ([f"--only {args.only}"] if args.only else []))
    table = cost_table.CostTable(device, args.math, notes=f"rlflow measure-costs {what}")
    if os.path.exists(args.out):
        try:
            table = cost_table.load(args.out, device, args.math)
        except cost_table.MissingTableError:
            pass
    elif args.only:  # the source's entries of this device and mode, less those measured again
        for source in sources:
            if (source.device, source.math) == (device, args.math):
                table = cost_table.CostTable(device, args.math, notes=f"{source.notes}; {what}".strip("; "),
                                             entries={sig: (ms, analytic) for sig, ms, analytic in source.items()
                                                      if not cost_table.signature_is(sig, args.only)})
    start = time.perf_counter()

    def out_of_time() -> bool:
        return bool(args.time_limit) and time.perf_counter() - start > args.time_limit

    per_graph, skipped, failed, measured = {}, set(), {}, 0

    def measure(sig: str, how, analytic: float) -> bool:
        try:
            table.set(sig, how(), analytic)
            return True
        except cuda_backend.UnsupportedGraphError:
            skipped.add(sig)
        except cuda_backend.CudaBackendError as err:  # report, keep the rest of the table
            failed[sig] = str(err)
        return False

    # What to measure, per source: {signature: (how to measure it, analytic ms)}.
    work: list[tuple[str, dict, dict]] = []
    if sources:
        todo = {}
        for source in sources:
            for sig, _, analytic in source.items():
                if args.only and not cost_table.signature_is(sig, args.only):
                    continue
                if sig not in table and sig not in todo:
                    todo[sig] = (lambda s=sig: cuda_backend.measure_signature(s, args.math), analytic)
        work.append(("--signatures-from", todo, {}))
    for spec in args.graphs:
        g = te.graphs.load(spec)
        graphs = cost_table.explore(g, greedy_steps=args.greedy_steps, random_walks=args.random_walk,
                                    walk_length=args.walk_length, max_candidates=args.max_candidates,
                                    seed=args.seed)
        if args.rewrites:
            graphs += cost_table.random_rewrites(g, args.rewrites, seed=args.seed)
        todo = {sig: (lambda g=graph, i=op_id: cuda_backend.measure_op(g, i, args.math), analytic)
                for sig, (graph, op_id, analytic) in cost_table.missing_configs(graphs, table).items()}
        work.append((spec, todo, {"graphs_explored": len(graphs)}))

    signatures = [sig for _, todo, _ in work for sig in todo]
    conv_search = search_convolutions_in_child(args, signatures=signatures)
    for label, todo, info in work:
        done = 0
        for sig, (how, analytic) in tqdm(todo.items(), desc=label, unit="op", file=sys.stderr):
            if out_of_time():
                break
            if sig in table:  # an earlier source's op configuration too
                continue
            done += measure(sig, how, analytic)
            if done and done % 100 == 0:
                cost_table.save(table, args.out)
        measured += done
        per_graph[label] = {**info, "new_configs": len(todo), "measured": done}
        print(f"{label}: {len(todo)} new op configurations, {done} measured", file=sys.stderr, flush=True)
        cost_table.save(table, args.out)  # after each source: a crash loses at most 100 measurements
    summary = {"out": args.out, "device": device, "math": args.math, "entries": len(table),
               "measured": measured, "conv_search": conv_search, "skipped_unsupported": len(skipped), "failed": failed,
               "seconds": time.perf_counter() - start,
               "op_types": table.op_types(), "graphs": per_graph, "bytes": os.path.getsize(args.out)}
    print(json.dumps(summary))
    return 0
