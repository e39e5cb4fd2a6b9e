"""Train the model-free baseline: a GNN scoring candidate rewrites, PPO on the REAL env.

    rlflow train-model-free --run runs/demo --graphs squeezenet nasrnn --real-steps 2000

Every training step is a real environment step (counted in
runs/<name>/model_free/metrics.json, with the learning curve in curve.json). Rerunning
resumes from the last checkpoint (a larger --real-steps trains further); --restart
starts over.
"""

from __future__ import annotations

import argparse
import json

from rlflow.config_flags import add_config_flags, config_from_args

USES_TENSORFLOW = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from controller.configs import ModelFreeConfig

    parser.add_argument("--run", required=True, help="run folder, e.g. runs/demo")
    parser.add_argument("--restart", action="store_true", help="delete the agent's checkpoints and logs first")
    add_config_flags(parser, ModelFreeConfig, title="training (ModelFreeConfig)")


def run(args: argparse.Namespace) -> int:
    from controller.configs import ModelFreeConfig
    from controller.model_free_training import train_model_free

    result = train_model_free(args.run, config_from_args(ModelFreeConfig, args), restart=args.restart)
    print(json.dumps(result, indent=2))
    return 0
