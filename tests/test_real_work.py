"""The real-work ledger (taso_env.engine.real_work): every kind of real work (env step,
enumeration, successor look-up, cost query by Graph.cost, Graph.op_costs and priced
candidates) is counted in its column and refused inside `real_work.forbidden()`, where
the controller trains in the dream; exact counts for greedy on a small graph, in the
environment, in the evaluation's rows and in a collection's rollouts."""

import csv
import json

import numpy as np
import pytest

import taso_env as te
from taso_env import rules as rules_module
from taso_env.engine import real_work, search
from taso_env.engine.cost_model import make_cost_model
from taso_env.engine.real_work import RealWorkForbiddenError
from taso_env.env.episode import run_episode
from taso_env.env.policies import GreedyPolicy
from taso_env.env.rewrite_env import GraphRewriteEnv

MODEL = "analytic:h100"


def _fire_module() -> te.Graph:
    """A squeezenet fire module: greedy takes three rewrites on it, then stops."""
    b = te.GraphBuilder("fire")
    x = b.input("x", [1, 16, 13, 13])
    s = b.relu(b.conv2d(x, 8, 1, name="squeeze"))
    e1 = b.relu(b.conv2d(s, 16, 1, name="e1"))
    e3 = b.relu(b.conv2d(s, 16, 3, padding=1, name="e3"))
    b.output(b.concat([e1, e3], axis=1), "y")
    return b.build()


GREEDY_REWRITES = 3  # greedy's rewrites on the fire module under the analytic H100 model


@pytest.fixture
def reset_env():
    env = GraphRewriteEnv(_fire_module(), horizon=20, cost_model=MODEL)
    env.reset(seed=0)
    return env


def _first_rewrite(env) -> np.ndarray:
    """The env action of the current graph's first candidate (index 0 of its enumeration)."""
    return np.array([env.enumeration().candidates[0].rule_id, 0])


# Each kind of real work, the ledger column it lands in, and how much of it one touch is.
TOUCHES = {
    "env step": (lambda env: env.step(_first_rewrite(env)), {"env_steps": 1, "enumerations": 1}),
    "env reset": (lambda env: env.reset(seed=1), {"enumerations": 1}),
    "env construction": (lambda env: GraphRewriteEnv(env.graph, horizon=3), {}),
    "enumeration": (lambda env: search.enumeration(env.graph, model=MODEL), {"enumerations": 1}),
    "successor look-up (env.successor_enumeration)": (
        lambda env: env.successor_enumeration(0), {"enumerations": 1, "successor_lookups": 1}),
    "successor look-up (search.step)": (
        lambda env: search.step(env.enumeration(), 0), {"enumerations": 1, "successor_lookups": 1}),
    "successor look-up (search.successors)": (
        lambda env: search.successors(env.enumeration(), [0, 1]), {"enumerations": 2, "successor_lookups": 2}),
    "successor look-up (Graph.apply)": (
        lambda env: env.graph.apply(env.enumeration().candidates[0]), {"successor_lookups": 1}),
    "cost query (Graph.cost)": (lambda env: env.graph.cost(), {"cost_queries": 1}),
    "cost query (Graph.op_costs)": (lambda env: env.graph.op_costs(), {"cost_queries": 1}),
    "cost query (Graph.candidates)": (lambda env: env.graph.candidates(), {"cost_queries": 1}),
    "cost query (the rule set's own candidates)": (
        lambda env: rules_module.default().core.candidates(env.graph.core, make_cost_model(MODEL).core),
        {"cost_queries": 1}),
    "cost query (the rule set's candidate effects)": (
        lambda env: rules_module.default().core.candidate_effects(env.graph.core, make_cost_model(MODEL).core),
        {"cost_queries": 1}),
    "search baseline": (lambda env: te.search(env.graph, "greedy"), {}),
}


@pytest.mark.parametrize("kind", TOUCHES)
def test_each_kind_of_real_work_is_counted_in_its_ledger_column(reset_env, kind):
    touch, expected = TOUCHES[kind]
    before = real_work.counts()
    touch(reset_env)
    work = real_work.since(before)
    assert sum(work.values()) >= 1, "nothing counted"
    assert real_work.ledger(work) == {**dict.fromkeys(real_work.LEDGER, 0), **expected}


@pytest.mark.parametrize("kind", TOUCHES)
def test_each_kind_of_real_work_is_refused_inside_forbidden(reset_env, kind):
    touch, _ = TOUCHES[kind]
    before = real_work.counts()
    with real_work.forbidden("a dream"), pytest.raises(RealWorkForbiddenError, match="a dream"):
        touch(reset_env)
    assert real_work.since(before) == dict.fromkeys(real_work.KINDS, 0)  # refused before it was done
    touch(reset_env)  # and allowed again outside


def test_a_look_ahead_the_env_step_takes_is_no_successor_lookup_and_one_it_leaves_is(reset_env):
    env = reset_env
    xfer, _ = _first_rewrite(env)
    taken = env.candidate_index(xfer, 0)
    left = next(i for i in range(len(env.enumeration().candidates)) if i != taken)
    before = real_work.counts()
    env.successor_enumeration(taken)
    env.successor_enumeration(left)
    env.step(np.array([xfer, 0]))  # enters the successor looked at first: not built again
    assert real_work.ledger(real_work.since(before)) == {"env_steps": 1, "enumerations": 2, "successor_lookups": 1,
                                                         "cost_queries": 0}


def test_greedy_is_its_rewrites_plus_one_enumerations_and_nothing_else():
    graph = _fire_module()
    result = te.search(graph, "greedy", model=MODEL)
    assert len(result.applied) == GREEDY_REWRITES and result.expansions == GREEDY_REWRITES + 1

    env = GraphRewriteEnv(graph, horizon=20, cost_model=MODEL)
    before = real_work.counts()
    episode = run_episode(env, GreedyPolicy(env), 0, record=False)
    work = real_work.since(before)
    assert episode.metrics["steps"] == GREEDY_REWRITES + 1 and episode.terminations[-1]  # the rewrites, then stop
    assert episode.metrics["final_cost"] == pytest.approx(result.final_cost, rel=1e-12)
    assert real_work.ledger(work) == {"env_steps": GREEDY_REWRITES + 1, "enumerations": GREEDY_REWRITES + 1,
                                      "successor_lookups": 0, "cost_queries": 0}
    assert work["enumeration"] == 1 and work["step"] == work["step_entered"] == GREEDY_REWRITES


def test_every_evaluation_table_carries_the_ledger(tmp_path):
    from controller.eval_report import COLUMNS, LEDGER_COLUMNS, ledger_markdown
    from controller.evaluation import EvalConfig, evaluate

    spec = str(tmp_path / "fire.onnx")
    _fire_module().export_onnx(spec)
    config = EvalConfig(graphs=(spec,), agents=("greedy", "backtracking", "random"), budget=5, horizon=10,
                        random_episodes=2, cost_model=MODEL)
    rows = {r.agent: r for r in evaluate(config, None, tmp_path / "eval")}
    greedy, random_agent = rows["greedy"], rows["random"]
    assert (greedy.steps, greedy.env_steps, greedy.enumerations, greedy.successor_lookups,
            greedy.cost_queries) == (GREEDY_REWRITES, 0, GREEDY_REWRITES + 1, 0, 0)  # a search: its expansions
    assert rows["backtracking"].enumerations <= 5 and rows["backtracking"].env_steps == 0
    # random: one reset per episode, every step a rewrite; the start and each episode's graph priced
    assert random_agent.env_steps == random_agent.steps
    assert random_agent.enumerations == random_agent.steps + config.random_episodes
    assert (random_agent.successor_lookups, random_agent.cost_queries) == (0, 1 + config.random_episodes)
    assert greedy.training_env_steps is None and greedy.training_enumerations is None

    assert set(LEDGER_COLUMNS) == set(real_work.LEDGER) and set(LEDGER_COLUMNS) <= set(COLUMNS)
    saved = {r["agent"]: r for r in json.loads((tmp_path / "eval" / "results.json").read_text())}
    assert saved["greedy"]["enumerations"] == GREEDY_REWRITES + 1 and saved["random"]["cost_queries"] == 3
    with open(tmp_path / "eval" / "results.csv") as f:
        table = {r["agent"]: r for r in csv.DictReader(f)}
    assert {c: table["random"][c] for c in LEDGER_COLUMNS} == {c: str(getattr(random_agent, c)) for c in LEDGER_COLUMNS}
    header = (tmp_path / "eval" / "results.md").read_text().splitlines()[0]
    assert all(f" {c} " in header for c in LEDGER_COLUMNS)
    assert all(f" {c} " in ledger_markdown(list(saved.values())).splitlines()[0] for c in LEDGER_COLUMNS)


def test_a_collection_records_the_real_work_of_every_episode(tmp_path):
    from controller.evaluation import training_work
    from taso_env.env.collection import LEDGER_ATTRS, CollectConfig, collect, collection_work
    from taso_env.env.rollouts import RolloutReader

    spec = str(tmp_path / "fire.onnx")
    _fire_module().export_onnx(spec)
    run = tmp_path / "run"
    collect(CollectConfig(graphs=(spec,), episodes=2, out=str(run / "rollouts.h5"), policy="greedy", workers=1,
                          horizon=20, cost_model=MODEL))  # played in a worker process: it counts there
    episode = RolloutReader(run / "rollouts.h5").episode(1)
    assert {name: episode.attrs[name] for name in LEDGER_ATTRS} == {
        "real_work_env_steps": GREEDY_REWRITES + 1, "real_work_enumerations": GREEDY_REWRITES + 1,
        "real_work_successor_lookups": 0, "real_work_cost_queries": 0}
    expected = {"env_steps": 2 * (GREEDY_REWRITES + 1), "enumerations": 2 * (GREEDY_REWRITES + 1),
                "successor_lookups": 0, "cost_queries": 0}
    assert collection_work(run / "rollouts.h5") == expected
    assert training_work("controller", run) == {f"training_{c}": v for c, v in expected.items()}


# -- the dream: controller training fails when it touches real work ------------------------


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A run folder with rollouts, V and M, the smallest that train a controller."""
    pytest.importorskip("tensorflow")
    from taso_env.env.collection import CollectConfig, collect
    from worldmodel.configs import DataConfig, GraphVAEConfig, MDNRNNConfig, MDNRNNTrainConfig, VAETrainConfig
    from worldmodel.mdnrnn_training import train_mdnrnn
    from worldmodel.vae_training import train_vae

    run = tmp_path_factory.mktemp("ledger") / "run"
    collect(CollectConfig(graphs=("nasrnn",), episodes=3, out=str(run / "rollouts.h5"),
                          policy="random_best_location", workers=0, horizon=4))
    n_rules = len(rules_module.default())
    quiet = lambda *args, **kwargs: None  # noqa: E731
    train_vae(str(run), GraphVAEConfig(n_rules=n_rules, latent_dim=8, hidden=16, message_passing_steps=1),
              VAETrainConfig(steps=2, batch_size=4), DataConfig(held_out_fraction=0.0), log=quiet, progress=False)
    train_mdnrnn(str(run), MDNRNNConfig(n_rules=n_rules, latent_dim=8, hidden=16, mixtures=2),
                 MDNRNNTrainConfig(steps=2, batch_size=2), log=quiet, progress=False)
    return run


DREAM_TOUCHES = ("env step", "enumeration", "successor look-up (env.successor_enumeration)",
                 "successor look-up (search.successors)", "cost query (Graph.cost)", "cost query (Graph.op_costs)",
                 "cost query (Graph.candidates)", "cost query (the rule set's own candidates)")


def _controller_config():
    from controller.configs import ControllerTrainConfig
    from controller.ppo import PPOConfig

    return ControllerTrainConfig(updates=1, hidden=(16,), ppo=PPOConfig(num_dreams=4, rollout_steps=2, minibatches=1,
                                                                        epochs=1))


@pytest.mark.parametrize("kind", DREAM_TOUCHES)
def test_dream_training_that_touches_real_work_fails(tiny_run, monkeypatch, kind):
    from controller.training import train_controller
    from worldmodel import dream_env

    env = GraphRewriteEnv(_fire_module(), horizon=20, cost_model=MODEL)
    env.reset(seed=0)
    touch, _ = TOUCHES[kind]
    dream_step = dream_env.Dream.step

    def impure(self, actions):
        touch(env)
        return dream_step(self, actions)

    monkeypatch.setattr(dream_env.Dream, "step", impure)
    before = real_work.counts()
    with pytest.raises(RealWorkForbiddenError, match="dream"):
        train_controller(tiny_run, _controller_config(), restart=True)
    assert real_work.since(before)["env_step"] == 0


def test_pure_dream_training_does_no_real_work(tiny_run):
    from controller.training import train_controller

    assert train_controller(tiny_run, _controller_config(), restart=True)["real_work_units_during_training"] == 0
