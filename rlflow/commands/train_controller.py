"""Train the controller inside the dream of a run's world model (PPO on V and M only).

    rlflow train-controller --run runs/demo [--updates 100] [--restart]
    rlflow train-controller --run runs/demo --variant untrained_world   (an ablation: also myopic_world)
    rlflow train-controller --run runs/demo --iterations 3 --collect-episodes 20

Needs runs/<name>/rollouts.h5, vae/ and mdnrnn/ (rlflow collect, train-vae,
train-mdnrnn). Rerunning resumes from the last checkpoint; --restart starts over. With
--iterations K > 1, each further iteration collects episodes on the real environment
with the current controller, retrains V and M on all rollouts, and retrains the
controller (the World Models loop).
"""

from __future__ import annotations

import argparse
import json

from rlflow.config_flags import add_config_flags, config_from_args

USES_TENSORFLOW = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from controller.configs import ControllerTrainConfig

    parser.add_argument("--run", required=True, help="run folder, e.g. runs/demo")
    parser.add_argument("--restart", action="store_true", help="delete the controller's checkpoints and logs first")
    parser.add_argument("--variant", default="trained", choices=("trained", "untrained_world", "myopic_world"),
                        help="trained (default); untrained_world: C trained in the dream of untrained V and M; "
                             "myopic_world: C trained with discount 0 (ablations, each in its own folder)")
    parser.add_argument("--iterations", type=int, default=1,
                        help="collect -> retrain V, M -> retrain C rounds (default: 1)")
    parser.add_argument("--collect-episodes", type=int, default=20,
                        help="real episodes per extra iteration (default: 20)")
    add_config_flags(parser, ControllerTrainConfig, title="training (ControllerTrainConfig)", flatten=True)


def run(args: argparse.Namespace) -> int:
    from controller.configs import ControllerTrainConfig
    from controller.iterative import iterate
    from controller.training import train_controller
    from rlflow.pipeline import run_stage

    config = config_from_args(ControllerTrainConfig, args, flatten=True)
    if args.iterations > 1 and args.variant != "trained":
        raise ValueError("--iterations applies to the trained controller only")
    if args.iterations > 1:
        result = iterate(args.run, config, iterations=args.iterations,
                         episodes_per_iteration=args.collect_episodes, restart=args.restart, run_stage=run_stage)
    else:
        result = train_controller(args.run, config, restart=args.restart, variant=args.variant)
    print(json.dumps(result, indent=2))
    return 0
