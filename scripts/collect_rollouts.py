#!/usr/bin/env python
"""Collect rollouts of GraphRewriteEnv into runs/<name>/rollouts.h5 with parallel workers.

    python scripts/collect_rollouts.py --graphs squeezenet bert_base --episodes 1000 \\
        --policy epsilon_greedy --workers 4 --horizon 50 --seed 0 --out runs/demo/rollouts.h5

Episode i plays graphs[i % len(graphs)] with seed + i. Rerunning the same command resumes
(a killed run loses at most the episodes in flight); `--restart` starts over. The
settings are saved to runs/<name>/config.json, and a rerun with other settings is
refused. The file layout is documented in taso_env/env/rollouts.py.
"""

import argparse
import sys

from taso_env.env.collection import POLICIES, CollectConfig, CollectionError, ConfigMismatchError, collect
from taso_env.env.rollouts import RolloutFormatError


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", required=True, help="built-in network names or ONNX paths")
    parser.add_argument("--episodes", type=int, required=True)
    parser.add_argument("--out", required=True, help="runs/<name>/rollouts.h5")
    parser.add_argument("--policy", default="random", choices=POLICIES)
    parser.add_argument("--workers", type=int, default=1, help="worker processes (0: in this process)")
    parser.add_argument("--horizon", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cost-model", default="analytic:h100")
    parser.add_argument("--max-locations", type=int, default=128)
    parser.add_argument("--epsilon", type=float, default=0.3, help="random-action rate of epsilon_greedy")
    parser.add_argument("--stop-prob", type=float, default=0.0, help="stop probability of random")
    parser.add_argument("--restart", action="store_true", help="delete the run's episodes and start over")
    args = parser.parse_args(argv)

    cfg = CollectConfig(graphs=tuple(args.graphs), episodes=args.episodes, out=args.out, policy=args.policy,
                        workers=args.workers, horizon=args.horizon, seed=args.seed,
                        cost_model=args.cost_model, max_locations=args.max_locations,
                        epsilon=args.epsilon, stop_prob=args.stop_prob)
    try:
        result = collect(cfg, restart=args.restart)
    except (ConfigMismatchError, RolloutFormatError, CollectionError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the episodes written are kept, rerun the command to resume", file=sys.stderr)
        return 130
    rate = result.steps / result.seconds if result.seconds > 0 else 0.0
    print(f"{args.out}: {result.total} episodes ({result.collected} collected now, {result.steps} steps "
          f"in {result.seconds:.1f} s, {rate:.0f} steps/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
