#!/usr/bin/env python
"""Evaluate agents side by side on the real environment.

    python scripts/evaluate.py --run runs/demo --graphs squeezenet resnet50 \\
        --agents controller,backtracking,greedy,random [--budget 1000] [--measure]

Writes results.md / .json / .csv, runtime.png, optimisation_time.png and TensorBoard
summaries to --out (default runs/<name>/eval). Every optimised graph is checked against
the original in onnxruntime before it is reported. --measure adds GPU-measured runtimes
where the CUDA backend is present.
"""

import argparse
import sys
from pathlib import Path

from controller.evaluation import AGENTS, EvalConfig, evaluate, markdown


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", help="trained run folder (needed for the controller agent)")
    p.add_argument("--graphs", nargs="+", required=True, help="built-in names or ONNX files")
    p.add_argument("--agents", default=",".join(AGENTS))
    p.add_argument("--budget", type=int, default=1000, help="backtracking budget")
    p.add_argument("--alpha", type=float, default=1.05)
    p.add_argument("--horizon", type=int, default=100)
    p.add_argument("--cost-model", default="analytic:h100")
    p.add_argument("--measure", action="store_true", help="GPU-measured runtimes (CUDA backend)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="output folder (default: <run>/eval)")
    args = p.parse_args(argv)

    config = EvalConfig(graphs=tuple(args.graphs), agents=tuple(a.strip() for a in args.agents.split(",")),
                        budget=args.budget, alpha=args.alpha, horizon=args.horizon, seed=args.seed,
                        cost_model=args.cost_model, measure=args.measure)
    out = Path(args.out) if args.out else Path(args.run or "runs/eval") / "eval"
    rows = evaluate(config, args.run, out)
    print(markdown(rows))
    print(f"\nwrote {out}/results.md, results.json, results.csv, runtime.png, optimisation_time.png, tb/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
