#!/usr/bin/env python
"""Checks Hugging Face exports whose position ids are computed from the inputs (OPT,
BLOOM: CumSum of the attention mask; RoBERTa, XLM-R, MPNet: Equal / CumSum /
GatherElements of the input ids): each loads with no opaque op, its greedy-optimised graph
computes what onnxruntime computes on the file, and, where the CUDA backend runs, the GPU
executor matches the numpy reference on the original and the optimised graph.

    python benchmarks/export_zoo.py OUT --models opt_small bloom_small xlm_roberta_small
    python benchmarks/check_position_id_exports.py OUT/*.onnx

Prints one JSON line per file (ops of the three types, opaque ops, onnxruntime verdicts,
GPU max |diff| over the output's largest magnitude); exits 1 if any file has an opaque op
or differs.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import numpy as np
import onnx

import taso_env as te
from taso_env.engine import reference
from taso_env.onnx.check import check_equivalent, random_feeds

POSITION_OPS = ("CumSum", "Equal", "GatherElements")


def _gpu_vs_reference(g: te.Graph, feeds: dict) -> float | None:
    """Max |GPU - reference| over the largest reference magnitude, or None without a GPU."""
    from taso_env.gpu import cuda_backend as cb

    if not cb.available():
        return None
    g = g.with_weights({k: v for k, v in feeds.items() if k in {o.name for o in g.ops if o.type == "Weight"}})
    inputs = {o.name: feeds[o.name] for o in g.inputs}
    want, got = reference.run(g, inputs), cb.run(g, inputs)
    return max(float(np.max(np.abs(got[k].astype(np.float64) - w.astype(np.float64)), initial=0.0))
               / max(float(np.max(np.abs(w), initial=0.0)), 1e-12) for k, w in want.items())


def check(path: Path) -> dict:
    g = te.load_onnx(path)
    types = collections.Counter(o.type for o in g.ops)
    opaque = collections.Counter(str(o.attrs["onnx_op_type"], "ascii") for o in g.ops if o.type == "Opaque")
    source = onnx.load(str(path))
    feeds = random_feeds(g, 0)
    optimised = te.search(g, "greedy").graph
    row = {"model": path.stem, "position_ops": {t: types[t] for t in POSITION_OPS if types[t]},
           "opaque": dict(opaque), "loaded_equivalent": check_equivalent(source, g, feeds).equivalent,
           "optimised_equivalent": check_equivalent(source, optimised, feeds).equivalent,
           "speedup_est": round(g.cost() / optimised.cost(), 3)}
    row["gpu_rel_diff"] = [_gpu_vs_reference(x, feeds) for x in (g, optimised)]
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", type=Path)
    args = ap.parse_args(argv)
    ok = True
    for path in args.paths:
        row = check(path)
        ok &= not row["opaque"] and row["loaded_equivalent"] and row["optimised_equivalent"]
        print(json.dumps(row), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
