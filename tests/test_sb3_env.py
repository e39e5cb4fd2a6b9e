"""The env under standard RL libraries: stable-baselines3's and gymnasium's checkers on
every form of the env, and sb3-contrib's MaskablePPO training through
examples/maskable_ppo.py.

Skipped where stable-baselines3 / sb3-contrib are not installed (the main test
environment has TensorFlow and no torch); .ci/run builds a fresh `pip install ".[env]"`
environment with them, without TensorFlow, and runs this file there.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

if "tensorflow" in sys.modules:  # torch after TensorFlow can crash the process (docs/env.md)
    pytest.skip("TensorFlow is already imported in this process", allow_module_level=True)
pytest.importorskip("sb3_contrib")

import gymnasium  # noqa: E402
import numpy as np  # noqa: E402
from gymnasium.utils.env_checker import check_env as gymnasium_check_env  # noqa: E402
from stable_baselines3.common.env_checker import check_env as sb3_check_env  # noqa: E402

from taso_env.env.episode import run_episode  # noqa: E402
from taso_env.env.policies import GreedyPolicy  # noqa: E402
from taso_env.env.rewrite_env import FlatCandidateActions, GraphRewriteEnv  # noqa: E402

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "maskable_ppo.py"


def _example():
    spec = importlib.util.spec_from_file_location("maskable_ppo_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


FORMS = {
    "hierarchical": lambda: GraphRewriteEnv("nasrnn", horizon=8),
    "hierarchical_two_graphs": lambda: GraphRewriteEnv(["squeezenet", "nasbench"], horizon=8),
    "flat_by_cost_delta": lambda: FlatCandidateActions(GraphRewriteEnv("nasrnn", horizon=8)),
    "flat_by_rule": lambda: FlatCandidateActions(GraphRewriteEnv("squeezenet", horizon=8), order="rule"),
    "flat_filtered": lambda: gymnasium.wrappers.FilterObservation(
        FlatCandidateActions(GraphRewriteEnv("nasrnn", horizon=8)), ["candidates", "globals"]),
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_sb3_and_gymnasium_checkers_pass(form):
    env = FORMS[form]()
    sb3_check_env(env, warn=False)
    gymnasium_check_env(env.unwrapped if form.startswith("hierarchical") else env, skip_render_check=True)


def test_maskable_ppo_example_trains_and_plays_masked_actions_only():
    example = _example()
    result = example.main(["--graph", "nasrnn", "--steps", "1024", "--horizon", "16", "--seed", "0"])
    assert result["train_steps"] == 1024
    # every action the trained, random and greedy players took was valid under the mask
    assert result["invalid_actions"] == {"maskable_ppo": 0, "random": 0, "greedy": 0}
    # the example's "greedy" (flat action 0 while it improves) is the env's greedy policy
    env = GraphRewriteEnv("nasrnn", horizon=16)
    greedy = run_episode(env, GreedyPolicy(env), seed=0, record=False).metrics["speedup"]
    assert result["greedy"] == pytest.approx(greedy, rel=1e-9)
    assert 1.0 < result["random"] < greedy
    assert np.isfinite(result["maskable_ppo"]) and result["maskable_ppo"] > 0
