"""GraphRewriteEnv: Gymnasium conformance, masks, stop, horizon, invalid actions, reward
arithmetic against the cost model, determinism."""

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import taso_env as te
from taso_env.env import features
from taso_env.env.episode import run_episode
from taso_env.env.policies import GreedyPolicy, RandomPolicy
from taso_env.env.rewrite_env import EnvConfig, FlatCandidateActions, GraphRewriteEnv, InvalidActionError
from taso_env.errors import ConfigError


@pytest.mark.parametrize("graph", ["squeezenet", "nasrnn", "data/models/resnet18.onnx",
                                   ["squeezenet", "nasbench"]])
def test_check_env_passes(graph):
    env = GraphRewriteEnv(graph, horizon=8)
    check_env(env, skip_render_check=True)


def test_registered_with_gymnasium_make():
    env = gymnasium.make("taso_env/GraphRewrite-v0", graph="squeezenet", horizon=5)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    features.check_observation(obs)
    assert info["graph"] == "squeezenet"


def _valid_action(info, rng):
    return RandomPolicy()(None, info, rng)


def test_masks_match_candidates_and_stop_is_always_valid():
    env = GraphRewriteEnv("squeezenet", horizon=5, max_locations=4)
    _, info = env.reset(seed=0)
    n = env.n_rules
    assert info["xfer_mask"].shape == (n + 1,) and info["xfer_mask"][n]
    assert info["location_mask"].shape == (n + 1, 4)
    cands = env.graph.candidates()
    for r in range(n):
        count = min(sum(c.rule_id == r for c in cands), 4)
        assert info["xfer_mask"][r] == (count > 0)
        assert info["location_mask"][r].sum() == count
        assert info["location_mask"][r, :count].all()


def test_lazy_observations_hold_what_eager_ones_do_computed_when_first_read():
    eager = GraphRewriteEnv("nasrnn", horizon=6)
    lazy = GraphRewriteEnv("nasrnn", horizon=6, lazy_observations=True)
    pairs = [(eager.reset(seed=0)[0], lazy.reset(seed=0)[0])]
    rng = np.random.default_rng(0)
    for _ in range(5):
        action = _valid_action(eager._info(), rng)
        pairs.append((eager.step(action)[0], lazy.step(action)[0]))
    for want, got in pairs:
        assert isinstance(got, features.LazyObservation) and got._obs is None  # nothing computed yet
        assert set(got) == set(want) == set(features.FIELDS)
        for name in features.FIELDS:
            np.testing.assert_array_equal(got[name], want[name])
        features.check_observation(got)


def test_a_looked_at_successor_is_built_once_and_reused_by_the_step_that_takes_it():
    """`successor_enumeration(i)` is what `search.step` gives for candidate i; asked again,
    or taken by `step`, it is not built again (one engine step in all), and the next graph
    starts afresh."""
    from taso_env.engine import real_work, search

    env = GraphRewriteEnv("data/models/squeezenet1_1.onnx", horizon=10)
    _, info = env.reset(seed=0)
    xfer = int(np.flatnonzero(info["xfer_mask"][:-1])[0])
    which = env.candidate_index(xfer, 0)
    fresh = search.step(env.enumeration(), which)
    before = real_work.counts()
    child = env.successor_enumeration(which)
    assert env.successor_enumeration(which) is child
    assert child.candidates == fresh.candidates and child.graph.hash() == fresh.graph.hash()
    env.step(np.array([xfer, 0]))
    assert env.graph is child.graph and env.enumeration() is child
    assert real_work.since(before)["step"] == 1
    assert env.successor_enumeration(0) is not env.successor_enumeration(1)


def test_reward_is_the_runtime_change_relative_to_the_start():
    env = GraphRewriteEnv("data/models/squeezenet1_1.onnx", horizon=10)
    _, info = env.reset(seed=0)
    rt0 = env.graph.cost()
    assert info["initial_cost"] == pytest.approx(rt0)
    rng = np.random.default_rng(0)
    total = 0.0
    for _ in range(5):
        before = env.graph.cost()
        action = _valid_action(info, rng)
        cand = env.candidates(int(action[0]))[int(action[1])]
        _, reward, terminated, truncated, info = env.step(action)
        after = env.graph.cost()
        assert reward == pytest.approx(100 * (before - after) / rt0)
        assert after - before == pytest.approx(cand.cost_delta, abs=1e-9)
        assert info["cost"] == pytest.approx(after)
        total += reward
        if terminated or truncated:
            break
    assert total == pytest.approx(100 * (rt0 - env.graph.cost()) / rt0)


def test_stop_terminates_and_horizon_truncates():
    env = GraphRewriteEnv("squeezenet", horizon=3)
    _, info = env.reset(seed=0)
    _, reward, terminated, truncated, _ = env.step(np.array([env.n_rules, 0]))
    assert terminated and not truncated and reward == 0.0
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    flags = []
    for _ in range(3):
        _, _, terminated, truncated, info = env.step(_valid_action(info, rng))
        flags.append((terminated, truncated))
    assert flags[-1] == (False, True) and info["truncated_reason"] == "horizon"
    assert not any(t for t, _ in flags)


def test_terminates_when_no_candidate_is_left():
    b = te.GraphBuilder("tiny")
    x = b.input("x", [4])
    b.output(b.op("Identity", [x]), "y")
    env = GraphRewriteEnv(b.build(), horizon=5)
    _, info = env.reset(seed=0)
    assert info["xfer_mask"].sum() == 2  # remove_identity and stop
    _, _, terminated, truncated, info = env.step(np.array([te.rules.default().id_of("remove_identity"), 0]))
    assert terminated and not truncated and info["num_candidates"] == 0


def test_invalid_actions_are_penalised_or_raise_but_never_crash():
    env = GraphRewriteEnv("squeezenet", horizon=5, invalid_penalty=-2.0)
    _, info = env.reset(seed=0)
    bad_xfer = int(np.flatnonzero(~info["xfer_mask"])[0])
    cost = env.graph.cost()
    for action in ([bad_xfer, 0], [0, 127], [-1, 0], [10_000, 3]):
        _, reward, terminated, truncated, info = env.step(np.array(action))
        assert reward == -2.0 and info["invalid_action"] and not terminated
        assert env.graph.cost() == cost
    assert not truncated  # 4 of 5 steps taken
    strict = GraphRewriteEnv("squeezenet", horizon=5, invalid_action="raise")
    strict.reset(seed=0)
    with pytest.raises(InvalidActionError, match="not valid"):
        strict.step(np.array([bad_xfer, 0]))
    with pytest.raises(InvalidActionError, match="shape"):
        strict.step(np.array([1, 2, 3]))


def test_deterministic_for_a_seed():
    env = GraphRewriteEnv(["squeezenet", "nasrnn", "nasbench"], horizon=6)
    a = run_episode(env, RandomPolicy(), seed=7)
    b = run_episode(env, RandomPolicy(), seed=7)
    assert a.metrics["graph"] == b.metrics["graph"]
    assert [x.tolist() for x in a.actions] == [x.tolist() for x in b.actions]
    assert a.rewards == b.rewards
    for oa, ob in zip(a.observations, b.observations):
        for k in features.FIELDS:
            np.testing.assert_array_equal(oa[k], ob[k])


def test_greedy_episode_matches_greedy_search():
    env = GraphRewriteEnv("data/models/squeezenet1_1.onnx", horizon=60)
    ep = run_episode(env, GreedyPolicy(env), seed=0)
    search = te.search(te.graphs.load("data/models/squeezenet1_1.onnx"), "greedy")
    assert ep.metrics["final_cost"] == pytest.approx(search.final_cost)
    assert ep.metrics["return"] == pytest.approx(100 * (1 - search.final_cost / search.initial_cost))


def test_observation_describes_the_graph():
    env = GraphRewriteEnv("data/models/resnet18.onnx", horizon=5)
    obs, _ = env.reset(seed=0)
    g = env.graph
    n, e = features.count(obs, "n_node"), features.count(obs, "n_edge")
    assert n == len(g.ops) and e == sum(len(o.inputs) for o in g.ops)
    types = obs["nodes"][:n, : features.NUM_OP_TYPES].argmax(1)
    assert [features.OP_TYPES[t] for t in types] == [o.type for o in g.ops]
    assert not obs["nodes"][n:].any() and not obs["edges"][e:].any()
    conv = next(o for o in g.ops if o.type == "Conv2D")
    weight_edge = next(i for i in range(e) if obs["receivers"][i] == conv.id and obs["senders"][i] == conv.inputs[1].op)
    assert obs["edges"][weight_edge, 4] == pytest.approx(4 / 8)  # rank-4 weight
    np.testing.assert_allclose(obs["globals"], [1.0, 0.0, n / env.max_nodes], rtol=1e-6)


def test_observation_limit_truncates_instead_of_failing():
    env = GraphRewriteEnv(config=EnvConfig(graphs=("squeezenet",), horizon=50, max_nodes=92, max_edges=400))
    _, info = env.reset(seed=0)
    enlarge = te.rules.default().id_of("enlarge_conv_1x1_to_3x3")
    _, _, terminated, truncated, info = env.step(np.array([enlarge, 0]))
    assert truncated and info["truncated_reason"] == "observation limit"
    with pytest.raises(ValueError, match="horizon must be >= 1"):
        EnvConfig(horizon=0)


def test_flat_candidate_wrapper_orders_by_cost_delta_and_maps_actions_to_the_env():
    env = FlatCandidateActions(GraphRewriteEnv("nasrnn", horizon=5), max_candidates=64)
    obs, info = env.reset(seed=0)
    base = env.unwrapped
    mask = env.action_masks()
    assert mask.shape == (65,) and mask[-1] and np.array_equal(mask, info["action_mask"])
    offered = info["candidates"]
    assert len(offered) == int(mask[:-1].sum()) == 64  # nasrnn offers more than 64
    deltas = [base.candidates(r)[i].cost_delta for r, i in offered]
    assert deltas == sorted(deltas)  # best estimated first
    all_deltas = sorted(c.cost_delta for r in range(base.n_rules) for c in base.candidates(r))
    assert deltas == all_deltas[:64]  # the 64 best of every offered candidate
    # the candidates rows describe the actions: valid, delta (% of the start cost), rule, rank
    rows = obs["candidates"]
    assert rows.shape == (64, features.CANDIDATE_DIM) and env.observation_space.contains(obs)
    np.testing.assert_allclose(rows[:, 1], np.clip([100 * d / info["initial_cost"] for d in deltas], -100, 100) / 10,
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(rows[:, 4], [r / base.n_rules for r, _ in offered], rtol=1e-6)
    assert rows[:, 0].all() and (rows[:, 3] == (rows[:, 1] < 0)).all()
    # action 0 is the hierarchical action it names
    rule, location = offered[0]
    expected_cost = info["cost"] + base.candidates(rule)[location].cost_delta
    _, reward, terminated, _, info = env.step(0)
    assert not info["invalid_action"] and info["cost"] == pytest.approx(expected_cost, rel=1e-9)
    _, _, terminated, _, _ = env.step(64)
    assert terminated


def test_flat_wrapper_in_rule_order_keeps_the_env_order_and_counts_what_it_cuts():
    base = GraphRewriteEnv("nasrnn", horizon=5, max_locations=8)
    env = FlatCandidateActions(base, max_candidates=16, order="rule")
    _, info = env.reset(seed=0)
    assert info["candidates"] == sorted(info["candidates"])
    inner_cut = info["num_candidates"] - int(info["location_mask"].sum() - 1)  # less stop
    assert inner_cut > 0 and base._info()["candidates_dropped"] == inner_cut
    assert info["candidates_dropped"] == info["num_candidates"] - 16


def test_flat_wrapper_rejects_bad_settings_and_handles_invalid_actions():
    with pytest.raises(ConfigError):
        FlatCandidateActions(GraphRewriteEnv("squeezenet", horizon=5), max_candidates=0)
    with pytest.raises(ConfigError):
        FlatCandidateActions(GraphRewriteEnv("squeezenet", horizon=5), order="random")
    env = FlatCandidateActions(GraphRewriteEnv("data/models/squeezenet1_1.onnx", horizon=5), max_candidates=600)
    _, info = env.reset(seed=0)
    unused = len(info["candidates"])
    assert not env.action_masks()[unused]
    _, reward, terminated, truncated, info = env.step(unused)
    assert info["invalid_action"] and reward == -1.0 and not terminated


def test_flat_wrapper_passes_gymnasium_check_and_records_its_arguments():
    env = FlatCandidateActions(GraphRewriteEnv("nasrnn", horizon=6), max_candidates=32, order="rule")
    check_env(env.unwrapped, skip_render_check=True)
    check_env(env, skip_render_check=True)
    spec_kwargs = env._saved_kwargs
    assert spec_kwargs == {"max_candidates": 32, "order": "rule"}


def test_default_horizon_lets_greedy_finish_on_nasrnn():
    env = GraphRewriteEnv("nasrnn")
    episode = run_episode(env, GreedyPolicy(env), seed=0, record=False)
    assert episode.metrics["steps"] == 57  # 56 improving rewrites, then stop
    assert episode.terminations[-1] and not episode.truncations[-1]


def test_counts_have_shape_one_for_standard_rl_libraries():
    env = GraphRewriteEnv("squeezenet", horizon=3)
    obs, _ = env.reset(seed=0)
    assert obs["n_node"].shape == (1,) and obs["n_edge"].shape == (1,)
    assert features.count(obs, "n_node") == features.graph_size(env.graph)[0]
    bad = dict(obs, n_node=np.array([1, 2], np.int32))
    with pytest.raises(ValueError, match="n_node"):
        features.check_observation(bad)


def test_random_xfer_best_location_policy_takes_the_best_location_of_a_valid_xfer():
    from taso_env.env.policies import make_policy

    env = GraphRewriteEnv("data/models/squeezenet1_1.onnx", horizon=5)
    policy = make_policy("random_best_location", env)
    _, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(5):
        xfer, loc = policy(None, info, rng)
        assert info["xfer_mask"][xfer]
        deltas = [c.cost_delta for c in env.candidates(int(xfer))]
        assert deltas[loc] == min(deltas)
        _, _, terminated, truncated, info = env.step(np.array([xfer, loc]))
        if terminated or truncated:
            break
