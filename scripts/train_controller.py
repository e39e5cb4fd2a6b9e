#!/usr/bin/env python
"""Train the controller inside the dream of a run's world model (PPO).

    python scripts/train_controller.py --run runs/demo [--updates 100] [--restart]
    python scripts/train_controller.py --run runs/demo --iterations 3 --collect-episodes 20

Needs runs/<name>/rollouts.h5, vae/ and mdnrnn/ (scripts/collect_rollouts.py,
train_vae.py, train_mdnrnn.py). Rerunning resumes from the last checkpoint; --restart
starts over. With --iterations K > 1, each further iteration collects episodes on the
real environment with the current controller, retrains V and M on all rollouts, and
retrains the controller (the World Models loop).
"""

import argparse
import json
import sys

from controller.iterative import iterate
from controller.ppo import PPOConfig
from controller.training import ControllerTrainConfig, train_controller
from worldmodel.dream_env import DreamConfig


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--run", required=True, help="run folder, e.g. runs/demo")
    p.add_argument("--updates", type=int, default=100, help="PPO updates in the dream")
    p.add_argument("--num-dreams", type=int, default=64)
    p.add_argument("--rollout-steps", type=int, default=32)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--horizon", type=int, default=50)
    p.add_argument("--tau", type=float, default=1.0, help="temperature of the dream")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--iterations", type=int, default=1, help="collect -> retrain V, M -> retrain C rounds")
    p.add_argument("--collect-episodes", type=int, default=20, help="real episodes per extra iteration")
    p.add_argument("--restart", action="store_true")
    args = p.parse_args(argv)

    config = ControllerTrainConfig(
        updates=args.updates, seed=args.seed,
        dream=DreamConfig(horizon=args.horizon, tau=args.tau),
        ppo=PPOConfig(num_dreams=args.num_dreams, rollout_steps=args.rollout_steps,
                      learning_rate=args.learning_rate))
    if args.iterations > 1:
        result = iterate(args.run, config, iterations=args.iterations,
                         episodes_per_iteration=args.collect_episodes, restart=args.restart)
    else:
        result = train_controller(args.run, config, restart=args.restart)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
