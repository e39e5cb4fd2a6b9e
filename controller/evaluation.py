"""Side-by-side evaluation of agents on the real environment.

Agents (AGENTS, the rows of `rlflow evaluate`):
- "controller": the run's policy C trained in the dream, acting on the real graph
  (controller.policy_agent, variant "trained");
- "controller_random_init": the same policy with random weights (seeded by `seed`), on
  the run's V and M;
- "controller_untrained_world": C trained in a dream of untrained V and M
  (`rlflow train-controller --variant untrained_world`);
- "controller_myopic_world": C trained in the dream with discount 0
  (`rlflow train-controller --variant myopic_world`);
- "controller_lookahead": greedy plus M-guided detours the real engine verifies
  (controller.agent);
- "greedy_random_detours": the work-matched baseline (controller.work_matched): greedy,
  then random non-improving detours and greedy again, up to the `controller` row's steps
  on the graph (1.2 x greedy's steps + 5 where that row is not evaluated);
- "model_free": the run's GNN agent trained with PPO on the real env (controller.model_free);
- "greedy", "backtracking" (TASO's search), "eqsat" (equality saturation,
  taso_env.engine.eqsat); "random" (best of `random_episodes` random episodes).

The policy rows (POLICY_VARIANTS) act at greedy's work: an episode takes at most
1.2 x greedy's rewrites + 5 steps on the graph (controller.work_matched.default_cap,
within `horizon`); greedy's rewrites are counted by a greedy search the evaluation runs
for it, outside every row's ledger. The row's extra holds the cap ("step_cap").

Per graph and agent: its split (train / held-out: no training graph of its family,
controller.families), final estimated cost and speedup, optimisation wall time (model
loading excluded, reported as model_load_s: a learned agent is loaded once per
evaluation, on its first graph), steps, the step at which the best graph was reached,
the real work of the optimisation as the real-work ledger counts it
(taso_env.engine.real_work: `env_steps`, `enumerations`, `successor_lookups`,
`cost_queries`; a search's enumerations are its expansions, each a full enumeration;
eqsat's are its saturation iterations, each every rule's query over the whole e-graph,
and its steps and successor look-ups the matches whose targets the engine built (its
greedy seed and polish are inside it, not counted); the random agent's are those of all
its episodes), the real work that produced a learned agent's training data (`training_*`:
the rollouts' episodes for every controller row, the training process for model_free,
whose training_env_steps are its PPO steps), and — with `measure="cuda"` where the CUDA
backend is present — measured runtimes. Every optimised graph is exported to ONNX and
checked against the original with onnxruntime before it is reported; a mismatch is an
error.

Each (graph, agent) row is also saved under rows/ as it is computed; rerunning a killed
evaluation with the same out_dir keeps them and computes only the rest (a learned row
only while its checkpoint folders are unchanged, a greedy_random_detours row only while
its step cap is).

Outputs (in `out_dir`, see controller.eval_report): results.md, results.json,
results.csv, vs_greedy.md / vs_greedy.json (each agent against greedy: summed gain, share
of greedy's, graphs at / above / below it; where greedy ran), learning_curves.json,
runtime.png, speedup.png, optimisation_time.png, quality_vs_real_steps.png, TensorBoard
summaries under tb/, and every graph as ONNX under graphs/ (<graph>__original.onnx,
<graph>__<agent>.onnx; <graph> is `graph_label`) for measuring elsewhere.
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
from controller.learned_agents import (
    CONTROLLERS,
    LEARNED,
    POLICY_VARIANTS,
    checkpoint_folders,
    curves,
    learned_agent,
    single_threaded_inference,
    training_graphs,
    training_work,
)
from controller.work_matched import GREEDY_PHASE_LIMIT, GreedyRandomDetours, StepCap, default_cap
from taso_env.engine import real_work
from taso_env.engine.cost_model import make_cost_model
from taso_env.env.episode import run_episode
from taso_env.env.policies import RandomPolicy
from taso_env.env.rewrite_env import GraphRewriteEnv, load_graph
from taso_env.onnx.check import check_equivalent, random_feeds
from taso_env.run_folder import write_json

SEARCHES = ("greedy", "backtracking", "eqsat")
WORK_MATCHED = "greedy_random_detours"  # capped by the steps of MATCHED_TO on the same graph
MATCHED_TO = "controller"
AGENTS = ("controller", "controller_random_init", "controller_untrained_world", "controller_myopic_world",
          "controller_lookahead", WORK_MATCHED, "model_free", "greedy", "backtracking", "eqsat", "random")
DEFAULT_AGENTS = ("controller", "controller_random_init", "controller_lookahead", WORK_MATCHED, "backtracking",
                  "greedy", "random")  # the other variants and model_free once trained: name them


class OptimisedGraphMismatch(AssertionError):
    """An agent's optimised graph computes something different from the original."""


def run_order(agents) -> tuple[str, ...]:
    """`agents` in the order they run on each graph: as given, except that the
    work-matched baseline runs after the agent whose steps cap it."""
    agents = tuple(agents)
    if WORK_MATCHED in agents and MATCHED_TO in agents and agents.index(WORK_MATCHED) < agents.index(MATCHED_TO):
        rest = [a for a in agents if a != WORK_MATCHED]
        rest.insert(rest.index(MATCHED_TO) + 1, WORK_MATCHED)
        agents = tuple(rest)
    return agents


@dataclass(frozen=True)
class EvalConfig:
    """What is evaluated, and how.

    Attributes:
        graphs: built-in networks, ONNX files or shipped model names.
        agents: agents to compare (AGENTS; the controller rows need a trained run, each
            trained variant its `rlflow train-controller --variant`, model_free a run
            where `rlflow train-model-free` ran). They run in this order on each graph,
            except greedy_random_detours, which runs after controller (run_order).
        budget: backtracking's expansion budget.
        alpha: backtracking's relaxation.
        horizon: step limit of the learned agents' and random agent's episodes.
        random_episodes: episodes of the random agent (its best is reported).
        seed: random agent, greedy_random_detours' detours, controller_random_init's
            weights and random weights of the onnxruntime check.
        cost_model: the cost model every agent is scored on.
        measure: "cuda" also measures runtimes end to end with the CUDA backend ("" = no).
        eqsat_time_limit: eqsat's saturation time limit (s; extraction gets up to half again).
        eqsat_node_limit: eqsat's e-graph size limit (e-nodes).
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
    eqsat_time_limit: float = 10.0
    eqsat_node_limit: int = 20000

    def __post_init__(self):
        unknown = set(self.agents) - set(AGENTS)
        if unknown:
            raise ValueError(f"unknown agents {sorted(unknown)}; choose from {AGENTS}")
        if not self.graphs:
            raise ValueError("no graphs to evaluate")
        if self.measure not in ("", "cuda"):
            raise ValueError(f"measure must be 'cuda' or empty, got {self.measure!r}")
        object.__setattr__(self, "agents", run_order(self.agents))


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


def evaluate(config: EvalConfig, run_dir: str | Path | None, out_dir: str | Path,
             matched_steps: dict[str, int] | None = None) -> list[Row]:
    """Evaluates every agent on every graph, every graph priced by `config.cost_model`
    (passed to search and to every cost; the process default is left alone); writes the
    outputs; returns the rows (graphs, then agents in `config.agents`' order).

    `matched_steps` ({graph spec: steps}) caps greedy_random_detours on a graph where
    the controller row is not evaluated here (a Ray job: controller.ray_evaluation);
    where it is, its steps on the graph are the cap."""
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
        matched = (matched_steps or {}).get(spec)
        policy_cap = None  # the policy rows' step cap on this graph, counted when the first needs it
        for agent in config.agents:
            if agent == WORK_MATCHED and MATCHED_TO in config.agents:
                matched = next(r.steps for r in rows if r.graph == label and r.agent == MATCHED_TO)
            done = out_dir / "rows" / f"{label}__{agent}.json"
            key = _resume_key(config, run_dir, agent, graph, matched if agent == WORK_MATCHED else None)
            saved = _saved_row(done)  # a killed evaluation resumes: rows of the same settings and models are kept
            if saved is not None and saved.pop("resume_key", None) == key and set(saved) == ROW_FIELDS:
                rows.append(Row(**saved))
                continue
            load_s = None
            # (observations computed only where the agent reads them: the controller's at local optima)
            horizon = GREEDY_PHASE_LIMIT if agent == WORK_MATCHED else config.horizon
            if agent in POLICY_VARIANTS:
                policy_cap = policy_cap or policy_step_cap(graph, model, config.horizon)
                horizon = policy_cap
            env = GraphRewriteEnv(graph, horizon=horizon, cost_model=config.cost_model, lazy_observations=True)
            policy = None
            if agent in LEARNED:  # loaded (and traced) once, then moved from graph to graph
                t0 = time.perf_counter()
                if agent not in loaded:
                    loaded[agent] = learned_agent(agent, run_dir, env, seed=config.seed)
                policy = loaded[agent]
                policy.env = env.unwrapped
                load_s = time.perf_counter() - t0
            with collector_frozen():  # what earlier graphs and agents left is not rescanned while timed
                start = time.perf_counter()  # models are loaded: time the optimisation only
                work = real_work.counts()
                best, steps, best_step, engine_work, extra = _optimise(agent, config, graph, env, policy, model,
                                                                        matched)
                seconds = time.perf_counter() - start
                ledger = {**real_work.ledger(real_work.since(work)), **engine_work}
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
                            measured_speedup=measured_original / measured if measured else None, extra=extra))
            write_json(done, {**asdict(rows[-1]), "resume_key": key})  # atomically: a kill leaves it whole or absent
    write_outputs(rows, out_dir, AGENTS, curves(run_dir, rows, config.agents))
    return rows


def _optimise(agent: str, config: EvalConfig, graph, env, policy, model, matched: int | None):
    """`agent`'s optimisation of `graph`: (best graph, steps, best step, ledger columns
    the engine counts itself, extra)."""
    if agent in SEARCHES:
        options = {"time_limit": config.eqsat_time_limit, "node_limit": config.eqsat_node_limit} \
            if agent == "eqsat" else {}
        result = te.search(graph, agent, alpha=config.alpha, budget=config.budget, model=model, **options)
        if agent != "eqsat":  # a search's engine work is inside the C++ search: its expansions
            steps = len(result.applied)
            return result.graph, steps, steps, {"enumerations": result.expansions}, {}
        d = result.details  # the e-graph's iterations and the matches whose targets the engine built
        return (result.graph, d["matches_applied"], None,
                {"enumerations": result.expansions, "successor_lookups": d["matches_applied"]},
                {"eqsat_stop": d["stop"], "eqsat_source": d["source"], "eqsat_enodes": d["enodes"]})
    if agent in LEARNED:
        best, taken, best_step = episode_graph(env, policy, config.seed)
        extra = {"step_cap": env.unwrapped.config.horizon} if agent in POLICY_VARIANTS else {}
        return best, len(taken), best_step, {}, extra
    if agent == WORK_MATCHED:
        cap = StepCap(matched=matched)
        best, taken, best_step = episode_graph(env, GreedyRandomDetours(env, cap), config.seed)
        return best, len(taken), best_step, {}, {"step_cap": cap.effective, "cap_source": cap.source,
                                                  "greedy_steps": cap.greedy_steps}
    best, best_cost, steps = graph, graph.cost(model), 0  # random: the best of its episodes
    for k in range(config.random_episodes):
        g, taken, _ = episode_graph(env, RandomPolicy(), config.seed + k)
        steps += len(taken)
        if (cost := g.cost(model)) < best_cost:
            best, best_cost = g, cost
    return best, steps, None, {}, {}


def policy_step_cap(graph, model, horizon: int) -> int:
    """The policy rows' step cap on `graph`: 1.2 x greedy's rewrites + 5 (greedy's search
    priced by `model`, run by the harness before any row's ledger opens), at most `horizon`."""
    return min(horizon, default_cap(len(te.search(graph, "greedy", model=model).applied)))


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


def _resume_key(config: EvalConfig, run_dir: Path | None, agent: str, graph, matched: int | None = None) -> str:
    """What a saved row depends on: the settings (not which other graphs and agents run),
    the graph itself (its structural hash), for a learned agent the checkpoints of its
    folders (checkpoint_folders), for greedy_random_detours the matched step count."""
    checkpoints = None
    if run_dir is not None and agent in LEARNED:
        checkpoints = {}
        for folder in checkpoint_folders(agent):
            index = run_dir / folder / "checkpoint"
            checkpoints[folder] = index.read_text() + str(index.stat().st_mtime_ns) if index.exists() else None
    settings = {**asdict(config), "agents": None, "graphs": None}
    return json.dumps({"config": settings, "agent": agent, "checkpoint": checkpoints, "graph": graph.hash(),
                       "matched_steps": matched}, sort_keys=True, default=str)


def _cuda_backend():
    """The CUDA backend's side-by-side measurement (the original and an agent's graph in
    interleaved rounds: taso_env/gpu/interleaved_measurement.py), or None where there is none."""
    try:
        from taso_env.gpu import cuda_backend, interleaved_measurement
    except ImportError:
        return None
    return interleaved_measurement.measure_side_by_side if cuda_backend.available() else None


__all__ = ["AGENTS", "CONTROLLERS", "DEFAULT_AGENTS", "LEARNED", "MATCHED_TO", "POLICY_VARIANTS", "WORK_MATCHED",
           "EvalConfig", "Row", "episode_graph", "evaluate", "learned_agent", "markdown",
           "run_order", "single_threaded_inference", "training_work"]
