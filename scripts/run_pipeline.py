#!/usr/bin/env python
"""The main job: rollouts -> V -> M -> controller (in the dream) -> evaluation.

    python scripts/run_pipeline.py                       # small default, runs/demo
    python scripts/run_pipeline.py --run runs/big --graphs squeezenet resnet18 bert_base nasbench \\
        --episodes 2000 --eval-graphs squeezenet resnet18 bert_base nasbench resnet50 inception_v3 vit_base

Rerunning the same command resumes every stage; --restart starts the run over. The
evaluation table is in <run>/eval/results.md.
"""

import argparse
import dataclasses
import sys
from pathlib import Path

from controller.pipeline import PipelineConfig, run_pipeline


def main(argv=None) -> int:
    defaults = PipelineConfig()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for f in dataclasses.fields(PipelineConfig):
        flag = "--" + f.name.replace("_", "-")
        value = getattr(defaults, f.name)
        if isinstance(value, tuple):
            p.add_argument(flag, nargs="+", default=list(value))
        else:
            p.add_argument(flag, type=type(value), default=value)
    p.add_argument("--smoke", action="store_true", help="tiny budgets (tests)")
    p.add_argument("--restart", action="store_true")
    args = vars(p.parse_args(argv))
    smoke, restart = args.pop("smoke"), args.pop("restart")
    config = PipelineConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in args.items()})
    if smoke:
        config = PipelineConfig.smoke(config.run)
    timings = run_pipeline(config, restart=restart)
    print(f"\ndone in {sum(timings.values()):.0f} s; results: {Path(config.run) / 'eval' / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
