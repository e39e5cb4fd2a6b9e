#!/usr/bin/env python
"""rlflow's CUDA runtime beside PyTorch's, per zoo model, in one process on one GPU.

    python benchmarks/bench_vs_pytorch.py [--models resnet50 ...] [--budget 50] [--math fp32 tf32 fp16 bf16]
        [--cost-model analytic | table] [--compile-mode default max-autotune | none] [--channels-last]
        [--cold-compile cold.jsonl] [--time-limit S]

Per model (any torchvision classification model or export_zoo.TRANSFORMERS name, random
init as benchmarks/export_zoo.py makes it, batch 1): the
model is exported with torch.onnx (weights kept) and loaded in rlflow; the graph is
optimised (backtracking search; `--cost-model analytic`, the default: the analytic H100
model, one optimised graph for every math mode; `table`: the shipped H100 table of each
math mode, `table:h100_<math>`, one search per mode); each optimised graph's ONNX export
is checked against the source export in onnxruntime (CPU); both graphs run on the GPU
and their outputs are compared with PyTorch's (strict fp32, max abs diff relative to
the output scale); then, per math mode, PyTorch CUDA-graph replay and rlflow's
CUDA-graph replay of the original and the optimised graph are timed (warm-up, median).
The searches on the shipped tables price bf16 with the fp16 table (`measured_table_spec`).

Beside eager PyTorch (`torch_<math>`), in the same process: `torch.compile` per
`--compile-mode` (default: inductor's default mode, columns `compile_<math>`;
`max-autotune`: `compile_ma_<math>`, inductor's mode "max-autotune-no-cudagraphs"; `none`:
no compiled columns). Each compiled model (that math mode's copy) is compiled after a
dynamo reset; its first call's time is `compile_<math>_s` (with `_cache`: how inductor's
FX-graph cache answered, "hit" when benchmarks/torch_compile_baseline.py warmed it, whose
cold times `--cold-compile` adds as `compile_<math>_cold_s`); the compiled call is then
captured in a CUDA graph and replayed exactly as eager is. `orig_<math>_vs_compile` and
`opt_<math>_vs_compile` = the compiled time / rlflow's (above 1: rlflow faster).
`--channels-last`: eager PyTorch on a channels-last copy of the model and input
(`torch_cl_<math>`, image models only). Models not started within `--time-limit` seconds
are reported as skipped.
TF32 means TF32 convolutions and GEMMs on both sides (torch.backends flags / rlflow
math="tf32"); fp32 means no TF32 anywhere on either side. fp16 / bf16: PyTorch runs a
copy of the model cast to that dtype on an input of that dtype, rlflow its 16-bit math
mode (weights cast at load); both outputs are compared with PyTorch's fp32 output
(`*_err`: max abs diff relative to the output scale), so rlflow's 16-bit error stands
beside PyTorch's own.

bert_base: rlflow runs data/models/bert_base.onnx (random weights); PyTorch runs
transformers' BertModel from BertConfig() (seq 128) by CUDA-graph replay where it
captures, else eager (the row says which). Outputs are not compared (different weights).

Prints the device and versions, one JSON line and a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch  # before taso_env: both load the same cuDNN wheel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from common import emit  # noqa: E402
from export_zoo import export_full, feeds_of, make, torch_outputs  # noqa: E402
from profile_vs_pytorch import HALF, graph_replay_ms, in_math, set_math  # noqa: E402
from torch_compile_baseline import COLUMN, channels_last, compile_model, torch_bert  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402
from taso_env.gpu.cost_models import measured_table_spec  # noqa: E402
from taso_env.onnx import check  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["resnet18", "resnet50", "squeezenet1_1", "inception_v3", "mobilenet_v2", "vit_b_16",
           "mobilenet_v3_large", "efficientnet_b0", "densenet121", "convnext_tiny", "bert_base"]


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want))), 1e-6)
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale


def torch_ms(fn) -> tuple[float, str]:
    """PyTorch's ms per call of `fn`: CUDA-graph replay where it captures, else the median
    wall time of eager calls (Hugging Face models that copy a host tensor while running)."""
    try:
        return graph_replay_ms(fn), "cuda graph"
    except Exception:
        torch.cuda.synchronize()
        times = []
        for _ in range(30):
            t = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t) * 1000)
        return float(np.median(times[5:])), "eager wall"


def optimise(g, row: dict, args) -> dict:
    """{math mode: the optimised graph}: one backtracking search on the analytic model, or
    one per mode on that mode's shipped H100 table; the search time and rules fired in `row`."""
    start = time.perf_counter()
    if args.cost_model == "analytic":
        r = te.search(g, "backtracking", budget=args.budget, model="analytic")
        found = {math: r for math in args.math}
    else:
        by_spec: dict = {}
        for math in args.math:
            spec = measured_table_spec(math)
            if spec not in by_spec:
                by_spec[spec] = te.search(g, "backtracking", budget=args.budget, model=spec)
        found = {math: by_spec[measured_table_spec(math)] for math in args.math}
    row["search_s"] = round(time.perf_counter() - start, 2)
    row["rules"] = "; ".join(dict.fromkeys(", ".join(f"{k} {v}" for k, v in r.rule_fires.most_common(3))
                                           for r in found.values()))
    return {math: r.graph for math, r in found.items()}


def distinct(graphs):
    """The graphs, each once (equal graphs by hash)."""
    return list({g.hash(): g for g in graphs}.values())


def compiled_columns(row: dict, model, x, math: str, args, want: np.ndarray | None = None) -> None:
    """`torch.compile` of the math mode's model, per inductor mode: first-call seconds,
    then CUDA-graph replay ms (and, for 16-bit modes with `want`, the error); eager
    channels-last with `--channels-last`."""
    import torch._dynamo

    for mode in args.compile_mode:
        key = f"{COLUMN[mode]}_{math}"
        try:
            fn, seconds, cache = compile_model(model, x, mode)
            row[f"{key}_s"], row[f"{key}_cache"] = round(seconds, 2), cache
            cold = args.cold.get((row["model"], math, mode))
            if cold is not None:
                row[f"{key}_cold_s"] = cold
            row[key], how = torch_ms(fn)
            if how != "cuda graph":
                row[f"{COLUMN[mode]}_how"] = how
            if want is not None and math in HALF:
                row[f"{key}_err"] = rel_err(fn().float().cpu().numpy(), want)
            del fn
        except Exception as e:
            row[key] = float("nan")
            row.setdefault("errors", []).append(f"{key}: {type(e).__name__}: {e}"[:300])
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    if args.channels_last:
        cl = channels_last(model, x)
        if cl is not None:
            with torch.no_grad():
                row[f"torch_cl_{math}"], _ = torch_ms(lambda m=cl[0], x=cl[1]: torch_outputs(m, x))
            del cl
            torch.cuda.empty_cache()


def bench_export(name: str, args) -> dict:
    """A torchvision or TRANSFORMERS model of export_zoo, exported with its weights."""
    model, x = make(name)
    proto = export_full(name, model, x)
    row: dict = {"model": name}
    g = te.load_onnx(proto, name=name)
    row["ops"] = sum(1 for o in g.ops if o.type not in ("Input", "Weight"))
    row["opaque"] = sum(1 for o in g.ops if o.type == "Opaque")
    if row["opaque"]:
        row["opaque_types"] = sorted({str(o.attrs.get("onnx_op_type", b"?"), "ascii") for o in g.ops
                                      if o.type == "Opaque"})
    optimised = optimise(g, row, args)
    feeds = feeds_of(x)
    try:
        row["ort_equal"] = all(bool(check.check_equivalent(proto, o, feeds).equivalent)
                               for o in distinct(optimised.values()))
    except Exception as e:  # an export onnxruntime cannot run is a failure, reported
        row["ort_equal"] = f"error: {type(e).__name__}: {e}"[:200]
    model = model.cuda()
    xc = {k: v.cuda() for k, v in x.items()} if isinstance(x, dict) else x.cuda()
    set_math("fp32")
    with torch.no_grad():
        want = torch_outputs(model, xc).float().cpu().numpy()
    out_name = g.output_names[0]
    opaque = "host" if row["opaque"] else "error"
    for label, graphs in (("orig", [g]), ("opt", distinct(optimised.values()))):
        try:
            row[f"{label}_vs_torch_rel"] = max(rel_err(cb.run(graph, feeds, math="fp32", opaque=opaque)[out_name], want)
                                               for graph in graphs)
        except Exception as e:
            row[f"{label}_vs_torch_rel"] = f"error: {type(e).__name__}: {e}"[:200]
    for math in args.math:
        set_math(math)
        tmodel, tx = in_math(model, xc, math)
        with torch.no_grad():
            row[f"torch_{math}"], row["torch_mode"] = torch_ms(lambda m=tmodel, x=tx: torch_outputs(m, x))
            if math in HALF:
                row[f"torch_{math}_err"] = rel_err(torch_outputs(tmodel, tx).float().cpu().numpy(), want)
        compiled_columns(row, tmodel, tx, math, args, want)
        for label, graph in (("orig", g), ("opt", optimised[math])):
            try:
                row[f"{label}_{math}"] = cb.measure(graph, math=math, opaque=opaque, repeats=args.repeats).median_ms
                if math in HALF:
                    got = cb.run(graph, feeds, math=math, opaque=opaque)[out_name]
                    row[f"{label}_{math}_err"] = rel_err(got, want)
            except Exception as e:
                row[f"{label}_{math}"] = float("nan")
                row.setdefault("errors", []).append(f"{label} {math}: {type(e).__name__}: {e}"[:200])
    return row


def bench_bert(args) -> dict:
    g = te.load_onnx(os.path.join(ROOT, "data", "models", "bert_base.onnx"))
    row: dict = {"model": "bert_base", "ops": sum(1 for o in g.ops if o.type not in ("Input", "Weight")),
                 "opaque": sum(1 for o in g.ops if o.type == "Opaque")}
    optimised = optimise(g, row, args)
    model, x = torch_bert()
    opaque = "host" if row["opaque"] else "error"
    for math in args.math:
        set_math(math)
        tmodel, _ = in_math(model, x, math)
        with torch.no_grad():
            row[f"torch_{math}"], row["torch_mode"] = torch_ms(lambda m=tmodel: torch_outputs(m, x))
        compiled_columns(row, tmodel, x, math, args)
        for label, graph in (("orig", g), ("opt", optimised[math])):
            row[f"{label}_{math}"] = cb.measure(graph, math=math, opaque=opaque, repeats=args.repeats).median_ms
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=DEFAULT)
    ap.add_argument("--budget", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--math", nargs="*", default=["fp32", "tf32"])
    ap.add_argument("--cost-model", choices=["analytic", "table"], default="analytic",
                    help="what the search optimises for: the analytic H100 model, or each math mode's H100 table")
    ap.add_argument("--compile-mode", nargs="*", default=["default"], choices=[*COLUMN, "none"],
                    help="torch.compile columns: inductor's default mode, max-autotune (no inductor CUDA graphs), "
                         "or none")
    ap.add_argument("--channels-last", action="store_true", help="also eager PyTorch in channels-last")
    ap.add_argument("--cold-compile", help="JSON lines of torch_compile_baseline.py: their compile_s as *_cold_s")
    ap.add_argument("--time-limit", type=float, default=0.0,
                    help="seconds: models not started by then are skipped (0: no limit)")
    args = ap.parse_args(argv)
    args.compile_mode = [m for m in dict.fromkeys(args.compile_mode) if m != "none"]
    args.cold = {}
    if args.cold_compile and os.path.exists(args.cold_compile):
        for line in open(args.cold_compile):
            r = json.loads(line) if line.startswith("{") else {}
            if r.get("ok"):
                args.cold[(r["model"], r["math"], r["mode"])] = r["compile_s"]
    start = time.perf_counter()
    info = cb.device_info()
    versions = {"device": info["name"], "torch": torch.__version__, "cudnn": info["cudnn"],
                "cublas": info["cublas"], "cuda_runtime": info["cuda_runtime"],
                "fuse": os.environ.get("RLFLOW_FUSE", "1")}
    print(json.dumps(versions), file=sys.stderr, flush=True)
    rows = []
    for name in args.models:
        if args.time_limit and time.perf_counter() - start > args.time_limit:
            row = {"model": name, "skipped": f"not started within --time-limit {args.time_limit:g} s"}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
            continue
        try:
            row = bench_bert(args) if name == "bert_base" else bench_export(name, args)
        except Exception as e:
            row = {"model": name, "error": f"{type(e).__name__}: {e}"[:300]}
        for math in args.math:
            for label in ("orig", "opt"):
                v = row.get(f"{label}_{math}")
                if not (isinstance(v, float) and v > 0):
                    continue
                if isinstance(row.get(f"torch_{math}"), float):
                    row[f"{label}_{math}_x"] = row[f"torch_{math}"] / v
                for mode in args.compile_mode:
                    c = row.get(f"{COLUMN[mode]}_{math}")
                    if isinstance(c, float) and c == c:
                        suffix = "" if mode == "default" else "_ma"
                        row[f"{label}_{math}_vs_compile{suffix}"] = c / v
        torch.cuda.empty_cache()
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    cols = ["model", "opaque"]
    for math in args.math:
        cols += [f"torch_{math}"] + ([f"torch_cl_{math}"] if args.channels_last else [])
        cols += [f"{COLUMN[mode]}_{math}" for mode in args.compile_mode]
        cols += [f"orig_{math}", f"opt_{math}", f"opt_{math}_x"]
        cols += [f"opt_{math}_vs_compile{'' if mode == 'default' else '_ma'}" for mode in args.compile_mode]
    cols += ["orig_vs_torch_rel", "opt_vs_torch_rel", "ort_equal"]
    for math in [m for m in args.math if m in HALF]:
        cols += [f"torch_{math}_err"] + [f"{COLUMN[mode]}_{math}_err" for mode in args.compile_mode]
        cols += [f"opt_{math}_err"]
    for math in args.math:
        cols += [f"{COLUMN[mode]}_{math}_s" for mode in args.compile_mode]
    table = [{c: r.get(c, "-") for c in cols} for r in rows]
    emit("bench_vs_pytorch", table, cols, **versions, budget=args.budget, cost_model=args.cost_model,
         compile_modes=args.compile_mode, inductor_cache=os.environ.get("TORCHINDUCTOR_CACHE_DIR", "default"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
