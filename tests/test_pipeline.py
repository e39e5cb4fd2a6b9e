"""The whole pipeline with tiny budgets (and its resume), the dream's purity, and the
evaluation outputs."""

import importlib.util
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from controller.work_matched import default_cap

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("pipeline") / "run"
    cmd = ["rlflow", "pipeline", "--smoke", "--run", str(run)]  # the installed console command
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    (run.parent / "pipeline_stdout.txt").write_text(first.stdout)
    return run, cmd


def test_pipeline_writes_every_artefact(smoke_run):
    from rlflow.pipeline import EVAL_AGENTS

    run, _ = smoke_run
    for path in ("rollouts.h5", "vae/config.json", "mdnrnn/config.json", "controller/config.json",
                 "controller/metrics.json", "controller_untrained_world/config.json",
                 "controller_myopic_world/config.json", "eval/results.md", "eval/results.json", "eval/results.csv",
                 "eval/runtime.png", "eval/optimisation_time.png"):
        assert (run / path).exists(), path
    rows = json.loads((run / "eval" / "results.json").read_text())
    assert [r["agent"] for r in rows] == list(EVAL_AGENTS)  # greedy_random_detours after the controller
    for r in rows:
        assert r["final_cost_ms"] <= r["initial_cost_ms"] + 1e-12  # never worse than the original
        assert r["onnxruntime_max_abs_diff"] < 1e-3
        assert r["enumerations"] is not None and r["env_steps"] is not None
    # The engine work each optimisation did: search's expansions, an episode's enumerations.
    by_agent = {r["agent"]: r for r in rows}
    assert by_agent["greedy"]["enumerations"] == by_agent["greedy"]["steps"] + 1  # one per step + the last look
    assert 1 <= by_agent["backtracking"]["enumerations"] <= 3  # the smoke budget
    assert by_agent["controller_lookahead"]["enumerations"] > by_agent["controller_lookahead"]["steps"]  # its lookahead
    for agent in ("controller", "controller_random_init", "controller_untrained_world", "controller_myopic_world",
                  "controller_lookahead"):  # the rollouts' real work behind every controller row
        assert by_agent[agent]["training_env_steps"] == by_agent["controller"]["training_env_steps"] > 0
        assert by_agent[agent]["training_enumerations"] is not None
    # the policy rows act at greedy's work: at most 1.2 x greedy's rewrites + 5 steps
    for agent in ("controller", "controller_random_init", "controller_untrained_world", "controller_myopic_world"):
        assert 1 <= by_agent[agent]["extra"]["step_cap"] <= default_cap(by_agent["greedy"]["steps"])
        assert by_agent[agent]["steps"] <= by_agent[agent]["extra"]["step_cap"]
    # the work-matched baseline: capped by the controller's steps, never worse than greedy
    detours, greedy = by_agent["greedy_random_detours"], by_agent["greedy"]
    assert detours["extra"]["cap_source"] == "matched"
    assert detours["extra"]["step_cap"] == max(by_agent["controller"]["steps"], greedy["steps"] + 1)
    assert detours["steps"] <= detours["extra"]["step_cap"] and detours["env_steps"] == detours["steps"]
    assert detours["final_cost_ms"] <= greedy["final_cost_ms"] * (1 + 1e-12)
    controller = json.loads((run / "controller" / "metrics.json").read_text())
    assert controller["real_env_steps_during_training"] == 0
    assert list((run / "tb").glob("*/events.out.tfevents.*")) or list((run / "tb").rglob("events.out.tfevents.*"))
    printed = (run.parent / "pipeline_stdout.txt").read_text()
    table = printed[printed.index("=== speedup and real work"):]
    assert all(f"| {agent} |" in table for agent in EVAL_AGENTS)  # print_ledger prints every row


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs Ray (pip install '.[ray]')")
def test_on_ray_the_work_matched_row_waits_for_the_controllers_steps(smoke_run, tmp_path):
    """On Ray each (graph, agent) pair is a job: greedy_random_detours' job starts once the
    controller's is done, capped by its steps, and equals the local evaluation."""
    from dataclasses import asdict

    from controller.evaluation import EvalConfig, evaluate
    from controller.ray_evaluation import evaluate_on_ray

    run, _ = smoke_run
    config = EvalConfig(graphs=("nasrnn",), agents=("greedy_random_detours", "controller"), horizon=60)
    local = evaluate(config, run, tmp_path / "local")
    on_ray = evaluate_on_ray(config, run, tmp_path / "ray", address="local")
    timing = {"optimisation_s", "model_load_s"}
    assert [{k: v for k, v in asdict(r).items() if k not in timing} for r in on_ray] == \
           [{k: v for k, v in asdict(r).items() if k not in timing} for r in local]
    assert [r.agent for r in on_ray] == ["controller", "greedy_random_detours"]
    assert on_ray[1].extra["cap_source"] == "matched" and on_ray[1].steps <= on_ray[1].extra["step_cap"]


def test_optimize_with_the_runs_trained_controller(smoke_run, tmp_path):
    """`rlflow optimize MODEL --run RUN`: the run's controller optimises a model it never
    saw, the result checked in onnxruntime and written as ONNX, never worse than the start."""
    run, _ = smoke_run
    out, summary = tmp_path / "sq.onnx", tmp_path / "sq.json"
    result = subprocess.run(["rlflow", "optimize", "squeezenet1_1", "--run", str(run), "-o", str(out),
                             "--json", str(summary)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "the controller agent of" in result.stdout and out.exists()
    s = json.loads(summary.read_text())
    assert s["method"] == "controller" and s["equivalent"] is True
    assert s["final_cost_ms"] <= s["initial_cost_ms"] and s["best_step"] <= s["steps"]
    assert sum(s["rule_fires"].values()) == s["best_step"]  # the rewrites that led to the graph returned


def test_pipeline_resumes_on_rerun(smoke_run):
    run, cmd = smoke_run
    before = sorted(p.name for p in (run / "rollouts.h5.episodes").iterdir())
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert sorted(p.name for p in (run / "rollouts.h5.episodes").iterdir()) == before  # nothing recollected


def test_dream_env_never_touches_the_real_env(smoke_run):
    import tensorflow as tf  # noqa: F401
    from gymnasium.utils.env_checker import check_env

    from taso_env.engine import real_work
    from worldmodel.checkpoints import load_mdnrnn, load_vae
    from worldmodel.dream_env import Dream, DreamConfig, DreamEnv

    run, _ = smoke_run
    vae, mdnrnn = load_vae(str(run)), load_mdnrnn(str(run))
    latents = np.load(run / "controller" / "start_latents.npy")
    candidates = np.load(run / "controller" / "start_candidates.npy")
    assert candidates.shape == (len(latents), mdnrnn.config.n_rules + 1, mdnrnn.config.top_locations)
    assert np.isfinite(candidates).any()  # the real start graph's candidates, from the rollouts
    before = real_work.counts()
    env = DreamEnv(vae, mdnrnn, latents, candidates, DreamConfig(horizon=5), seed=0)
    check_env(env, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert obs["obs"].shape == (vae.config.latent_dim + mdnrnn.config.hidden,) and info["action_mask"][-1]
    dream = Dream(vae, mdnrnn, latents, candidates, DreamConfig(horizon=4), batch_size=6, seed=0)
    _, top = dream.reset()
    rng = np.random.default_rng(0)
    for _ in range(10):
        mask = dream.mask
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in mask])
        moving = actions != dream.stop
        rules, places = actions // dream.top_locations, actions % dream.top_locations
        earned = top[np.arange(6), rules, places]
        _, top, reward, terminated, truncated, invalid = dream.step(actions)
        assert reward.shape == (6,) and dream.mask[:, -1].all() and not invalid.any()
        # a rewrite earns its candidate's reward, less the step and detour charges
        charge = 0.02 + 0.25 * (earned <= 0)
        np.testing.assert_allclose(reward[moving], (earned - charge)[moving], rtol=1e-5)
        assert (reward[~moving] == 0).all() and terminated[~moving].all()
    assert real_work.since(before) == dict.fromkeys(real_work.KINDS, 0)


def test_a_dream_that_touches_the_real_env_fails_the_purity_check(smoke_run, tmp_path, monkeypatch):
    """The check can fail: a dream step that asks the real engine for candidates makes
    controller training raise, and so does one that steps a real environment."""
    import shutil

    import taso_env as te
    from controller.ppo import PPOConfig
    from controller.training import ControllerTrainConfig, train_controller
    from taso_env.engine.real_work import RealWorkForbiddenError
    from taso_env.env.rewrite_env import GraphRewriteEnv
    from worldmodel import dream_env

    run, _ = smoke_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    graph = te.graphs.build("nasrnn")
    env = GraphRewriteEnv("nasrnn", horizon=3)
    env.reset(seed=0)
    real_step = dream_env.Dream.step
    config = ControllerTrainConfig(updates=1, ppo=PPOConfig(num_dreams=4, rollout_steps=2, minibatches=1, epochs=1))
    for touch in (lambda: graph.candidates(), lambda: env.step(np.array([env.n_rules, 0])),
                  lambda: GraphRewriteEnv("nasrnn")):
        def impure(self, actions, touch=touch):
            touch()
            return real_step(self, actions)

        monkeypatch.setattr(dream_env.Dream, "step", impure)
        with pytest.raises(RealWorkForbiddenError, match="dream"):
            train_controller(copy, config, restart=True)
    monkeypatch.setattr(dream_env.Dream, "step", real_step)
    assert train_controller(copy, config, restart=True)["real_work_units_during_training"] == 0


def test_iterative_training_collects_with_the_controller_and_retrains_v_and_m(smoke_run, tmp_path):
    """A second World-Models round: real episodes played by the controller are appended
    to the rollouts, V resumes, M retrains on V's new latents, the controller trains on;
    the learning curve gets one point per round."""
    import shutil

    from controller.iterative import iterate
    from controller.ppo import PPOConfig
    from controller.training import ControllerTrainConfig
    from rlflow.pipeline import run_stage
    from taso_env.env.rollouts import RolloutReader

    run, _ = smoke_run
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    before = RolloutReader(copy / "rollouts.h5").total_steps()
    config = ControllerTrainConfig(updates=2, ppo=PPOConfig(num_dreams=4, rollout_steps=2, minibatches=1, epochs=1))
    result = iterate(copy, config, iterations=2, episodes_per_iteration=2, restart=True, run_stage=run_stage)
    assert len(result["rounds"]) == 2 and result["rounds"][1]["collected_real_steps"] >= 2
    assert RolloutReader(copy / "rollouts.h5").total_steps() == before + result["rounds"][1]["collected_real_steps"]
    assert json.loads((copy / "vae" / "config.json").read_text())["training"]["steps"] == 20  # resumed, twice
    curve = json.loads((copy / "controller" / "curve.json").read_text())
    assert [p["real_env_steps"] for p in curve] == [before, before + result["rounds"][1]["collected_real_steps"]]
    assert all(p["mean_speedup"] >= 1.0 for p in curve)
