"""Search that scales: a rewrite's cost delta and child hash are computed without
building the child and equal what building it gives; incremental backtracking finds
exactly what the reference search (every child built) finds; its graph store stays
bounded; named rule sets."""

import random

import pytest
from conftest import MODELS

import taso_env as te
from taso_env.engine.search import core_cost_model
from taso_env.rules import RuleFormatError
from taso_env.rules.sets import is_generated, rule_set


def _walk_and_check(g: te.Graph, steps: int, seed: int) -> int:
    """Along a random walk, every candidate's effect equals its built child's."""
    rules, model = te.rules.default(), core_cost_model(None)
    rng, checked = random.Random(seed), 0
    for _ in range(steps):
        effects = rules.core.candidate_effects(g._core, model)
        plain = g.candidates()
        assert [(r, loc) for r, loc, *_ in effects] == [(c.rule_id, c.location) for c in plain]
        base = model.graph_cost_units(g._core)
        for (rule_id, loc, delta_units, child_hash), c in zip(effects, plain):
            child = rules.core.apply(g._core, rule_id, loc)
            assert child.hash() == child_hash, (c.rule_name, loc)
            assert model.graph_cost_units(child) == base + delta_units, (c.rule_name, loc)
            assert c.cost_delta == pytest.approx(delta_units * 1e-12, abs=1e-15)
            checked += 1
        if not plain:
            break
        g = g.apply(rng.choice(plain))
    return checked


@pytest.mark.parametrize("model", ["squeezenet1_1.onnx", "inception_v3", "efficientnet_b0.onnx"])
def test_rewrite_effects_equal_the_built_child(model):
    g = te.load_onnx(MODELS / model) if model.endswith(".onnx") else te.graphs.build(model, seed=None)
    assert _walk_and_check(g, 2, seed=1) > 50


def test_graph_hash_is_structural_whatever_the_op_order():
    g = te.load_onnx(MODELS / "resnet18.onnx")
    assert te.load_onnx(g.export_onnx()).hash() == g.hash()
    # the same rewrites applied in another order reach the same graph and hash
    a, b = [c for c in g.candidates() if c.rule_name == "fuse_conv_relu"][:2]
    one = g.apply(a)
    two = g.apply(b)
    b_again = next(c for c in one.candidates() if c.rule_name == "fuse_conv_relu" and
                   {one.ops[i].name for i in c.location} == {g.ops[i].name for i in b.location})
    a_again = next(c for c in two.candidates() if c.rule_name == "fuse_conv_relu" and
                   {two.ops[i].name for i in c.location} == {g.ops[i].name for i in a.location})
    assert one.apply(b_again).hash() == two.apply(a_again).hash() != g.hash()


@pytest.mark.parametrize("model,budget", [("squeezenet1_1.onnx", 40), ("resnet18", 30), ("nasrnn", 2)])
def test_incremental_backtracking_finds_exactly_what_the_reference_finds(model, budget):
    g = te.load_onnx(MODELS / model) if model.endswith(".onnx") else te.graphs.build(model, seed=None)
    fast = te.search(g, "backtracking", budget=budget)
    ref = te.search(g, "backtracking", budget=budget, incremental=False)
    assert fast.graph.hash() == ref.graph.hash()
    assert fast.final_cost == ref.final_cost and fast.applied == ref.applied
    assert (fast.expansions, fast.graphs_seen, fast.complete) == (ref.expansions, ref.graphs_seen, ref.complete)
    # the point: the reference builds every child, the incremental search one per expansion
    assert fast.graphs_built <= fast.expansions < ref.graphs_built
    assert fast.graph.cost() == pytest.approx(fast.final_cost)


def test_graph_store_stays_bounded_and_rebuilds_evicted_graphs():
    g = te.load_onnx(MODELS / "squeezenet1_1.onnx")
    small = te.search(g, "backtracking", budget=60, store_ops=1)  # the minimum: 4 graphs
    ref = te.search(g, "backtracking", budget=60, incremental=False)
    assert small.peak_graphs_stored <= 5 < small.expansions
    assert small.graphs_built > small.expansions  # evicted graphs were replayed
    assert small.graph.hash() == ref.graph.hash() and small.applied == ref.applied


def test_named_rule_sets(tmp_path):
    hand, full = rule_set("hand"), rule_set("all")
    assert len(hand) >= 82 and len(full) >= len(hand)
    assert hand.names() == [s["name"] for s in full.specs if not is_generated(s)]
    many = rule_set("replicated:200")
    assert len(many) == 200 and many.names()[:len(hand)] == hand.names()
    g = te.load_onnx(MODELS / "squeezenet1_1.onnx")
    n = len(g.candidates(rules=hand))
    assert len(g.candidates(rules=rule_set(f"replicated:{2 * len(hand)}"))) == 2 * n
    assert len(rule_set(str(te.rules.RULES_DIR))) == len(full)
    with pytest.raises(RuleFormatError, match="unknown rule set 'nope'"):
        rule_set("nope")
    with pytest.raises(RuleFormatError, match="must be an integer"):
        rule_set("replicated:x")
    with pytest.raises(RuleFormatError, match="no rule files"):
        rule_set(str(tmp_path))
