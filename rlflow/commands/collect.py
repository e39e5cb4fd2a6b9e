"""Collect rollouts of the substitution environment into runs/<name>/rollouts.h5.

    rlflow collect --graphs squeezenet bert_base --episodes 1000 --policy random_best_location \
        --workers 2 --horizon 20 --out runs/demo/rollouts.h5

Episode i plays graphs[i % len(graphs)] with seed + i, in parallel worker processes,
or as Ray tasks with --ray [ADDRESS] (a private loopback-only Ray, or the cluster at
ADDRESS; `pip install rlflow[ray]`): the same episodes, byte for byte.
Rerunning the same command resumes (a killed run loses at most the episodes in flight);
--restart starts over. The settings are saved as the "collect" section of
runs/<name>/config.json, and a rerun with other data-defining settings is refused. The
file layout is documented in taso_env/env/rollouts.
"""

from __future__ import annotations

import argparse

from rlflow.config_flags import add_config_flags, config_from_args
from taso_env.env.collection import POLICIES, CollectConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_flags(parser, CollectConfig, title="collection (CollectConfig)")
    for action in parser._actions:  # the policy names are known: let argparse check them
        if action.dest == "policy":
            action.choices = POLICIES
    parser.add_argument("--restart", action="store_true", help="delete the run's episodes and start over")


def run(args: argparse.Namespace) -> int:
    from taso_env.env.collection import collect

    result = collect(config_from_args(CollectConfig, args), restart=args.restart)
    rate = result.steps / result.seconds if result.seconds > 0 else 0.0
    print(f"{args.out}: {result.total} episodes ({result.collected} collected now, {result.steps} steps "
          f"in {result.seconds:.1f} s, {rate:.0f} steps/s; {result.backend})")
    return 0
