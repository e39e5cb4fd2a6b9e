"""Train M, the MDN-RNN dynamics model, on a run's rollouts encoded by its trained V.

    rlflow train-mdnrnn --run runs/demo --steps 3000

Writes checkpoints under runs/<name>/mdnrnn/ (best/ holds the checkpoint of lowest
held-out loss, which later stages load), TensorBoard logs under runs/<name>/tb/mdnrnn
and the held-out metrics to runs/<name>/mdnrnn/metrics.json (also printed). Rerunning
resumes; --restart starts over.
"""

from __future__ import annotations

import argparse
import os

from rlflow.config_flags import add_config_flags, config_from_args

USES_TENSORFLOW = True


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from worldmodel.configs import MDNRNNConfig, MDNRNNTrainConfig

    parser.add_argument("--run", required=True, help="run folder holding rollouts.h5 and a trained vae/")
    parser.add_argument("--restart", action="store_true", help="delete M's checkpoints and logs first")
    add_config_flags(parser, MDNRNNConfig, title="model (MDNRNNConfig)", skip=("n_rules", "latent_dim"))
    add_config_flags(parser, MDNRNNTrainConfig, title="training (MDNRNNTrainConfig)")


def run(args: argparse.Namespace) -> int:
    from taso_env.engine.report import markdown_table
    from worldmodel.checkpoints import VAE_DIR, load_stage_config
    from worldmodel.configs import MDNRNNConfig, MDNRNNTrainConfig
    from worldmodel.mdnrnn_training import train_mdnrnn

    vae = load_stage_config(os.fspath(args.run), VAE_DIR)["model"]
    model = config_from_args(MDNRNNConfig, args, n_rules=vae["n_rules"], latent_dim=vae["latent_dim"])
    result = train_mdnrnn(os.fspath(args.run), model, config_from_args(MDNRNNTrainConfig, args),
                          restart=args.restart)
    best = (result["best"] or {}).get("held_out", {})
    best_column = f"best (step {result['best']['step']}, loaded by default)" if best else "best"
    rows = [{"metric": k, f"step {result['step']}": v, best_column: best.get(k, "")}
            for k, v in result["held_out"].items()]
    print(markdown_table(rows, ["metric", f"step {result['step']}", best_column]) if rows else "no held-out episodes")
    return 0
