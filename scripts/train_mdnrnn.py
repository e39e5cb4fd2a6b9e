#!/usr/bin/env python
"""Train M (the MDN-RNN) on runs/<name>/rollouts.h5 encoded by the trained V.

    python scripts/train_vae.py --run runs/demo          # V first
    python scripts/train_mdnrnn.py --run runs/demo --steps 3000

Writes checkpoints and config.json under runs/<name>/mdnrnn/ (best/ keeps the checkpoint
of lowest held-out loss, which load_mdnrnn reads), TensorBoard logs under
runs/<name>/tb/mdnrnn, and the held-out metrics to runs/<name>/mdnrnn/metrics.json (also
printed, for the last step and the best one). M uses V's train / held-out split. Rerunning the same command resumes
(a larger --steps trains on); --restart starts over (needed after retraining V).
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from taso_env.engine.report import markdown_table  # noqa: E402
from taso_env.env.rollouts import RolloutFormatError  # noqa: E402
from worldmodel.checkpoints import CheckpointNotFoundError, ConfigMismatchError, load_stage_config  # noqa: E402
from worldmodel.mdnrnn import MDNRNNConfig  # noqa: E402
from worldmodel.mdnrnn_training import MDNRNNTrainConfig, train_mdnrnn  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", required=True, help="run folder holding rollouts.h5 and a trained vae/")
    parser.add_argument("--restart", action="store_true", help="delete M's checkpoints and logs first")
    model = parser.add_argument_group("model (MDNRNNConfig)")
    model.add_argument("--hidden", type=int, default=256)
    model.add_argument("--mixtures", type=int, default=5)
    model.add_argument("--tau", type=float, default=1.0)
    model.add_argument("--reward-scale", type=float, default=0.0,
                       help="reward units of the reward head (0: the training rewards' std)")
    model.add_argument("--reward-weight", type=float, default=1.0)
    model.add_argument("--done-weight", type=float, default=1.0)
    model.add_argument("--mask-weight", type=float, default=1.0)
    train = parser.add_argument_group("training (MDNRNNTrainConfig)")
    train.add_argument("--steps", type=int, default=3000)
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--learning-rate", type=float, default=1e-3)
    train.add_argument("--log-every", type=int, default=50)
    train.add_argument("--eval-every", type=int, default=500)
    train.add_argument("--save-every", type=int, default=500)
    train.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    try:
        vae = load_stage_config(args.run, "vae")["model"]
        model_cfg = MDNRNNConfig(n_rules=vae["n_rules"], latent_dim=vae["latent_dim"], hidden=args.hidden,
                                 mixtures=args.mixtures, tau=args.tau, reward_scale=args.reward_scale,
                                 reward_weight=args.reward_weight,
                                 done_weight=args.done_weight, mask_weight=args.mask_weight)
        train_cfg = MDNRNNTrainConfig(steps=args.steps, batch_size=args.batch_size,
                                      learning_rate=args.learning_rate, log_every=args.log_every,
                                      eval_every=args.eval_every, save_every=args.save_every, seed=args.seed)
        result = train_mdnrnn(args.run, model_cfg, train_cfg, restart=args.restart)
    except (CheckpointNotFoundError, RolloutFormatError, ConfigMismatchError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the command to resume from the last checkpoint", file=sys.stderr)
        return 130
    best = (result["best"] or {}).get("held_out", {})
    best_column = f"best (step {result['best']['step']}, loaded by default)" if best else "best"
    rows = [{"metric": k, f"step {result['step']}": v, best_column: best.get(k, "")}
            for k, v in result["held_out"].items()]
    print(markdown_table(rows, ["metric", f"step {result['step']}", best_column]) if rows else "no held-out episodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
