"""The rows of `rlflow evaluate` beside the learned agents: greedy_random_detours (the
work-matched baseline: never worse than greedy, within its step cap, counted by the
ledger as an env-driven episode), eqsat, the order the agents run in, and the resume key
of every learned row (each depends on its own checkpoint folder). Real engine, real
files, small graphs."""

import json
import os

import pytest

import taso_env as te
from controller.eval_report import LEDGER_COLUMNS, TRAINING_COLUMNS, ledger_markdown
from controller.evaluation import (
    AGENTS,
    LEARNED,
    EvalConfig,
    episode_graph,
    evaluate,
    run_order,
)
from controller.work_matched import GreedyRandomDetours, StepCap, default_cap
from taso_env.env.rewrite_env import GraphRewriteEnv

MODEL = "analytic:h100"
GREEDY_NASRNN = 56  # greedy's rewrites on nasrnn under MODEL
MATCHED = GREEDY_NASRNN + 20  # a controller that took 20 more steps than greedy


@pytest.fixture(scope="module")
def nasrnn_rows(tmp_path_factory):
    """greedy_random_detours matched to MATCHED steps, and greedy, on nasrnn."""
    out = tmp_path_factory.mktemp("eval")
    config = EvalConfig(graphs=("nasrnn",), agents=("greedy_random_detours", "greedy"), cost_model=MODEL, seed=3)
    rows = evaluate(config, None, out, matched_steps={"nasrnn": MATCHED})
    return {r.agent: r for r in rows}, out, config


def test_greedy_random_detours_is_never_worse_than_greedy_and_keeps_to_its_cap(nasrnn_rows):
    rows, _, _ = nasrnn_rows
    detours, greedy = rows["greedy_random_detours"], rows["greedy"]
    assert greedy.steps == GREEDY_NASRNN
    assert detours.extra == {"step_cap": MATCHED, "cap_source": "matched", "greedy_steps": GREEDY_NASRNN}
    assert detours.steps == MATCHED  # it detours until its cap (its last action a stop)
    assert detours.final_cost_ms <= greedy.final_cost_ms * (1 + 1e-12)
    assert detours.best_step >= GREEDY_NASRNN  # greedy's optimum or a graph past it
    assert detours.onnxruntime_max_abs_diff < 1e-3  # checked in onnxruntime like every row


def test_greedy_random_detours_is_counted_by_the_ledger_as_an_episode(nasrnn_rows):
    rows, out, _ = nasrnn_rows
    detours = rows["greedy_random_detours"]
    # one reset, every action an env step, every rewrite entered (its stop enumerates nothing)
    assert detours.env_steps == detours.steps and detours.enumerations == detours.steps
    assert detours.successor_lookups == 0 and detours.cost_queries == 0  # costs come with the enumerations
    assert all(getattr(detours, c) is None for c in TRAINING_COLUMNS)
    saved = json.loads((out / "results.json").read_text())
    header = ledger_markdown(saved).splitlines()[0]
    assert all(f" {c} " in header for c in LEDGER_COLUMNS + TRAINING_COLUMNS)
    assert (out / "graphs" / "nasrnn__greedy_random_detours.onnx").exists()


def test_greedy_random_detours_resumes_only_for_the_same_cap(nasrnn_rows):
    _, out, config = nasrnn_rows
    kept = evaluate(config, None, out, matched_steps={"nasrnn": MATCHED})
    assert [r.optimisation_s for r in kept] == [r.optimisation_s for r in nasrnn_rows[0].values()]
    again = {r.agent: r for r in evaluate(config, None, out, matched_steps={"nasrnn": GREEDY_NASRNN + 3})}
    assert again["greedy_random_detours"].steps == GREEDY_NASRNN + 3  # computed again with the new cap
    assert again["greedy"].optimisation_s == nasrnn_rows[0]["greedy"].optimisation_s  # greedy's row kept


def test_greedy_random_detours_without_a_matched_agent_takes_1_2_greedy_plus_5():
    env = GraphRewriteEnv("nasrnn", horizon=10_000, cost_model=MODEL, lazy_observations=True)
    cap = StepCap()
    policy = GreedyRandomDetours(env, cap)
    best, taken, best_step = episode_graph(env, policy, seed=0)
    assert cap.source == "greedy" and cap.greedy_steps == GREEDY_NASRNN
    assert cap.effective == default_cap(GREEDY_NASRNN) == 73 and len(taken) == 73
    assert policy.detours > 0 and taken[-1] == env.unwrapped.n_rules  # detours taken, then its stop
    greedy = te.search(te.graphs.build("nasrnn"), "greedy", model=MODEL)
    assert best.cost(MODEL) <= greedy.final_cost * (1 + 1e-12)


def test_a_cap_below_greedy_still_reaches_greedys_optimum_and_different_seeds_detour_differently(tmp_path):
    config = EvalConfig(graphs=("nasrnn",), agents=("greedy_random_detours",), cost_model=MODEL)
    short = evaluate(config, None, tmp_path / "short", matched_steps={"nasrnn": 10})[0]
    assert short.steps == GREEDY_NASRNN + 1 and short.extra["step_cap"] == GREEDY_NASRNN + 1
    greedy = te.search(te.graphs.build("nasrnn"), "greedy", model=MODEL)
    assert short.final_cost_ms == pytest.approx(greedy.final_cost, rel=1e-12)
    env = GraphRewriteEnv("nasrnn", horizon=10_000, cost_model=MODEL, lazy_observations=True)
    walks = [episode_graph(env, GreedyRandomDetours(env, StepCap(matched=70)), seed)[1] for seed in (0, 0, 1)]
    assert walks[0] == walks[1] != walks[2]  # seeded: the same seed, the same detours


def test_the_eqsat_row_runs_and_is_checked(tmp_path):
    config = EvalConfig(graphs=("squeezenet",), agents=("eqsat", "greedy"), cost_model=MODEL,
                        eqsat_time_limit=1.0, eqsat_node_limit=2000)
    rows = {r.agent: r for r in evaluate(config, None, tmp_path)}
    eqsat = rows["eqsat"]
    assert eqsat.final_cost_ms <= rows["greedy"].final_cost_ms * (1 + 1e-12)  # seeded with greedy's graph
    assert eqsat.enumerations >= 1 and eqsat.successor_lookups == eqsat.steps > 0 and eqsat.env_steps == 0
    assert eqsat.extra["eqsat_stop"] in ("saturated", "time limit", "node limit", "iteration limit")
    assert eqsat.onnxruntime_max_abs_diff < 1e-3 and (tmp_path / "graphs" / "squeezenet__eqsat.onnx").exists()


def test_the_work_matched_baseline_runs_after_the_controller_on_each_graph():
    assert run_order(("greedy_random_detours", "greedy", "controller", "random")) == \
        ("greedy", "controller", "greedy_random_detours", "random")
    assert run_order(("controller", "greedy_random_detours")) == ("controller", "greedy_random_detours")
    assert run_order(("greedy_random_detours", "greedy")) == ("greedy_random_detours", "greedy")
    config = EvalConfig(graphs=("nasrnn",), agents=("greedy_random_detours", "controller_lookahead", "controller"))
    assert config.agents == ("controller_lookahead", "controller", "greedy_random_detours")
    assert AGENTS.index("controller") < AGENTS.index("greedy_random_detours")
    with pytest.raises(ValueError, match="unknown agents"):
        EvalConfig(graphs=("nasrnn",), agents=("greedy_random_detour",))


def test_every_learned_row_needs_a_run(tmp_path):
    for agent in LEARNED:
        with pytest.raises(ValueError, match=f"the {agent} agent needs --run"):
            evaluate(EvalConfig(graphs=("nasrnn",), agents=(agent,)), None, tmp_path)


def test_a_learned_rows_resume_key_follows_its_own_checkpoint_folders(tmp_path):
    from controller.evaluation import _resume_key
    from controller.learned_agents import checkpoint_folders

    run = tmp_path / "run"
    folders = {f for agent in LEARNED for f in checkpoint_folders(agent)}
    for folder in folders:
        (run / folder).mkdir(parents=True)
        (run / folder / "checkpoint").write_text(f'model_checkpoint_path: "{folder}-1"\n')
    config = EvalConfig(graphs=("nasrnn",), agents=LEARNED)
    graph = te.graphs.build("nasrnn")

    def keys():
        return {agent: _resume_key(config, run, agent, graph) for agent in LEARNED}

    before = keys()
    assert len(set(before.values())) == len(LEARNED)  # a key per row
    for agent in LEARNED:  # a new checkpoint in a row's own folder changes that row's key
        own = checkpoint_folders(agent)[0]
        index = run / own / "checkpoint"
        index.write_text(index.read_text() + "#\n")
        os.utime(index, ns=(1, index.stat().st_mtime_ns + 1))
        after = keys()
        changed = {a for a in LEARNED if after[a] != before[a]}
        assert agent in changed
        assert changed == {a for a in LEARNED if own in checkpoint_folders(a)}
        before = after



def test_each_agent_is_summed_against_greedy_on_the_same_graphs(nasrnn_rows):
    """vs_greedy.json beside the results: greedy's own row is 100% of itself, and the
    work-matched row, never worse than greedy, is at greedy on its graph."""
    from controller import versus_greedy

    rows, out, _ = nasrnn_rows
    saved = {(r["agent"], r["group"]): r for r in json.loads((out / "vs_greedy.json").read_text())}
    assert saved[("greedy", "all")]["share_of_greedy"] == 1.0 and saved[("greedy", "all")]["at_greedy"] == 1
    detours = saved[("greedy_random_detours", "all")]
    assert detours["at_greedy"] == 1 and detours["below_greedy"] == 0
    assert detours["gain"] == pytest.approx(rows["greedy_random_detours"].speedup - 1, abs=1e-6)
    # an extra group, and a graph below greedy counted as such
    worse = [{"graph": "nasrnn", "split": "train", "agent": "late", "speedup": rows["greedy"].speedup * 0.99},
             {"graph": "nasrnn", "split": "train", "agent": "greedy", "speedup": rows["greedy"].speedup}]
    late = {r["group"]: r for r in versus_greedy.summary(worse, {"valley": {"nasrnn"}}) if r["agent"] == "late"}
    assert set(late) == {"all", "train", "valley"} and late["valley"]["below_greedy"] == 1
    assert late["all"]["share_of_greedy"] < 1.0
