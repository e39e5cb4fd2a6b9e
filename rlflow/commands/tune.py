"""Auto-tune the GPU executor's implementation choices (GA-DQN and other tuners).

    rlflow tune -m record     -c configs/tune.json   # measure tuning records on this GPU
    rlflow tune -m tune       -c configs/tune.json   # tune live ("live": true) or from records
    rlflow tune -m benchmark  -c configs/tune.json   # every tuner, same records and budgets, seeds
    rlflow tune -m experiment -c configs/tune.json   # GA-DQN ablations and hyper-parameters

The JSON config is described in taso_env/tuning/config.py and docs/tuning.md; results,
tables, plots and TensorBoard logs go to its out_dir, and a rerun resumes. Recording and
live tuning need the CUDA backend; benchmark and experiment replay records anywhere.
GA-DQN needs TensorFlow (where it is missing, the other tuners still run).
"""

from __future__ import annotations

import argparse
import json
import sys

from taso_env.tuning.config import MODES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-m", "--mode", choices=MODES, help="what to do (default: the config's 'mode')")
    parser.add_argument("-c", "--config", required=True, help="the JSON config")
    parser.add_argument("--graphs", nargs="+", help="override the config's graphs")
    parser.add_argument("--out-dir", help="override the config's out_dir")


def run(args: argparse.Namespace) -> int:
    import tuner_agents  # noqa: F401  (registers the GA-DQN tuner; TensorFlow loads only if one is made)
    from taso_env.errors import TuningError
    from taso_env.tuning import config, driver

    cfg, mode = config.load(args.config)
    mode = args.mode or mode
    if mode is None:
        raise TuningError(f"no mode: pass -m one of {list(MODES)} or set 'mode' in {args.config}")
    if args.graphs:
        cfg.graphs = list(args.graphs)
    if args.out_dir:
        cfg.out_dir = args.out_dir

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    result = getattr(driver, mode)(cfg, log)

    def compact(x):  # the curves are in out_dir; keep the printed summary short
        if isinstance(x, dict):
            return {k: compact(v) for k, v in x.items() if k != "mean_curve"}
        return x

    print(json.dumps({"mode": mode, "out_dir": cfg.out_dir, "result": compact(result)}, default=str))
    return 0
