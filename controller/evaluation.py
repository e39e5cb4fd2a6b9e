"""Side-by-side evaluation of agents on the real environment.

Agents: "controller" (a trained run's controller acting on the real graph, see
controller.agent), "model_free" (the run's model-free GNN agent trained with PPO on the
real environment, controller.model_free), "backtracking" (TASO's search), "greedy",
"random" (best of `random_episodes` random episodes). Per graph and agent: its split
(train / held-out: no training graph of its family, controller.families), final
estimated cost and speedup, optimisation wall time (model loading excluded, reported as
model_load_s: a learned agent is loaded once per evaluation, on its first graph), steps,
the step at which the best graph was reached, the real work of the optimisation as the
real-work ledger counts it (taso_env.engine.real_work: `env_steps`, `enumerations`,
`successor_lookups`, `cost_queries`; a search's enumerations are its expansions, each a
full enumeration; the random agent's are those of all its episodes), the real work that
produced a learned agent's training data (`training_*`: the rollouts' episodes for the
controller, the training process for model_free, whose training_env_steps are its PPO
steps), and — with `measure="cuda"` where the CUDA backend is present — measured
runtimes. Every optimised graph is exported to ONNX and checked against the
original with onnxruntime before it is reported; a mismatch is an error.

Each (graph, agent) row is also saved under rows/ as it is computed; rerunning a killed
evaluation with the same out_dir keeps them and computes only the rest.

Outputs (in `out_dir`, see controller.eval_report): results.md, results.json,
results.csv, learning_curves.json, runtime.png, speedup.png, optimisation_time.png,
quality_vs_real_steps.png, TensorBoard summaries under tb/, and every graph as ONNX
under graphs/ (<graph>__original.onnx, <graph>__<agent>.onnx; <graph> is `graph_label`)
for measuring elsewhere.
"""

from __future__ import annotations

import gc
import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np

import taso_env as te
from controller.eval_report import markdown, write_outputs
from controller.families import split as family_split
from taso_env.engine import real_work
from taso_env.engine.cost_model import make_cost_model
from taso_env.env.episode import run_episode
from taso_env.env.policies import RandomPolicy
from taso_env.env.rewrite_env import GraphRewriteEnv, load_graph
from taso_env.onnx.check import check_equivalent, random_feeds
from taso_env.run_folder import write_json

AGENTS = ("controller", "model_free", "backtracking", "greedy", "random")
LEARNED = ("controller", "model_free")
DEFAULT_AGENTS = ("controller", "backtracking", "greedy", "random")  # model_free when trained: name it


class OptimisedGraphMismatch(AssertionError):
    """An agent's optimised graph computes something different from the original."""


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated, and how.

    Attributes:
        graphs: built-in networks, ONNX files or shipped model names.
        agents: agents to compare (controller needs a trained run, model_free a run
            where `rlflow train-model-free` ran).
        budget: backtracking's expansion budget.
        alpha: backtracking's relaxation.
        horizon: step limit of the learned agents' and random agent's episodes.
        random_episodes: episodes of the random agent (its best is reported).
        seed: random agent and random weights of the onnxruntime check.
        cost_model: the cost model every agent is scored on.
        measure: "cuda" also measures runtimes end to end with the CUDA backend ("" = no).
    """

    graphs: tuple[str, ...]
    agents: tuple[str, ...] = DEFAULT_AGENTS
    budget: int = 1000
    alpha: float = 1.05
    horizon: int = 100
    random_episodes: int = 3
    seed: int = 0
    cost_model: str = "analytic:h100"
    measure: str = ""

    def __post_init__(self):
        unknown = set(self.agents) - set(AGENTS)
        if unknown:
            raise ValueError(f"unknown agents {sorted(unknown)}; choose from {AGENTS}")
        if not self.graphs:
            raise ValueError("no graphs to evaluate")
        if self.measure not in ("", "cuda"):
            raise ValueError(f"measure must be 'cuda' or empty, got {self.measure!r}")


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
    split: str = "train"
    best_step: int | None = None
    # the real-work ledger of the optimisation (taso_env.engine.real_work.LEDGER)
    env_steps: int | None = None
    enumerations: int | None = None  # graphs enumerated by the engine, whole or near a rewrite
    successor_lookups: int | None = None  # successor graphs built or scored that no env step entered
    cost_queries: int | None = None  # graph / op costs and priced candidate lists outside an enumeration
    # the ledger of the real work that produced a learned agent's training data (None: not recorded)
    training_enumerations: int | None = None
    training_successor_lookups: int | None = None
    training_cost_queries: int | None = None
    model_load_s: float | None = None
    measured_original_ms: float | None = None
    measured_optimised_ms: float | None = None
    measured_speedup: float | None = None
    extra: dict = field(default_factory=dict)


ROW_FIELDS = frozenset(f.name for f in fields(Row))  # a saved row without all of them is computed again


def single_threaded_inference() -> bool:
    """Runs TensorFlow's ops on one thread (intra- and inter-op) if its runtime has not
    started yet in this process; whether it took effect. A learned agent's calls are
    small graphs of one observation, where thread pools cost more than they save (the
    controller's nasrnn episode on a 2-core machine: 120 -> 109 ms, V's encoder 3.5 -> 2.5
    ms a call, docs/learned_agents.md); a process that trained first keeps its pools."""
    import tensorflow as tf

    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime already started
        return False
    return True


def learned_agent(agent: str, run_dir: Path, env):
    """The run's trained `agent` ("controller" or "model_free") as a policy on `env`
    (TensorFlow single-threaded where it can still be: single_threaded_inference)."""
    single_threaded_inference()
    if agent == "controller":
        from controller.training import load_lookahead_agent

        return load_lookahead_agent(run_dir, env)
    from controller.model_free import load_model_free_agent

    return load_model_free_agent(run_dir, env)


def training_env_steps(run_dir: Path | None) -> int | None:
    """Real-environment steps recorded in the run's rollouts (all that V, M and the
    controller were trained on, iterative rounds included)."""
    if run_dir is None or not (run_dir / "rollouts.h5").exists():
        return None
    from taso_env.env.rollouts import RolloutReader

    return RolloutReader(run_dir / "rollouts.h5").total_steps()


def model_free_env_steps(run_dir: Path | None) -> int | None:
    """Real-environment steps the run's model-free agent trained on."""
    path = run_dir / "model_free" / "metrics.json" if run_dir else None
    if path is None or not path.exists():
        return None
    return int(json.loads(path.read_text())["real_env_steps"])


def training_work(agent: str, run_dir: Path | None) -> dict[str, int | None]:
    """The real work that produced `agent`'s training data, as the Row's `training_*`
    fields: the controller's is that of the run's rollouts (every episode V, M and the
    controller learned from, iterative rounds included; taso_env.env.collection records it
    per episode), model_free's that of its training process (its learning-curve
    evaluations included; training_env_steps are its PPO steps). None where not recorded."""
    work: dict | None = None
    if agent == "controller" and run_dir is not None and (run_dir / "rollouts.h5").exists():
        from taso_env.env.collection import collection_work

        work = collection_work(run_dir / "rollouts.h5")
    elif agent == "model_free" and run_dir is not None and (run_dir / "model_free" / "metrics.json").exists():
        spent = json.loads((run_dir / "model_free" / "metrics.json").read_text()).get("real_work_this_process")
        if isinstance(spent, dict) and set(spent) >= set(real_work.KINDS):
            work = real_work.ledger(spent)
    env_steps = {"controller": training_env_steps, "model_free": model_free_env_steps}[agent](run_dir)
    return {"training_env_steps": env_steps,
            **{f"training_{column}": work[column] if work else None
               for column in real_work.LEDGER if column != "env_steps"}}


def training_graphs(run_dir: Path | None) -> list[str]:
    if run_dir is None or not (run_dir / "rollouts.h5").exists():
        return []
    from taso_env.env.rollouts import RolloutReader

    return list(json.loads(RolloutReader(run_dir / "rollouts.h5").meta.env_config)["graphs"])



@contextmanager
def collector_frozen():
    """Python's garbage collector run, then the objects alive frozen out of its passes,
    for the duration (an agent's timed optimisation should not pay for rescanning what
    earlier graphs and agents left: in an eleven-graph evaluation that cost the
    controller up to 40% of its time)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def episode_graph(env, agent, seed: int):
    """Plays one episode; returns the cheapest graph it visited (an agent that rewrites
    past its best point keeps the best), the rules of the actions taken (one per step, the
    last a stop where the agent stopped) and the step that reached it (the rewrites that
    led to it: rules[:best_step])."""
    base = env.unwrapped
    visited, costs = [], []  # each graph and its cost as the env priced it

    def recording(obs, info, rng):
        visited.append(base.graph)
        costs.append(info["cost"])
        return agent(obs, info, rng)

    ep = run_episode(env, recording, seed, record=False, options={"graph": base.graph_names[0]})
    visited.append(base.graph)
    costs.append(base.cost)
    best_step = int(np.argmin(costs))
    return visited[best_step], [int(a[0]) for a in ep.actions], best_step


def _curves(run_dir: Path | None, rows: list[Row], agents) -> dict[str, list[dict]]:
    """Quality (mean speedup on the training graphs) against real env steps used in
    training: earlier points from each learned agent's curve.json, the last from `rows`."""
    curves: dict[str, list[dict]] = {}
    for agent in (a for a in LEARNED if a in agents):
        folder = "controller" if agent == "controller" else "model_free"
        path = run_dir / folder / "curve.json" if run_dir else None
        points = json.loads(path.read_text()) if path and path.exists() else []
        mine = [r for r in rows if r.agent == agent and r.split == "train"]
        if mine and mine[0].training_env_steps is not None:
            final = {"real_env_steps": mine[0].training_env_steps,
                     "mean_speedup": float(np.mean([r.speedup for r in mine])), "source": "evaluation"}
            points = [p for p in points if p["real_env_steps"] < final["real_env_steps"]] + [final]
        curves[agent] = points
    return curves


def evaluate(config: EvalConfig, run_dir: str | Path | None, out_dir: str | Path) -> list[Row]:
    """Evaluates every agent on every graph, every graph priced by `config.cost_model`
    (passed to search and to every cost; the process default is left alone); writes the
    outputs; returns the rows."""
    model = make_cost_model(config.cost_model)
    run_dir = Path(run_dir) if run_dir else None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for agent in LEARNED:
        if agent in config.agents and run_dir is None:
            raise ValueError(f"the {agent} agent needs --run (a trained run folder)")
    trained_with = {agent: training_work(agent, run_dir) for agent in LEARNED if agent in config.agents}
    splits = family_split(config.graphs, training_graphs(run_dir))
    backend = _cuda_backend() if config.measure == "cuda" else None
    if config.measure == "cuda" and backend is None:
        raise RuntimeError("--measure cuda: the CUDA backend is not available on this machine")
    rows: list[Row] = []
    loaded: dict[str, object] = {}  # learned agent -> its policy
    for spec in config.graphs:
        graph = load_graph(spec)
        label = graph_label(spec, graph)
        source = graph.export_onnx()
        (out_dir / "graphs").mkdir(exist_ok=True)
        graph.export_onnx(out_dir / "graphs" / f"{label}__original.onnx")
        feeds = random_feeds(graph, config.seed)
        for agent in config.agents:
            done = out_dir / "rows" / f"{label}__{agent}.json"
            key = _resume_key(config, run_dir, agent, graph)
            saved = _saved_row(done)  # a killed evaluation resumes: rows of the same settings and models are kept
            if saved is not None and saved.pop("resume_key", None) == key and set(saved) == ROW_FIELDS:
                rows.append(Row(**saved))
                continue
            steps, best_step, load_s = 0, None, None
            # (observations computed only where the agent reads them: the controller's at local optima)
            env = GraphRewriteEnv(graph, horizon=config.horizon, cost_model=config.cost_model, lazy_observations=True)
            if agent in LEARNED:  # loaded (and traced) once, then moved from graph to graph
                t0 = time.perf_counter()
                if agent not in loaded:
                    loaded[agent] = learned_agent(agent, run_dir, env)
                policy = loaded[agent]
                policy.env = env.unwrapped
                load_s = time.perf_counter() - t0
            else:
                policy = RandomPolicy()
            with collector_frozen():  # what earlier graphs and agents left is not rescanned while timed
                start = time.perf_counter()  # models are loaded: time the optimisation only
                work = real_work.counts()
                expansions = None
                if agent in ("backtracking", "greedy"):
                    result = te.search(graph, agent, alpha=config.alpha, budget=config.budget, model=model)
                    best, steps = result.graph, len(result.applied)
                    best_step = steps
                    expansions = result.expansions
                elif agent in LEARNED:
                    best, taken, best_step = episode_graph(env, policy, config.seed)
                    steps = len(taken)
                else:
                    best, best_cost = graph, graph.cost(model)
                    for k in range(config.random_episodes):
                        g, taken, _ = episode_graph(env, policy, config.seed + k)
                        steps += len(taken)
                        if (cost := g.cost(model)) < best_cost:
                            best, best_cost = g, cost
                seconds = time.perf_counter() - start
                ledger = real_work.ledger(real_work.since(work))
            if expansions is not None:  # a search's engine work is inside the C++ search: its expansions
                ledger["enumerations"] = expansions
            report = check_equivalent(source, best, feeds)
            if not report.equivalent:
                raise OptimisedGraphMismatch(f"{agent} on {label}: {report}")
            best.export_onnx(out_dir / "graphs" / f"{label}__{agent}.onnx")
            measured_original, measured = backend([graph, best]) if backend else (None, None)
            rows.append(Row(graph=label, agent=agent, split=splits[spec], initial_cost_ms=graph.cost(model),
                            final_cost_ms=best.cost(model), speedup=graph.cost(model) / best.cost(model),
                            optimisation_s=seconds, model_load_s=load_s, steps=steps, best_step=best_step,
                            **ledger, **trained_with.get(agent, {"training_env_steps": None}),
                            onnxruntime_max_abs_diff=max(report.max_abs_diff.values()),
                            measured_original_ms=measured_original, measured_optimised_ms=measured,
                            measured_speedup=measured_original / measured if measured else None))
            write_json(done, {**asdict(rows[-1]), "resume_key": key})  # atomically: a kill leaves it whole or absent
    write_outputs(rows, out_dir, AGENTS, _curves(run_dir, rows, config.agents))
    return rows


def _saved_row(path: Path) -> dict | None:
    """A row an earlier run saved at `path`, or None where there is none or it cannot be read
    (then the row is computed again)."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def graph_label(spec: str, graph) -> str:
    """A graph's name in an evaluation's rows and files: its name, with ".onnx" where it was
    read from an ONNX file (a built-in network and an export of the same model share a
    name, e.g. inception_v3, but not their ops)."""
    return f"{graph.name}.onnx" if str(spec).lower().endswith(".onnx") else graph.name


def _resume_key(config: EvalConfig, run_dir: Path | None, agent: str, graph) -> str:
    """What a saved row depends on: the settings (not which other graphs and agents run),
    the graph itself (its structural hash) and, for a learned agent, its checkpoint."""
    checkpoint = None
    if run_dir is not None and agent in LEARNED:
        index = run_dir / agent / "checkpoint"
        checkpoint = index.read_text() + str(index.stat().st_mtime_ns) if index.exists() else None
    settings = {**asdict(config), "agents": None, "graphs": None}
    return json.dumps({"config": settings, "agent": agent, "checkpoint": checkpoint, "graph": graph.hash()},
                      sort_keys=True, default=str)


def _cuda_backend():
    """The CUDA backend's side-by-side measurement (the original and an agent's graph in
    interleaved rounds: taso_env/gpu/interleaved_measurement.py), or None where there is none."""
    try:
        from taso_env.gpu import cuda_backend, interleaved_measurement
    except ImportError:
        return None
    return interleaved_measurement.measure_side_by_side if cuda_backend.available() else None


__all__ = ["AGENTS", "EvalConfig", "Row", "evaluate", "markdown"]
