#!/usr/bin/env python
"""Runs ONNX exports on the CUDA executor and checks them against the reference executor:
each file is loaded in rlflow, optimised as `rlflow optimize --method greedy` does (the
shipped H100 table of --math; --optimised: the files are taken as they are), planned on
the GPU and run on deterministic random inputs and weights (`random_feeds`, seed 0, the
inputs and weights `rlflow optimize`'s onnxruntime check uses), and its outputs are
compared with the numpy reference executor's (taso_env.engine.reference) on the same
graph and feeds.

    python benchmarks/export_zoo.py OUT --models mc3_18 r2plus1d_18 opt_small ...
    cd /tmp && python /path/to/benchmarks/check_exports_on_gpu.py OUT [more.onnx ...] [--original]

Paths are ONNX files or folders (every *.onnx in them, by name). Per graph: max |GPU -
reference| (`max_abs_diff`), that over the output's largest |reference| (`rel_diff`, the
figure docs/measured/2026-11-28_unseen_exports.md quotes; the maximum over the graph's
outputs), and the median of a CUDA-graph replay (`gpu_ms`, `Executor.measure`, one
executor, in this process). The runtime is a diagnostic: the graphs run one after
another, convolution algorithms are searched in this process (which slows it slightly:
docs/gpu.md) and nothing is interleaved; `rlflow measure` and
benchmarks/bench_vs_pytorch.py are the measurements. Graphs with an opaque op run it on
the host (`opaque="host"`); they are timed only where the executor allows it (a host op
mid-graph is refused: `gpu_ms` is empty and `note` says why).

Prints one JSON row per graph to stderr as it goes, then (benchmarks/common.py's `emit`)
one JSON line and a markdown table. Exits 1 if a file fails, or if any `rel_diff` exceeds
--tol; exits 2 without a usable CUDA backend. No TensorFlow, no network.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit  # noqa: E402

COLUMNS = ["model", "graph", "ops", "opaque", "speedup_est", "max_abs_diff", "rel_diff", "gpu_ms", "ref_s", "s"]


def onnx_files(paths: list[Path]) -> list[Path]:
    """The ONNX files of `paths`: files as given, folders' *.onnx sorted by name."""
    out = []
    for p in paths:
        if p.is_dir():
            out.extend(sorted(p.glob("*.onnx")))
        elif p.is_file():
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    return out


def compare(want: dict, got: dict) -> tuple[float, float]:
    """(max |got - want|, max |got - want| / max |want|), the worst output of each
    (taso_env.onnx.check.compare_outputs' differences, over each output's scale)."""
    from taso_env.onnx.check import compare_outputs

    diff = compare_outputs(want, got).max_abs_diff
    scale = {name: max(float(np.max(np.abs(np.asarray(w, np.float64)), initial=0.0)), 1e-12)
             for name, w in want.items()}
    return max(diff.values(), default=0.0), max((diff[n] / scale[n] for n in diff), default=0.0)


def check_graph(g, feeds: dict, *, math: str, repeats: int, measure: bool) -> dict:
    """GPU against reference for one graph on `feeds` (inputs and weights by name)."""
    from taso_env.engine import reference
    from taso_env.gpu import cuda_backend as cb

    weight_names = {o.name for o in g.weight_ops}
    g = g.with_weights({k: v for k, v in feeds.items() if k in weight_names})
    inputs = {o.name: feeds[o.name] for o in g.inputs}
    opaque = sum(o.type == "Opaque" for o in g.ops)
    t0 = time.perf_counter()
    want = reference.run(g, inputs)
    ref_s = time.perf_counter() - t0
    row = {"ops": g.num_ops, "opaque": opaque, "ref_s": round(ref_s, 2), "gpu_ms": None}
    with cb.Executor(g, math=math, opaque="host" if opaque else "error") as ex:
        got = ex.run(inputs)
        row["max_abs_diff"], row["rel_diff"] = compare(want, got)
        row["steps"] = ex.num_steps
        if measure:
            try:
                row["gpu_ms"] = round(ex.measure(warmup=10, repeats=repeats).median_ms, 4)
            except cb.UnsupportedGraphError as err:
                row["note"] = f"not timed: {err}"
    return row


def check_file(path: Path, args: argparse.Namespace) -> list[dict]:
    """Rows of one file: the original graph (with --original) and the optimised one."""
    import taso_env as te
    from taso_env.onnx.check import random_feeds

    start = time.perf_counter()
    g = te.graphs.load(str(path))
    feeds = random_feeds(g, args.seed)
    opaque_types = collections.Counter(str(o.attrs["onnx_op_type"], "ascii") for o in g.ops if o.type == "Opaque")
    if args.optimised:
        graphs, speedup, search_s = [("as given", g)], 1.0, 0.0
    else:
        t0 = time.perf_counter()
        result = te.search(g, args.method)
        search_s = time.perf_counter() - t0
        speedup = round(result.initial_cost / result.final_cost, 3)
        graphs = ([("original", g)] if args.original else []) + [(args.method, result.graph)]
    rows = []
    for label, graph in graphs:
        t0 = time.perf_counter()
        row = {"model": path.stem, "graph": label, "speedup_est": speedup if label == args.method else 1.0,
               **check_graph(graph, feeds, math=args.math, repeats=args.repeats, measure=not args.no_measure)}
        if opaque_types:
            row["opaque_types"] = dict(opaque_types)
        row["search_s"] = round(search_s, 2) if label == args.method else 0.0
        row["s"] = round(time.perf_counter() - t0 + (search_s if label == args.method else 0.0), 1)
        rows.append(row)
    rows[0]["load_s"] = round(time.perf_counter() - start - sum(r["s"] for r in rows), 1)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path, help="ONNX files or folders of them")
    ap.add_argument("--method", default="greedy", help="the search that optimises each file (default: greedy)")
    ap.add_argument("--optimised", action="store_true", help="the files are optimised already: no search")
    ap.add_argument("--original", action="store_true", help="also check the graph as loaded, before the search")
    ap.add_argument("--math", default="fp32", choices=["fp32", "tf32"],
                    help="GPU math mode; the search prices graphs by its H100 table (default: fp32, strict)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs and weights (default: 0)")
    ap.add_argument("--repeats", type=int, default=50, help="timed replays of the diagnostic runtime (default: 50)")
    ap.add_argument("--no-measure", action="store_true", help="compare outputs only, no runtime")
    ap.add_argument("--tol", type=float, default=1e-4, help="largest rel_diff that passes (default: 1e-4)")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="start no file after this many seconds; the rest are listed as skipped")
    args = ap.parse_args(argv)

    import taso_env as te
    from taso_env.gpu import cuda_backend as cb
    from taso_env.gpu.cost_models import measured_table_spec

    if not cb.available():
        print(f"check_exports_on_gpu: no CUDA backend here ({cb.unavailable_reason()})", file=sys.stderr)
        return 2
    cost_model = measured_table_spec(args.math)
    te.set_cost_model(cost_model)  # as `rlflow optimize --math` does
    files = onnx_files(args.paths)
    start = time.perf_counter()
    rows, failed, skipped = [], [], []
    for path in files:
        if args.deadline_s is not None and time.perf_counter() - start > args.deadline_s:
            skipped.append(path.stem)
            continue
        try:
            new = check_file(path, args)
        except Exception as err:  # report it and go on with the other files
            new = [{"model": path.stem, "graph": "-", "error": f"{type(err).__name__}: {err}"}]
            failed.append(path.stem)
        for r in new:
            print(json.dumps(r), file=sys.stderr, flush=True)
        rows.extend(new)
    checked = [r for r in rows if "rel_diff" in r]
    over = sorted({r["model"] for r in checked if not r["rel_diff"] <= args.tol})
    info = cb.device_info()
    summary = {"files": len(files), "checked": len({r["model"] for r in checked}), "failed": failed,
               "skipped": skipped, "over_tol": over,
               "max_rel_diff": max((r["rel_diff"] for r in checked), default=None),
               "max_abs_diff": max((r["max_abs_diff"] for r in checked), default=None)}
    table = [{c: ("" if r.get(c) is None else r.get(c)) for c in COLUMNS}
             | ({"rel_diff": "error: " + r["error"]} if "error" in r else {}) for r in rows]
    emit("check_exports_on_gpu", table, COLUMNS,
         device={k: info.get(k) for k in ("name", "cudnn", "cublas", "cuda_runtime")}, math=args.math,
         method=None if args.optimised else args.method,
         cost_model=None if args.optimised else cost_model, seed=args.seed, tol=args.tol, summary=summary,
         full_rows=rows)
    print(f"\n{summary['checked']} of {summary['files']} files checked on {info.get('name')} ({args.math}); "
          f"max rel_diff {summary['max_rel_diff']}, max abs diff {summary['max_abs_diff']}; "
          f"failed: {failed or 'none'}; skipped: {skipped or 'none'}; over --tol {args.tol}: {over or 'none'}")
    return 1 if failed or over else 0


if __name__ == "__main__":
    sys.exit(main())
