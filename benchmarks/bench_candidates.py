#!/usr/bin/env python
"""Speed of one environment step: candidates() + apply(), against a naive enumerator
that materialises every candidate graph and costs it (as TASO does at every step).

    python benchmarks/bench_candidates.py [--steps 30] [--models inception_v3 ...] [--rules SET]

SET is a named rule set of taso_env.rules.sets: all (default: every shipped rule), hand,
replicated:N (the hand rules repeated to N rules), or a directory of rule JSON files.

Walks `steps` random rewrites from each model's start graph (seeded); at each step times
our step (enumerate candidates with cost deltas, apply the chosen one) and the naive
step (apply every candidate and compute each new graph's cost). Prints one JSON line and
a markdown table (medians, ms; step_cpu_ms is the process CPU time of our step, the fairer
figure on a loaded machine).
"""

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from common import emit  # noqa: E402

import taso_env as te  # noqa: E402
from taso_env.rules.sets import rule_set  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "models")


def load(model: str) -> te.Graph:
    path = os.path.join(DATA, model)
    return te.load_onnx(path) if model.endswith(".onnx") else te.graphs.build(model, seed=None)


def measure(model: str, steps: int, seed: int, rules, naive_too: bool) -> dict:
    rng = random.Random(seed)
    g = load(model)
    ours, ours_cpu, naive, counts = [], [], [], []
    for _ in range(steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        cands = g.candidates(rules=rules)
        if not cands:
            break
        choice = rng.choice(cands)
        nxt = g.apply(choice, rules=rules)
        ours.append(time.perf_counter() - start)
        ours_cpu.append(time.process_time() - start_cpu)

        if naive_too:
            start = time.perf_counter()
            for c in g.candidates(rules=rules):
                g.apply(c, rules=rules).cost()
            naive.append(time.perf_counter() - start)
        counts.append(len(cands))
        g = nxt
    ours_ms = 1e3 * statistics.median(ours)
    naive_ms = 1e3 * statistics.median(naive) if naive else float("nan")
    return {"model": model, "ops": load(model).num_ops, "steps": len(ours),
            "candidates_median": statistics.median(counts), "step_ms": ours_ms,
            "step_cpu_ms": 1e3 * statistics.median(ours_cpu),
            "naive_step_ms": naive_ms, "speedup": naive_ms / ours_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+", default=["bert_base.onnx", "resnet50.onnx", "inception_v3"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rules", default="all", help="rule set: all, hand, replicated:N or a directory")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive step (slow with many rules)")
    args = parser.parse_args()
    rules = rule_set(args.rules)
    rows = [measure(m, args.steps, args.seed, rules, not args.no_naive) for m in args.models]
    emit("candidates_apply_step", rows,
         ["model", "ops", "steps", "candidates_median", "step_ms", "step_cpu_ms", "naive_step_ms", "speedup"],
         rule_set=args.rules, rules=len(rules), cost_model=te.get_cost_model().name)


if __name__ == "__main__":
    main()
