"""Evaluate agents side by side on the real environment (controller, search baselines).

    rlflow evaluate --run runs/demo --graphs squeezenet resnet50 \
        --agents controller backtracking greedy random [--budget 1000] [--measure]

Writes results.md / .json / .csv, runtime.png, optimisation_time.png, TensorBoard
summaries and every optimised graph as ONNX to --out (default runs/<name>/eval). Every
optimised graph is checked against the original in onnxruntime before it is reported.
--measure adds GPU-measured runtimes where the CUDA backend is present. --ray [ADDRESS]
runs every (graph, agent) pair as a Ray task (controller.ray_evaluation): on a private
loopback-only Ray, or on the cluster at ADDRESS (`pip install rlflow[ray]`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlflow.config_flags import add_config_flags, config_from_args

USES_TENSORFLOW = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from controller.evaluation import AGENTS, EvalConfig

    parser.add_argument("--run", help="trained run folder (needed for the controller agent)")
    parser.add_argument("--out", help="output folder (default: <run>/eval)")
    add_config_flags(parser, EvalConfig, title="evaluation (EvalConfig)")
    parser.add_argument("--ray", nargs="?", const="local", default="", metavar="ADDRESS",
                        help="run the (graph, agent) jobs as Ray tasks: alone, on a private Ray bound to "
                             "127.0.0.1; with an address (host:port, auto, ray://...), on that cluster")
    for action in parser._actions:
        if action.dest == "agents":
            action.choices = AGENTS


def run(args: argparse.Namespace) -> int:
    from controller.evaluation import EvalConfig, evaluate, markdown
    from taso_env.run_folder import RunFolder

    config = config_from_args(EvalConfig, args)
    if "controller" in config.agents and not args.run:
        raise FileNotFoundError("the controller agent needs --run <trained run folder>")
    out = Path(args.out) if args.out else RunFolder(args.run or "runs/eval").eval_dir
    if args.ray:
        from controller.ray_evaluation import evaluate_on_ray

        rows = evaluate_on_ray(config, args.run, out, address=args.ray)
    else:
        rows = evaluate(config, args.run, out)
    print(markdown(rows))
    print(f"\nwrote {out}/results.md, results.json, results.csv, runtime.png, optimisation_time.png, tb/")
    return 0
