"""Train V, the graph VAE, on a run's rollouts.

    rlflow train-vae --run runs/demo --steps 3000
    tensorboard --logdir runs/demo/tb

Writes checkpoints and config.json under runs/<name>/vae/, TensorBoard logs under
runs/<name>/tb/vae, and the held-out metrics to runs/<name>/vae/metrics.json (also
printed). Rerunning the same command resumes from the latest checkpoint (a larger
--steps trains on); --restart starts over.
"""

from __future__ import annotations

import argparse
import os

from rlflow.config_flags import add_config_flags, config_from_args

USES_TENSORFLOW = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worldmodel.configs import DataConfig, GraphVAEConfig, VAETrainConfig

    parser.add_argument("--run", required=True, help="run folder holding rollouts.h5")
    parser.add_argument("--restart", action="store_true", help="delete V's checkpoints and logs first")
    add_config_flags(parser, GraphVAEConfig, title="model (GraphVAEConfig)", skip=("n_rules",))
    add_config_flags(parser, VAETrainConfig, title="training (VAETrainConfig)")
    add_config_flags(parser, DataConfig, title="data (DataConfig)")


def run(args: argparse.Namespace) -> int:
    from taso_env.engine.report import markdown_table
    from taso_env.env.rollouts import RolloutReader
    from taso_env.run_folder import RunFolder
    from worldmodel.configs import DataConfig, GraphVAEConfig, VAETrainConfig
    from worldmodel.vae_training import train_vae

    n_rules = RolloutReader(RunFolder(args.run).rollouts_path).meta.n_rules
    result = train_vae(os.fspath(args.run), config_from_args(GraphVAEConfig, args, n_rules=n_rules),
                       config_from_args(VAETrainConfig, args), config_from_args(DataConfig, args),
                       restart=args.restart)
    rows = [{"metric": k, "value": v} for k, v in result["held_out"].items()]
    print(markdown_table(rows, ["metric", "value"]) if rows else "no held-out episodes")
    return 0
