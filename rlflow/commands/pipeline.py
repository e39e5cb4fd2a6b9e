"""Run the main job end to end: rollouts -> V -> M -> controller (in the dream; and the
same training on untrained V and M, and with discount 0) -> evaluation of every
controller row beside greedy_random_detours (the work-matched baseline), greedy,
backtracking, eqsat and random.

    rlflow pipeline                          # small default, runs/demo (a few minutes on 2 cores)
    rlflow pipeline --run runs/big --graphs squeezenet resnet18 bert_base nasbench \
        --episodes 2000 --eval-graphs squeezenet resnet18 bert_base nasbench resnet50 inception_v3 vit_base

Rerunning the same command resumes every stage; --restart starts the run over. The
evaluation table is in <run>/eval/results.md, and the run ends by printing each row's
speedup beside the real work it took; watch training with
`tensorboard --logdir <run>/tb`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlflow.config_flags import add_config_flags, config_from_args
from rlflow.pipeline import PipelineConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_flags(parser, PipelineConfig, title="sizes (PipelineConfig)")
    parser.add_argument("--smoke", action="store_true", help="tiny budgets (tests, CI)")
    parser.add_argument("--restart", action="store_true", help="start the run over")


def run(args: argparse.Namespace) -> int:
    from rlflow.pipeline import run_pipeline

    config = config_from_args(PipelineConfig, args)
    if args.smoke:
        config = PipelineConfig.smoke(config.run)
    timings = run_pipeline(config, restart=args.restart)
    print(f"\ndone in {sum(timings.values()):.0f} s; results: {Path(config.run) / 'eval' / 'results.md'}")
    print(f"optimise a model with this run's controller: rlflow optimize MODEL.onnx --run {config.run} -o OUT.onnx")
    return 0
