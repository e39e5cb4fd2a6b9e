#!/usr/bin/env python
"""Speed of looking one rewrite ahead: `successors()` (only the matches near the rewrite
enumerated) and `step()` (the candidate list carried through the rewrite: the env's step)
against building each successor and enumerating all of it.

    python benchmarks/bench_successors.py [--steps 5] [--per-step 40] [--models nasrnn ...]
        [--cost-model table:h100_fp32]

Walks `steps` random rewrites from each model's start graph (seeded); at each graph scores
up to `per-step` of its candidates' successors both ways and checks that both give the
same best next cost delta and successor hash; steps as many of its enumeration's
candidates and checks each carried list against a full enumeration of the new graph.
Prints one JSON line and a markdown table (ms per successor or step, medians over the
steps).
"""

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_candidates import load  # noqa: E402
from common import emit  # noqa: E402

from taso_env.engine.cost_model import make_cost_model  # noqa: E402
from taso_env.engine.search import enumeration, step, successors  # noqa: E402

DEFAULT = ["nasrnn", "nasbench", "inception_v3", "squeezenet1_1.onnx", "mobilenet_v3_large.onnx",
           "efficientnet_b0.onnx", "densenet121.onnx", "bert_base.onnx", "vit_b_16.onnx"]


def measure(model: str, steps: int, per_step: int, seed: int, cost_model) -> dict:
    rng = random.Random(seed)
    g = load(model)
    ops = g.num_ops
    incremental, full, carried, checked = [], [], [], 0
    for _ in range(steps):
        enum = enumeration(g, model=cost_model)
        cands = enum.candidates
        if not cands:
            break
        which = rng.sample(range(len(cands)), min(per_step, len(cands)))
        start = time.perf_counter()
        ahead = successors(enum, which)
        incremental.append((time.perf_counter() - start) / len(which))
        start = time.perf_counter()
        for k, after in zip(which, ahead):
            child = g.apply(cands[k])
            best = min((c.cost_delta for c in child.candidates(model=cost_model)), default=None)
            if child.hash() != after.child_hash or (best is None) != (after.best_delta is None) or (
                    best is not None and abs(best - after.best_delta) > 1e-12):
                raise AssertionError(f"{model}: successors() differs from a full enumeration at {cands[k]}")
            checked += 1
        full.append((time.perf_counter() - start) / len(which))
        start = time.perf_counter()
        stepped = [step(enum, k) for k in which]
        carried.append((time.perf_counter() - start) / len(which))
        for after in stepped:
            again = enumeration(after.graph, model=cost_model)
            if [(c.rule_id, c.location, c.cost_delta) for c in after.candidates] != \
                    [(c.rule_id, c.location, c.cost_delta) for c in again.candidates]:
                raise AssertionError(f"{model}: step() differs from a full enumeration of {after.graph.name}")
        g = g.apply(cands[rng.randrange(len(cands))])
    inc_ms, full_ms = 1e3 * statistics.median(incremental), 1e3 * statistics.median(full)
    step_ms = 1e3 * statistics.median(carried)
    return {"model": model, "ops": ops, "successors_checked": checked, "successors_ms": inc_ms,
            "step_ms": step_ms, "build_and_enumerate_ms": full_ms, "speedup": full_ms / inc_ms,
            "step_speedup": full_ms / step_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=DEFAULT)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--per-step", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cost-model", default="table:h100_fp32")
    args = parser.parse_args()
    model = make_cost_model(args.cost_model)  # loaded once (a name would load the table at every call)
    rows = [measure(m, args.steps, args.per_step, args.seed, model) for m in args.models]
    emit("successors", rows, ["model", "ops", "successors_checked", "successors_ms", "step_ms",
                              "build_and_enumerate_ms", "speedup", "step_speedup"], cost_model=args.cost_model)


if __name__ == "__main__":
    main()
