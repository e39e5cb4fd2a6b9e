"""Side-by-side evaluation of agents on the real environment.

Agents: "controller" (a trained run's controller acting on the real graph),
"backtracking" (TASO's search), "greedy", "random" (best of `random_episodes` random
episodes). Per graph and agent: final estimated cost and speedup, optimisation wall
time, steps, real-environment steps spent in training, and — where the CUDA backend is
present — measured runtimes. Every optimised graph is exported to ONNX and checked
against the original with onnxruntime before it is reported; a mismatch is an error.

Outputs (in `out_dir`): results.md, results.json, results.csv, runtime.png,
optimisation_time.png, TensorBoard summaries under tb/, and every graph as ONNX under
graphs/ (<graph>__original.onnx, <graph>__<agent>.onnx) for measuring elsewhere.
"""

from __future__ import annotations

import csv
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import taso_env as te
from taso_env.env.episode import run_episode
from taso_env.env.policies import RandomPolicy
from taso_env.env.rewrite_env import GraphRewriteEnv, load_graph
from taso_env.onnx.check import check_equivalent, random_feeds

AGENTS = ("controller", "backtracking", "greedy", "random")


class OptimisedGraphMismatch(AssertionError):
    """An agent's optimised graph computes something different from the original."""


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated, and how.

    Attributes:
        graphs: built-in networks, ONNX files or shipped model names.
        agents: agents to compare (controller needs a trained run).
        budget: backtracking's expansion budget.
        alpha: backtracking's relaxation.
        horizon: step limit of the controller's and random agent's episodes.
        random_episodes: episodes of the random agent (its best is reported).
        seed: random agent and random weights of the onnxruntime check.
        cost_model: the cost model every agent is scored on.
        measure: also measure runtimes with the CUDA backend, where present.
    """

    graphs: tuple[str, ...]
    agents: tuple[str, ...] = AGENTS
    budget: int = 1000
    alpha: float = 1.05
    horizon: int = 100
    random_episodes: int = 3
    seed: int = 0
    cost_model: str = "analytic:h100"
    measure: bool = False

    def __post_init__(self):
        unknown = set(self.agents) - set(AGENTS)
        if unknown:
            raise ValueError(f"unknown agents {sorted(unknown)}; choose from {AGENTS}")
        if not self.graphs:
            raise ValueError("no graphs to evaluate")


@dataclass
class Row:
    graph: str
    agent: str
    initial_cost_ms: float
    final_cost_ms: float
    speedup: float
    optimisation_s: float
    steps: int
    training_env_steps: int | None
    onnxruntime_max_abs_diff: float
    measured_original_ms: float | None = None
    measured_optimised_ms: float | None = None
    extra: dict = field(default_factory=dict)


def _controller_agent(run_dir: Path, env):
    from controller.agent import ControllerAgent
    from controller.training import load_controller
    from worldmodel.checkpoints import load_mdnrnn, load_vae

    controller, head, _ = load_controller(run_dir)
    return ControllerAgent(load_vae(run_dir), load_mdnrnn(run_dir), controller, head, env)


def training_env_steps(run_dir: Path | None) -> int | None:
    """Real-environment steps recorded in the run's rollouts (all that training used)."""
    if run_dir is None or not (run_dir / "rollouts.h5").exists():
        return None
    from taso_env.env.rollouts import RolloutReader

    return RolloutReader(run_dir / "rollouts.h5").total_steps()


def _episode_graph(env, agent, seed: int):
    """Plays one episode; returns the cheapest graph it visited (an agent that rewrites
    past its best point keeps the best) and the steps taken."""
    base = env.unwrapped
    visited = []

    def recording(obs, info, rng):
        visited.append(base.graph)
        return agent(obs, info, rng)

    ep = run_episode(env, recording, seed, record=False, options={"graph": base.graph_names[0]})
    visited.append(base.graph)
    return min(visited, key=lambda g: g.cost()), ep.metrics["steps"]


def evaluate(config: EvalConfig, run_dir: str | Path | None, out_dir: str | Path) -> list[Row]:
    """Evaluates every agent on every graph; writes the outputs; returns the rows."""
    te.set_cost_model(config.cost_model)
    run_dir = Path(run_dir) if run_dir else None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if "controller" in config.agents and run_dir is None:
        raise ValueError("the controller agent needs --run (a trained run folder)")
    train_steps = training_env_steps(run_dir)
    backend = _cuda_backend() if config.measure else None
    rows: list[Row] = []
    for spec in config.graphs:
        graph = load_graph(spec)
        source = graph.export_onnx()
        (out_dir / "graphs").mkdir(exist_ok=True)
        graph.export_onnx(out_dir / "graphs" / f"{graph.name}__original.onnx")
        feeds = random_feeds(graph, config.seed)
        measured_original = backend.measure(graph) if backend else None
        for agent in config.agents:
            steps, used = 0, None
            env = GraphRewriteEnv(graph, horizon=config.horizon, cost_model=config.cost_model)
            policy = _controller_agent(run_dir, env) if agent == "controller" else RandomPolicy()
            start = time.perf_counter()  # models are loaded: time the optimisation only
            if agent in ("backtracking", "greedy"):
                result = te.search(graph, agent, alpha=config.alpha, budget=config.budget)
                best, steps = result.graph, len(result.applied)
            else:
                if agent == "controller":
                    best, steps = _episode_graph(env, policy, config.seed)
                    used = train_steps
                else:
                    best, best_cost = graph, graph.cost()
                    for k in range(config.random_episodes):
                        g, s = _episode_graph(env, policy, config.seed + k)
                        steps += s
                        if g.cost() < best_cost:
                            best, best_cost = g, g.cost()
            seconds = time.perf_counter() - start
            report = check_equivalent(source, best, feeds)
            if not report.equivalent:
                raise OptimisedGraphMismatch(f"{agent} on {graph.name}: {report}")
            best.export_onnx(out_dir / "graphs" / f"{graph.name}__{agent}.onnx")
            rows.append(Row(graph=graph.name, agent=agent, initial_cost_ms=graph.cost(),
                            final_cost_ms=best.cost(), speedup=graph.cost() / best.cost(),
                            optimisation_s=seconds, steps=steps, training_env_steps=used,
                            onnxruntime_max_abs_diff=max(report.max_abs_diff.values()),
                            measured_original_ms=measured_original,
                            measured_optimised_ms=backend.measure(best) if backend else None))
    write_outputs(rows, out_dir)
    return rows


class _Measurer:
    """Measured end-to-end runtimes (ms) with the CUDA backend (CUDA-graph replay, median)."""

    def __init__(self, backend):
        self.backend = backend

    def measure(self, graph) -> float:
        return float(self.backend.measure(graph).median_ms)


def _cuda_backend():
    try:
        from taso_env.gpu import cuda_backend
    except ImportError:
        return None
    return _Measurer(cuda_backend) if cuda_backend.available() else None


COLUMNS = ("graph", "agent", "initial_cost_ms", "final_cost_ms", "speedup", "optimisation_s", "steps",
           "training_env_steps", "measured_original_ms", "measured_optimised_ms")


def markdown(rows: list[Row]) -> str:
    def fmt(v):
        if v is None:
            return "–"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(fmt(getattr(r, c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def write_outputs(rows: list[Row], out_dir: Path) -> None:
    (out_dir / "results.md").write_text(markdown(rows) + "\n")
    (out_dir / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    _plots(rows, out_dir)
    _tensorboard(rows, out_dir / "tb")


def _plots(rows: list[Row], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = sorted({r.graph for r in rows})
    agents = [a for a in AGENTS if any(r.agent == a for r in rows)]
    width = 0.8 / max(len(agents), 1)
    x = np.arange(len(graphs))
    for metric, fname, ylabel, log in (("final_cost_ms", "runtime.png", "estimated runtime (ms)", False),
                                       ("optimisation_s", "optimisation_time.png", "optimisation time (s)", True)):
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(graphs)), 4))
        for k, agent in enumerate(agents):
            vals = [next((getattr(r, metric) for r in rows if r.graph == g and r.agent == agent), np.nan)
                    for g in graphs]
            ax.bar(x + k * width, vals, width, label=agent)
        if metric == "final_cost_ms":
            base = [next(r.initial_cost_ms for r in rows if r.graph == g) for g in graphs]
            ax.scatter(x + 0.4 - width / 2, base, marker="_", s=400, color="black", label="original")
        ax.set_xticks(x + 0.4 - width / 2, graphs, rotation=20)
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)


def _tensorboard(rows: list[Row], tb_dir: Path) -> None:
    try:
        import tensorflow as tf
    except ImportError:  # evaluation also runs where TensorFlow is absent (the GPU machine)
        return
    writer = tf.summary.create_file_writer(str(tb_dir))
    with writer.as_default():
        for r in rows:
            tf.summary.scalar(f"eval/speedup/{r.graph}/{r.agent}", r.speedup, step=0)
            tf.summary.scalar(f"eval/optimisation_s/{r.graph}/{r.agent}", r.optimisation_s, step=0)
        tf.summary.text("eval/results", markdown(rows), step=0)
        for name in ("runtime.png", "optimisation_time.png"):
            png = (tb_dir.parent / name).read_bytes()
            tf.summary.image(f"eval/{name[:-4]}", tf.image.decode_png(png)[None], step=0)
    writer.flush()
