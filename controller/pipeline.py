"""The whole pipeline on one run folder: rollouts -> V -> M -> controller -> evaluation.

Each stage is the stage's own script run as a subprocess (so each resumes on rerun the
way it does alone); the pipeline only chains them with one set of sizes.

    run_pipeline(PipelineConfig(run="runs/demo"))
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@dataclass(frozen=True)
class PipelineConfig:
    """Sizes of every stage. The defaults finish in about 10 minutes on 2 cores."""

    run: str = "runs/demo"
    graphs: tuple[str, ...] = ("squeezenet", "nasrnn")
    eval_graphs: tuple[str, ...] = ("squeezenet", "nasrnn", "nasbench")
    episodes: int = 120
    policy: str = "random_best_location"
    workers: int = 2
    horizon: int = 20
    vae_steps: int = 400
    mdnrnn_steps: int = 400
    controller_updates: int = 40
    num_dreams: int = 32
    rollout_steps: int = 16
    budget: int = 100
    seed: int = 0

    @classmethod
    def smoke(cls, run: str) -> PipelineConfig:
        """Tiny budgets for tests."""
        return cls(run=run, graphs=("nasrnn",), eval_graphs=("nasrnn",), episodes=6, workers=1, horizon=6,
                   vae_steps=10, mdnrnn_steps=10, controller_updates=2, num_dreams=8, rollout_steps=4, budget=3)


def stages(c: PipelineConfig, restart: bool = False) -> list[tuple[str, list[str]]]:
    """(name, argv) of each stage."""
    again = ["--restart"] if restart else []
    run = c.run
    return [
        ("collect rollouts", ["collect_rollouts.py", "--graphs", *c.graphs, "--episodes", str(c.episodes),
                              "--policy", c.policy, "--workers", str(c.workers), "--horizon", str(c.horizon),
                              "--seed", str(c.seed), "--out", f"{run}/rollouts.h5", *again]),
        ("train V", ["train_vae.py", "--run", run, "--steps", str(c.vae_steps), "--seed", str(c.seed), *again]),
        ("train M", ["train_mdnrnn.py", "--run", run, "--steps", str(c.mdnrnn_steps), "--seed", str(c.seed), *again]),
        ("train controller", ["train_controller.py", "--run", run, "--updates", str(c.controller_updates),
                              "--num-dreams", str(c.num_dreams), "--rollout-steps", str(c.rollout_steps),
                              "--horizon", str(c.horizon), "--seed", str(c.seed), *again]),
        ("evaluate", ["evaluate.py", "--run", run, "--graphs", *c.eval_graphs,
                      "--agents", "controller,backtracking,greedy,random", "--budget", str(c.budget),
                      "--horizon", str(4 * c.horizon), "--seed", str(c.seed)]),
    ]


def run_pipeline(config: PipelineConfig, restart: bool = False) -> dict:
    """Runs every stage in order; raises CalledProcessError naming the failing stage."""
    Path(config.run).mkdir(parents=True, exist_ok=True)
    (Path(config.run) / "pipeline.json").write_text(json.dumps(asdict(config), indent=2))
    timings = {}
    for name, argv in stages(config, restart):
        print(f"\n=== {name}: {' '.join(argv)}", flush=True)
        start = time.perf_counter()
        try:
            subprocess.run([sys.executable, str(SCRIPTS / argv[0]), *argv[1:]], check=True)
        except subprocess.CalledProcessError as e:
            raise RuntimeError(f"pipeline stage '{name}' failed (exit {e.returncode}): {' '.join(argv)}") from None
        timings[name] = time.perf_counter() - start
    (Path(config.run) / "pipeline_timings.json").write_text(json.dumps(timings, indent=2))
    return timings
