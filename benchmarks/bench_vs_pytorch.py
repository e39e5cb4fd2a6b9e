#!/usr/bin/env python
"""rlflow's CUDA runtime beside PyTorch's, per zoo model, in one process on one GPU.

    python benchmarks/bench_vs_pytorch.py [--models resnet50 ...] [--budget 50] [--math fp32 tf32]
        [--cost-model analytic | table]

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

import taso_env as te  # noqa: E402
from taso_env.gpu import cuda_backend as cb  # noqa: E402
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
        found = {math: te.search(g, "backtracking", budget=args.budget, model=f"table:h100_{math}")
                 for math in args.math}
    row["search_s"] = round(time.perf_counter() - start, 2)
    row["rules"] = "; ".join(dict.fromkeys(", ".join(f"{k} {v}" for k, v in r.rule_fires.most_common(3))
                                           for r in found.values()))
    return {math: r.graph for math, r in found.items()}


def distinct(graphs):
    """The graphs, each once (equal graphs by hash)."""
    return list({g.hash(): g for g in graphs}.values())


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
    from transformers import BertConfig, BertModel

    g = te.load_onnx(os.path.join(ROOT, "data", "models", "bert_base.onnx"))
    row: dict = {"model": "bert_base", "ops": sum(1 for o in g.ops if o.type not in ("Input", "Weight")),
                 "opaque": sum(1 for o in g.ops if o.type == "Opaque")}
    optimised = optimise(g, row, args)
    model = BertModel(BertConfig(), add_pooling_layer=True).eval().cuda()
    ids = torch.randint(0, 30000, (1, 128), device="cuda")
    mask = torch.ones(1, 128, dtype=torch.long, device="cuda")
    opaque = "host" if row["opaque"] else "error"
    for math in args.math:
        set_math(math)
        tmodel, _ = in_math(model, ids, math)
        with torch.no_grad():
            row[f"torch_{math}"], row["torch_mode"] = torch_ms(lambda m=tmodel: m(input_ids=ids, attention_mask=mask))
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
    args = ap.parse_args(argv)
    info = cb.device_info()
    versions = {"device": info["name"], "torch": torch.__version__, "cudnn": info["cudnn"],
                "cublas": info["cublas"], "cuda_runtime": info["cuda_runtime"],
                "fuse": os.environ.get("RLFLOW_FUSE", "1")}
    print(json.dumps(versions), file=sys.stderr, flush=True)
    rows = []
    for name in args.models:
        try:
            row = bench_bert(args) if name == "bert_base" else bench_export(name, args)
        except Exception as e:
            row = {"model": name, "error": f"{type(e).__name__}: {e}"[:300]}
        for math in args.math:
            if isinstance(row.get(f"torch_{math}"), float):
                for label in ("orig", "opt"):
                    v = row.get(f"{label}_{math}")
                    if isinstance(v, float) and v > 0:
                        row[f"{label}_{math}_x"] = row[f"torch_{math}"] / v
        torch.cuda.empty_cache()
        print(json.dumps(row), file=sys.stderr, flush=True)
        rows.append(row)
    cols = ["model", "opaque"]
    for math in args.math:
        cols += [f"torch_{math}", f"orig_{math}", f"opt_{math}", f"opt_{math}_x"]
    cols += ["orig_vs_torch_rel", "opt_vs_torch_rel", "ort_equal"]
    for math in [m for m in args.math if m in HALF]:
        cols += [f"torch_{math}_err", f"opt_{math}_err"]
    table = [{c: r.get(c, "-") for c in cols} for r in rows]
    emit("bench_vs_pytorch", table, cols, **versions, budget=args.budget, cost_model=args.cost_model)
    return 0


if __name__ == "__main__":
    sys.exit(main())
