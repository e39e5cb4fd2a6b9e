#!/usr/bin/env python
"""The CUDA backend on the GPU: measured runtimes, estimated vs measured speedups, rank
correlation of the table cost model with measurements, PyTorch side by side, and a
memory-leak check.

    python benchmarks/bench_cuda.py [--models ...] [--budget 200] [--candidates 50] \
        [--table data/costs/h100_fp32.h5] [--torch] [--leak-iters 10000]

Per model: measured runtime (CUDA-graph replay, median) of the original graph and of
the backtracking-optimised one (searched with the table model, falling back to the
analytic model without a table), estimated vs measured speedup, Spearman rank
correlation of estimated (table) vs measured runtime over the original and
`--candidates` random-rewrite graphs, and over the original and up to `--candidates`
graphs evenly spaced along the table's greedy descent (`spearman_path`: the graphs whose
order decides what search keeps; random rewrites of a transformer move its runtime by
less than 1%, near the measurement noise), each one's estimate and measurement appended to
`--dump` as a JSON line, the table's miss rate on the random rewrites, and PyTorch's
CUDA-graph runtime (measured here with --torch; docs/gpu.md's figure otherwise). With
`--compare-unfused`, the same for the table pricing every op alone (before the model
knew which ops the executor runs in a convolution's epilogue): its Spearman over the
same random rewrites, and its own greedy path measured. `noise_floor`: the relative
spread of the original's runtime over `--noise-executors` fresh executors, beside
`measured_spread`, the candidates' (a Spearman over candidates whose spread is within
the noise floor ranks noise). `spearman_repeat`: the measurement against itself, the
Spearman between the candidates' runtimes by one half of the executors (even-numbered)
and by the other (with `--executors-per-graph` >= 2): how well the GPU's own
measurements rank these candidates, the ceiling of any cost model's `spearman`.
Graphs are measured in rounds, each round every graph once in a new random order with
its tensors shifted in memory at random (`--order`, `--placements`;
taso_env/gpu/interleaved_measurement.py says why).
Then `--leak-iters` end-to-end measurements in one process (a fresh executor every
`--leak-fresh-every`), GPU memory in use before and after. Prints one JSON line and a markdown table.
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.engine.cost_model import AnalyticCostModel  # noqa: E402
from taso_env.gpu import cost_table  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402
from taso_env.gpu import interleaved_measurement as im  # noqa: E402
from taso_env.gpu.cost_models import TableCostModel  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TABLE = os.path.join(ROOT, "data", "costs", "h100_fp32.h5")
DEFAULT_MODELS = ["squeezenet", "resnet18", "resnet50", "inception_v3", "bert_base", "vit_base", "nasrnn",
                  "resnext50"]
# docs/gpu.md: PyTorch 2.11, batch 1, CUDA-graph replay. (ms, device, math)
PYTORCH_REFERENCE = {"resnet50": (2.20, "H100", "fp32"), "bert_base": (2.85, "H100", "fp32 kernel time"),
                     "resnet18": (0.50, "H200", "default"), "squeezenet": (0.33, "H200", "default"),
                     "inception_v3": (1.88, "H200", "default"), "vit_base": (3.14, "H200", "default")}


def spearman(a, b) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r
    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return cov / var if var else float("nan")


def torch_runtime(name: str, math: str) -> float | None:
    """PyTorch's CUDA-graph replay time (ms) of the same network, batch 1, same math."""
    import torch
    import torchvision

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = math == "tf32"
    makers = {"squeezenet": (torchvision.models.squeezenet1_1, 224), "resnet18": (torchvision.models.resnet18, 224),
              "resnet50": (torchvision.models.resnet50, 224), "resnext50": (torchvision.models.resnext50_32x4d, 224),
              "vit_base": (torchvision.models.vit_b_16, 224),
              "inception_v3": (lambda: torchvision.models.inception_v3(aux_logits=False, init_weights=False), 299)}
    if name not in makers:
        return None
    make, size = makers[name]
    model = make().eval().cuda()
    x = torch.randn(1, 3, size, size, device="cuda")
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(x)
        torch.cuda.current_stream().wait_stream(s)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            model(x)
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(5):
        graph.replay()
    for _ in range(20):
        start.record()
        for _ in range(10):
            graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 10)
    del graph, model
    torch.cuda.empty_cache()
    return sorted(times)[len(times) // 2]


def bench_model(name: str, model, args) -> dict:
    g = te.load_onnx(name) if name.endswith(".onnx") else te.graphs.build(name, seed=None)
    opaque = "host" if any(o.type == "Opaque" for o in g.ops) else "error"
    # every measurement: fresh executors, 3 warm-up and 30 timed replays each
    measuring = dict(warmup=3, repeats=30, placements=args.placements, math=args.math, opaque=opaque)
    r = te.search(g, "backtracking", budget=args.budget, model=model)
    orig_ms, opt_ms = im.measure_side_by_side([g, r.graph], seed=args.measure_seed, **measuring)
    graphs = [g] + cost_table.random_rewrites(g, args.candidates, seed=args.seed)
    if hasattr(model, "reset_counters"):
        model.reset_counters()
    est = [model.graph_cost(x) for x in graphs]
    misses = getattr(model, "misses", 0)

    def runs_of(xs):  # per graph, per round: a fresh executor's median of 30 replays
        return im.measure_interleaved(xs, rounds=args.executors_per_graph, order=args.order, seed=args.measure_seed,
                                      **measuring)

    def measured(xs):  # per graph: the middle of its rounds' medians
        return [im.middle(each) for each in runs_of(xs)]

    runs = runs_of(graphs)
    meas = [im.middle(each) for each in runs]
    repeat = (spearman([im.middle(each[0::2]) for each in runs], [im.middle(each[1::2]) for each in runs])
              if args.executors_per_graph >= 2 else float("nan"))
    # the noise floor: the original measured again by fresh executors, in the same way
    again = (im.measure_interleaved([g], rounds=args.noise_executors, seed=args.measure_seed + 1, **measuring)[0]
             if args.noise_executors else [])
    noise = (max(again) - min(again)) / im.middle(again) if again else float("nan")
    path = [g] + (cost_table.greedy_path(g, args.candidates, model=model) if args.path else [])
    path_est = [model.graph_cost(x) for x in path]
    path_meas = measured(path)
    unfused = {}
    if args.compare_unfused:  # the table pricing every op alone: same random rewrites, its own greedy path
        alone = TableCostModel(args.table, device=model.device, math=model.math, fused_epilogues=False)
        upath = [g] + cost_table.greedy_path(g, args.candidates, model=alone)
        upath_est = [alone.graph_cost(x) for x in upath]
        upath_meas = measured(upath)
        unfused = {"spearman_unfused": spearman([alone.graph_cost(x) for x in graphs], meas),
                   "spearman_path_unfused": spearman(upath_est, upath_meas) if len(upath) > 2 else float("nan"),
                   "path_unfused_est_speedup": upath_est[0] / upath_est[-1],
                   "path_unfused_measured_speedup": upath_meas[0] / upath_meas[-1]}
    residency = {"spearman_residency": float("nan")}
    if isinstance(model, TableCostModel) and args.math == "fp32":  # the same table with the weight-residency term
        with_term = TableCostModel(args.table, device=model.device, math=model.math, weight_residency=True)
        residency["spearman_residency"] = spearman([with_term.graph_cost(x) for x in graphs], meas)
    ref = PYTORCH_REFERENCE.get(name)
    row = {"model": name, "ops": g.num_ops, "measured_ms": orig_ms, "optimised_ms": opt_ms,
           "candidate_est_ms": est, "candidate_measured_ms": meas, "candidate_measured_runs": runs,
           "executors_per_graph": args.executors_per_graph,
           "est_speedup": r.speedup, "measured_speedup": orig_ms / opt_ms,
           "est_ms": r.initial_cost, "spearman": spearman(est, meas), "candidates": len(graphs),
           "measured_spread": (max(meas) - min(meas)) / im.middle(meas), "noise_floor": noise,
           "spearman_repeat": repeat,
           "path_est_ms": path_est, "path_measured_ms": path_meas,
           "spearman_path": spearman(path_est, path_meas) if len(path) > 2 else float("nan"),
           "path_graphs": len(path), "path_est_speedup": path_est[0] / path_est[-1],
           "path_measured_speedup": path_meas[0] / path_meas[-1], **unfused, **residency,
           "table_miss_rate": misses / max(1, sum(x.num_ops for x in graphs)),
           "pytorch_ref_ms": ref[0] if ref else float("nan"),
           "pytorch_ref": f"{ref[1]} {ref[2]}" if ref else "-", "search_s": r.seconds,
           "rules_fired": ", ".join(f"{n} {c}" for n, c in r.rule_fires.most_common(4))}
    print(f"{name}: {orig_ms:.3f} ms -> {opt_ms:.3f} ms, spearman {row['spearman']:.3f}",
          file=sys.stderr, flush=True)
    return row


def leak_check(iters: int, max_seconds: float, math: str, fresh_every: int = 10) -> dict:
    """`iters` end-to-end measurements of SqueezeNet in this process; every
    `fresh_every`-th one plans a fresh executor (buffers, descriptors, CUDA graph) and
    frees the previous one. GPU memory in use (cudaMemGetInfo) before and after."""
    g = te.graphs.build("squeezenet", seed=None)
    cb.measure(g, math=math, warmup=1, repeats=1)  # one-time handles, caches and workspace
    free0, total = cb.memory_info()
    start, done, fresh, ex = time.perf_counter(), 0, 0, None
    while done < iters and time.perf_counter() - start < max_seconds:
        if done % fresh_every == 0:
            if ex is not None:
                ex.close()
            ex, fresh = cb.Executor(g, math=math), fresh + 1
        ex.measure(warmup=1, repeats=1, inner=1)
        done += 1
    if ex is not None:
        ex.close()
    free1, _ = cb.memory_info()
    return {"iterations": done, "fresh_executors": fresh, "seconds": time.perf_counter() - start,
            "used_before": total - free0, "used_after": total - free1, "growth_bytes": free0 - free1}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--candidates", type=int, default=50)
    parser.add_argument("--table", default=DEFAULT_TABLE)
    parser.add_argument("--math", default="fp32", choices=cb.MATH_MODES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dump", default=None, help="append per-candidate estimated / measured ms as JSON lines here")
    parser.add_argument("--torch", action="store_true", help="measure PyTorch side by side")
    parser.add_argument("--noise-executors", type=int, default=5,
                        help="measure the original this many more times, each by a fresh executor: the spread "
                             "of those (noise_floor) against the candidates' (measured_spread) says whether "
                             "their ranking is measurable at all")
    parser.add_argument("--executors-per-graph", type=int, default=1,
                        help="measure each graph in this many rounds, by a fresh executor each, and take the "
                             "middle (the same graph differs by up to a few percent between executors: docs/gpu.md)")
    parser.add_argument("--order", default="interleaved", choices=im.ORDERS,
                        help="interleaved: each round measures every graph once, in a new random order; "
                             "sequential: all executors of one graph, then the next (taso_env.gpu."
                             "interleaved_measurement says why the first)")
    parser.add_argument("--measure-seed", type=int, default=0,
                        help="seeds the measuring rounds' visiting orders and placements (--seed picks the rewrites)")
    parser.add_argument("--placements", default="random", choices=im.PLACEMENTS,
                        help="random: each executor's tensors shifted in memory at random; fixed: not")
    parser.add_argument("--no-path", dest="path", action="store_false",
                        help="skip measuring the table's greedy path")
    parser.add_argument("--compare-unfused", action="store_true",
                        help="also rank the random rewrites with the table pricing convolution epilogues alone "
                             "(as before the cost model knew the executor fuses them), and measure that model's "
                             "greedy path")
    parser.add_argument("--leak-iters", type=int, default=10000)
    parser.add_argument("--leak-max-seconds", type=float, default=300)
    parser.add_argument("--leak-fresh-every", type=int, default=10, help="a fresh executor every N measurements")
    args = parser.parse_args(argv)

    cb.require()
    model = AnalyticCostModel("h100-tf32" if args.math == "tf32" else "h100")
    if os.path.exists(args.table):
        try:  # this GPU's table, else the file's table of this math mode (another GPU's)
            model = TableCostModel(args.table, device=cb.device_name(), math=args.math)
        except cost_table.MissingTableError:
            model = TableCostModel(args.table, math=args.math)
    if args.compare_unfused and not isinstance(model, TableCostModel):
        parser.error("--compare-unfused needs a cost table")
    leak = {}
    if args.leak_iters:
        leak = leak_check(args.leak_iters, args.leak_max_seconds, args.math, args.leak_fresh_every)
    rows = []
    for name in args.models:  # one row per model, printed as soon as it is done
        try:
            row = bench_model(name, model, args)
        except Exception as err:  # report the failing model and go on with the others
            print(f"{name}: FAILED {type(err).__name__}: {err}", file=sys.stderr, flush=True)
            continue
        row["pytorch_here_ms"] = float("nan")
        if args.torch:
            try:
                row["pytorch_here_ms"] = torch_runtime(name, args.math) or float("nan")
            except Exception as err:  # torch is optional; report and go on
                print(f"pytorch {name}: {err}", file=sys.stderr)
        here = row["pytorch_here_ms"]
        row["vs_pytorch"] = row["measured_ms"] / here if here == here else float("nan")
        if args.dump:  # per-candidate estimates and measurements (the rewrites are reproducible from --seed)
            with open(args.dump, "a") as f:
                f.write(json.dumps({"model": name, "seed": args.seed, "candidates": args.candidates,
                                    "order": args.order, "placements": args.placements,
                                    "measure_seed": args.measure_seed,
                                    "est_ms": row["candidate_est_ms"],
                                    "measured_ms": row["candidate_measured_ms"],
                                    "measured_runs_ms": row["candidate_measured_runs"],
                                    "path_est_ms": row["path_est_ms"],
                                    "path_measured_ms": row["path_measured_ms"]}) + "\n")
        for key in ("candidate_est_ms", "candidate_measured_ms", "candidate_measured_runs", "path_est_ms",
                    "path_measured_ms"):
            del row[key]
        print("ROW " + json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    unfused = ["spearman_unfused", "spearman_path_unfused", "path_unfused_est_speedup",
               "path_unfused_measured_speedup"] if args.compare_unfused else []
    emit("cuda", rows, ["model", "ops", "measured_ms", "optimised_ms", "est_speedup", "measured_speedup",
                        "spearman", "spearman_residency", "spearman_repeat", "candidates", "measured_spread",
                        "noise_floor",
                        "spearman_path", "path_graphs", "path_est_speedup", "path_measured_speedup", *unfused,
                        "table_miss_rate",
                        "pytorch_here_ms", "vs_pytorch", "pytorch_ref_ms", "pytorch_ref"],
         device=cb.device_info(), math=args.math, cost_model=model.name, budget=args.budget, leak=leak,
         order=args.order, placements=args.placements, measure_seed=args.measure_seed)
    if leak:
        print(f"\nmemory: {leak['iterations']} end-to-end measurements ({leak['fresh_executors']} fresh executors) "
              f"in {leak['seconds']:.1f} s; GPU memory in "
              f"use {leak['used_before']} B before, {leak['used_after']} B after ({leak['growth_bytes']} B growth)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
