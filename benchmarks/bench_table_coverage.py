#!/usr/bin/env python
"""How much of each model the shipped measured cost tables cover.

    python benchmarks/bench_table_coverage.py [--tables h100_fp32 h100_tf32 h100_fp16]
        [--models resnet50 data/models/coverage/swin_t.onnx ...] [--path-steps 20]

Per model and table: the op configurations the table lacks and the share of the model's
charged ops that miss it (their cost falls back to the scaled analytic model), on the
original graph and on the graphs along the table's greedy descent (up to --path-steps
rewrites: what search compares). Default models: the builder networks, the zoo exports
of data/models/ and the coverage exports of data/models/coverage/ (the symbolic one with
batch 1, sequence 128). Prints one JSON line and a markdown table.
"""

import argparse
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.gpu import cost_table  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILDERS = ["squeezenet", "resnet18", "resnet50", "resnext50", "inception_v3", "nasnet_a", "nasrnn", "nasbench",
            "bert_base", "vit_base"]


def default_models() -> list[str]:
    files = sorted(glob.glob(os.path.join(ROOT, "data", "models", "*.onnx")))
    files += [f + "[batch=1,sequence=128]" if "dynamic" in f else f
              for f in sorted(glob.glob(os.path.join(ROOT, "data", "models", "coverage", "*.onnx")))]
    return BUILDERS + [os.path.relpath(f, ROOT) for f in files]


def signatures(graph) -> list[str]:
    """The op configuration of every op of `graph` a cost model charges."""
    return [sig for _, _, sig, _ in cost_table.op_configs(graph)]


def coverage(signature_lists, table) -> tuple[int, int, int]:
    """(charged ops, ops missing the table, distinct missing configurations) over the
    graphs whose signatures are listed."""
    flat = [sig for sigs in signature_lists for sig in sigs]
    missing = [sig for sig in flat if sig not in table]
    return len(flat), len(missing), len(set(missing))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tables", nargs="+", default=["h100_fp32", "h100_tf32", "h100_fp16"],
                        help="shipped table names or .h5 paths")
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument("--path-steps", type=int, default=20)
    args = parser.parse_args()
    paths = {name: name if name.endswith(".h5") else os.path.join(ROOT, "data", "costs", f"{name}.h5")
             for name in args.tables}
    tables = {name: cost_table.load(path) for name, path in paths.items()}
    rows = []
    for model in args.models or default_models():
        graph = te.graphs.load(os.path.join(ROOT, model) if model.split("[")[0].endswith(".onnx") else model)
        row = {"model": model.removeprefix("data/models/"), "ops": graph.num_ops}
        original = signatures(graph)  # the same under every table
        for name, table in tables.items():
            ops, missed, distinct = coverage([original], table)
            path = cost_table.greedy_path(graph, args.path_steps, model=f"table:{paths[name]}")
            path_ops, path_missed, _ = coverage(map(signatures, path), table)
            row[f"{name} missing configs"] = distinct
            row[f"{name} miss %"] = round(100.0 * missed / max(ops, 1), 2)
            row[f"{name} path miss %"] = round(100.0 * path_missed / max(path_ops, 1), 2)
        rows.append(row)
    columns = ["model", "ops"] + [f"{n} {c}" for n in tables for c in ("missing configs", "miss %", "path miss %")]
    emit("table_coverage", rows, columns, tables={n: len(t) for n, t in tables.items()},
         path_steps=args.path_steps)


if __name__ == "__main__":
    main()
