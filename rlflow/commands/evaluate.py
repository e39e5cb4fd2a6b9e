"""Evaluate agents side by side on the real environment (controller rows, baselines).

    rlflow evaluate --run runs/demo --graphs squeezenet resnet50 [--budget 1000] [--measure cuda]
        --agents controller controller_random_init controller_untrained_world controller_myopic_world
                 controller_lookahead greedy_random_detours model_free greedy backtracking eqsat random

The rows: `controller` (the policy C trained in the dream), its ablations
`controller_random_init` (C's random weights), `controller_untrained_world` (C trained in
a dream of untrained V and M) and `controller_myopic_world` (C trained with discount 0;
each variant after `rlflow train-controller --variant ...`), `controller_lookahead`
(greedy plus M-guided detours), `greedy_random_detours` (greedy with random detours up
to the controller's steps on the graph: the work-matched baseline), `model_free`, and
the searches greedy, backtracking and eqsat, and random. Each row has its speedup and the
real work it took (env steps, enumerations, successor look-ups, cost queries) beside the
real work behind a learned agent's training data.

Writes results.md / .json / .csv, learning_curves.json, runtime.png, speedup.png,
optimisation_time.png, quality_vs_real_steps.png, TensorBoard
summaries and every optimised graph as ONNX to --out (default runs/<name>/eval). Every
optimised graph is checked against the original in onnxruntime before it is reported.
--measure cuda adds GPU-measured runtimes (an error where the CUDA backend is absent).
Graphs whose family no training graph shares are marked held-out. --ray [ADDRESS] runs
every (graph, agent) pair as a Ray task (controller.ray_evaluation): on a private
loopback-only Ray, or on the cluster at ADDRESS (`pip install rlflow[ray]`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlflow.config_flags import add_config_flags, config_from_args

USES_TENSORFLOW = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from controller.evaluation import AGENTS, EvalConfig

    parser.add_argument("--run", help="trained run folder (needed for the controller rows and model_free)")
    parser.add_argument("--out", help="output folder (default: <run>/eval)")
    add_config_flags(parser, EvalConfig, title="evaluation (EvalConfig)")
    parser.add_argument("--ray", nargs="?", const="local", default="", metavar="ADDRESS",
                        help="run the (graph, agent) jobs as Ray tasks: alone, on a private Ray bound to "
                             "127.0.0.1; with an address (host:port, auto, ray://...), on that cluster")
    for action in parser._actions:
        if action.dest == "agents":
            action.choices = AGENTS


def run(args: argparse.Namespace) -> int:
    from controller.evaluation import LEARNED, EvalConfig, evaluate, markdown
    from taso_env.run_folder import RunFolder

    config = config_from_args(EvalConfig, args)
    for agent in LEARNED:
        if agent in config.agents and not args.run:
            raise FileNotFoundError(f"the {agent} agent needs --run <trained run folder>")
    out = Path(args.out) if args.out else RunFolder(args.run or "runs/eval").eval_dir
    if args.ray:
        from controller.ray_evaluation import evaluate_on_ray

        rows = evaluate_on_ray(config, args.run, out, address=args.ray)
    else:
        rows = evaluate(config, args.run, out)
    print(markdown(rows))
    if (out / "vs_greedy.md").exists():
        print("\nagainst greedy:\n" + (out / "vs_greedy.md").read_text())
    print(f"\nwrote {out}/results.md, results.json, results.csv, vs_greedy.md, learning_curves.json, runtime.png, "
          "speedup.png, optimisation_time.png, quality_vs_real_steps.png, tb/")
    return 0
