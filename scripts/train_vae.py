#!/usr/bin/env python
"""Train V (the graph VAE) on runs/<name>/rollouts.h5.

    python scripts/train_vae.py --run runs/demo --steps 3000
    tensorboard --logdir runs/demo/tb

Writes checkpoints and config.json under runs/<name>/vae/, TensorBoard logs under
runs/<name>/tb/vae, and the held-out metrics to runs/<name>/vae/metrics.json (also
printed). Rerunning the same command resumes from the latest checkpoint (a larger
--steps trains on); --restart starts over.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from taso_env.engine.report import markdown_table  # noqa: E402
from taso_env.env.rollouts import RolloutFormatError, RolloutReader  # noqa: E402
from worldmodel.checkpoints import ConfigMismatchError  # noqa: E402
from worldmodel.dataset import DataConfig  # noqa: E402
from worldmodel.graph_vae import GraphVAEConfig  # noqa: E402
from worldmodel.vae_training import VAETrainConfig, train_vae  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="run folder holding rollouts.h5")
    parser.add_argument("--restart", action="store_true", help="delete V's checkpoints and logs first")
    model = parser.add_argument_group("model (GraphVAEConfig)")
    model.add_argument("--latent-dim", type=int, default=32)
    model.add_argument("--hidden", type=int, default=64)
    model.add_argument("--message-passing-steps", type=int, default=3)
    model.add_argument("--beta", type=float, default=1.0)
    model.add_argument("--cost-sigma", type=float, default=0.05)
    model.add_argument("--count-sigma", type=float, default=0.1)
    model.add_argument("--histogram-weight", type=float, default=100.0)
    train = parser.add_argument_group("training (VAETrainConfig)")
    train.add_argument("--steps", type=int, default=2000)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--learning-rate", type=float, default=1e-3)
    train.add_argument("--log-every", type=int, default=50)
    train.add_argument("--eval-every", type=int, default=500)
    train.add_argument("--save-every", type=int, default=500)
    train.add_argument("--eval-observations", type=int, default=4000)
    train.add_argument("--seed", type=int, default=0)
    data = parser.add_argument_group("data (DataConfig)")
    data.add_argument("--held-out-fraction", type=float, default=0.1)
    data.add_argument("--split-seed", type=int, default=0)
    data.add_argument("--max-episodes", type=int, default=0, help="0: all")
    args = parser.parse_args(argv)

    rollouts = os.path.join(args.run, "rollouts.h5")
    try:
        n_rules = RolloutReader(rollouts).meta.n_rules
        model_cfg = GraphVAEConfig(n_rules=n_rules, latent_dim=args.latent_dim, hidden=args.hidden,
                                   message_passing_steps=args.message_passing_steps, beta=args.beta,
                                   cost_sigma=args.cost_sigma, count_sigma=args.count_sigma,
                                   histogram_weight=args.histogram_weight)
        train_cfg = VAETrainConfig(steps=args.steps, batch_size=args.batch_size,
                                   learning_rate=args.learning_rate, log_every=args.log_every,
                                   eval_every=args.eval_every, save_every=args.save_every,
                                   eval_observations=args.eval_observations, seed=args.seed)
        data_cfg = DataConfig(held_out_fraction=args.held_out_fraction, split_seed=args.split_seed,
                              max_episodes=args.max_episodes)
        result = train_vae(args.run, model_cfg, train_cfg, data_cfg, restart=args.restart)
    except (RolloutFormatError, ConfigMismatchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the command to resume from the last checkpoint", file=sys.stderr)
        return 130
    rows = [{"metric": k, "value": v} for k, v in result["held_out"].items()]
    print(markdown_table(rows, ["metric", "value"]) if rows else "no held-out episodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
