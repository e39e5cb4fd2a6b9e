"""The main job on one run folder: rollouts -> V -> M -> controller (and its ablation
variants: C trained in a dream of untrained V and M, and with discount 0) -> evaluation
of every controller row against the work-matched and search baselines.

Each stage runs as `python -m rlflow <stage> ...` in its own process (so each resumes on
rerun the way it does alone, and TensorFlow's memory is returned between stages); the
pipeline only chains them with one set of sizes, saved as the "pipeline" section of
runs/<name>/config.json.

    run_pipeline(PipelineConfig(run="runs/demo"))
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from taso_env.errors import TasoEnvError
from taso_env.run_folder import RunFolder, write_json


class StageFailedError(TasoEnvError, RuntimeError):
    """A pipeline stage exited non-zero (its own error is printed above)."""


@dataclass(frozen=True)
class PipelineConfig:
    """Sizes of every stage. The defaults finish in a few minutes on 2 cores.

    Attributes:
        run: the run folder.
        graphs: graphs the rollouts (and so V, M and the controller) see.
        eval_graphs: graphs of the evaluation (may include unseen ones).
        episodes: rollout episodes.
        policy: rollout policy (taso_env.env.policies).
        workers: rollout worker processes.
        horizon: step limit of a rollout episode and of a dream.
        vae_steps / mdnrnn_steps: training steps of V and M.
        controller_updates: PPO updates in the dream.
        num_dreams / rollout_steps: parallel dreams and steps per PPO update.
        budget: backtracking's expansion budget in the evaluation.
        eqsat_time_limit / eqsat_node_limit: eqsat's saturation limits in the evaluation.
        seed: seed of every stage.
    """

    run: str = "runs/demo"
    graphs: tuple[str, ...] = ("squeezenet", "nasrnn")
    eval_graphs: tuple[str, ...] = ("squeezenet", "nasrnn", "nasbench")
    episodes: int = 120
    policy: str = "epsilon_greedy"
    workers: int = 2
    horizon: int = 20
    vae_steps: int = 400
    mdnrnn_steps: int = 400
    controller_updates: int = 200
    num_dreams: int = 32
    rollout_steps: int = 16
    budget: int = 1000
    eqsat_time_limit: float = 10.0
    eqsat_node_limit: int = 20000
    seed: int = 0

    @classmethod
    def smoke(cls, run: str) -> PipelineConfig:
        """Tiny budgets (tests, CI's check of the README's first command)."""
        return cls(run=run, graphs=("nasrnn",), eval_graphs=("nasrnn",), episodes=6, workers=1, horizon=6,
                   vae_steps=10, mdnrnn_steps=10, controller_updates=2, num_dreams=8, rollout_steps=4, budget=3,
                   eqsat_time_limit=1.0, eqsat_node_limit=2000)


CONTROLLER_VARIANTS = ("untrained_world", "myopic_world")
"""The controller's ablations trained beside it (`rlflow train-controller --variant`)."""
EVAL_AGENTS = ("controller", "controller_random_init", "controller_untrained_world", "controller_myopic_world",
               "controller_lookahead", "greedy_random_detours", "greedy", "backtracking", "eqsat", "random")
"""The evaluation's rows: every controller row, the work-matched baseline and the searches."""


def _graph_args(specs: Sequence[str]) -> list[str]:
    # Files as absolute paths: stages run in the run folder (see run_stage).
    return [os.path.abspath(s) if os.path.exists(s) else s for s in specs]


def stages(c: PipelineConfig, restart: bool = False) -> list[tuple[str, list[str]]]:
    """(rlflow subcommand, its arguments) of each stage, in order; paths are absolute."""
    again = ["--restart"] if restart else []
    seed = ["--seed", str(c.seed)]
    c = replace(c, run=os.path.abspath(c.run), graphs=tuple(_graph_args(c.graphs)),
                eval_graphs=tuple(_graph_args(c.eval_graphs)))
    controller = ["--run", c.run, "--updates", str(c.controller_updates), "--num-dreams", str(c.num_dreams),
                  "--rollout-steps", str(c.rollout_steps), "--horizon", str(c.horizon), *seed, *again]
    return [
        ("collect", ["--graphs", *c.graphs, "--episodes", str(c.episodes), "--policy", c.policy,
                     "--workers", str(c.workers), "--horizon", str(c.horizon),
                     "--out", str(RunFolder(c.run).rollouts_path), *seed, *again]),
        ("train-vae", ["--run", c.run, "--steps", str(c.vae_steps), *seed, *again]),
        ("train-mdnrnn", ["--run", c.run, "--steps", str(c.mdnrnn_steps), *seed, *again]),
        ("train-controller", controller),
        *(("train-controller", [*controller, "--variant", variant]) for variant in CONTROLLER_VARIANTS),
        ("evaluate", ["--run", c.run, "--graphs", *c.eval_graphs, "--agents", *EVAL_AGENTS,
                      "--budget", str(c.budget), "--horizon", str(10 * c.horizon),
                      "--eqsat-time-limit", str(c.eqsat_time_limit), "--eqsat-node-limit", str(c.eqsat_node_limit),
                      *seed]),
    ]


def stage_name(command: str, argv: Sequence[str]) -> str:
    """A stage's name in the timings: its command, with its --variant where it has one."""
    argv = list(argv)
    return f"{command} --variant {argv[argv.index('--variant') + 1]}" if "--variant" in argv else command


def run_stage(command: str, argv: Sequence[str], cwd: str | os.PathLike) -> float:
    """Runs `rlflow <command> <argv>` in a child process; returns its wall time (s).

    The child runs `python -m rlflow` in `cwd` (give paths in `argv` absolute): `-m` puts
    the working folder first on the module path, so run from a source checkout it would
    import the checkout's packages, which have no compiled modules, instead of the
    installed ones.

    Raises:
        StageFailedError: the stage exited non-zero.
    """
    start = time.perf_counter()
    Path(cwd).mkdir(parents=True, exist_ok=True)
    code = subprocess.run([sys.executable, "-m", "rlflow", command, *argv], cwd=cwd).returncode
    if code != 0:
        raise StageFailedError(f"stage 'rlflow {command}' failed (exit {code}); "
                               "fix the cause above and rerun the same command to resume")
    return time.perf_counter() - start


def run_pipeline(config: PipelineConfig, restart: bool = False) -> dict[str, float]:
    """Runs every stage in order; returns each stage's wall time (s).

    Raises:
        StageFailedError: naming the stage that failed (the stages before it are kept).
    """
    run = RunFolder(config.run)
    run.save_section("pipeline", config)  # each stage checks its own settings on resume
    timings = {}
    for command, argv in stages(config, restart):
        print(f"\n=== rlflow {command} {' '.join(argv)}", flush=True)
        timings[stage_name(command, argv)] = run_stage(command, argv, cwd=run.path.resolve())
    write_json(run.path / "pipeline_timings.json", timings)
    print_ledger(run)
    return timings


def print_ledger(run: RunFolder) -> None:
    """Prints each agent's speedup beside its real work from the run's evaluation
    (controller.eval_report.ledger_markdown): the optimisation's env steps,
    enumerations, successor look-ups and cost queries, and the real work behind a
    learned agent's training data (training_*)."""
    from controller.eval_report import ledger_markdown

    rows = json.loads((run.eval_dir / "results.json").read_text())
    print("\n=== speedup and real work (taso_env.engine.real_work) per graph and agent", flush=True)
    print(ledger_markdown(rows), flush=True)
