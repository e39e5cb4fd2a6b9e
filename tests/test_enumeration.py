"""Carrying a graph's candidates through a rewrite (taso_env.engine.search.step): the new
graph's candidates, found by enumerating only near the rewritten ops, equal a full
enumeration of it (rules, locations, bindings, cost deltas and order), and so do the
bindings it rejects only for closing a cycle."""

import random
from pathlib import Path

import numpy as np
import pytest

import taso_env as te
from taso_env.engine import real_work
from taso_env.engine.search import enumeration, step
from taso_env.env.rewrite_env import GraphRewriteEnv

TABLE = "table:h100_fp32"
COVERAGE = Path(__file__).resolve().parent.parent / "data" / "models" / "coverage"
MODELS = COVERAGE.parent


def _listed(enum) -> tuple[list, list]:
    return ([(c.rule_id, c.location, c.cost_delta) for c in enum.candidates], sorted(enum.cycle_rejected()))


def _walk_and_compare(graph: te.Graph, model: str, steps: int, seed: int) -> int:
    """Random rewrites from `graph`, each new graph's carried enumeration compared with a
    full one; the steps checked."""
    rng = random.Random(seed)
    enum = enumeration(graph, model=model)
    checked = 0
    for _ in range(steps):
        if not enum.candidates:
            break
        after = step(enum, rng.randrange(len(enum.candidates)))
        assert _listed(after) == _listed(enumeration(after.graph, model=model)), (graph.name, checked)
        enum, checked = after, checked + 1
    return checked


@pytest.mark.parametrize("spec", ["nasrnn", "squeezenet1_1", "inception_v3", "nasbench", str(MODELS / "bert_base.onnx"),
                                  str(COVERAGE / "t5_small_encoder.onnx"), str(COVERAGE / "qwen2_small.onnx")])
@pytest.mark.parametrize("model", [TABLE, "analytic"])
def test_a_carried_enumeration_equals_a_full_one_along_random_walks(spec, model):
    graph = te.graphs.load(spec) if "/" not in spec else te.load_onnx(spec)
    assert sum(_walk_and_compare(graph, model, steps=12, seed=seed) for seed in range(2)) >= 20


@pytest.mark.parametrize("spec, model", [(str(COVERAGE / "albert_base.onnx"), TABLE),
                                         ("nasrnn", "table+residency:h100_fp32")])
def test_a_carried_enumeration_equals_a_full_one_where_every_layer_reads_the_same_weights(spec, model):
    # ALBERT's layers share their weights and nasrnn's cells their input and weights: a
    # rewrite changes the readers of those, which no carried candidate is priced again
    # for (a source or constant op's readers decide nothing: rule_internal.h), while the
    # weight-residency term prices what the GEMVs read
    graph = te.graphs.load(spec) if "/" not in spec else te.load_onnx(spec)
    assert sum(_walk_and_compare(graph, model, steps=10, seed=seed) for seed in range(2)) >= 16


def _merge_closing_a_cycle() -> te.Graph:
    """Two MatMuls of x whose merge would close a cycle (the second's weight is made from
    the first's output), beside a pair that merges, and a Relu chain to rewrite."""
    b = te.GraphBuilder("cycle_merge")
    x = b.input("x", [16, 16])
    a = b.matmul(x, b.weight("w1", [16, 16]))
    w2 = b.relu(b.relu(a))
    c = b.matmul(x, w2)
    d = b.matmul(x, b.weight("w3", [16, 16]))
    b.output(b.add(b.add(a, c), d), "y")
    return b.build()


def test_bindings_rejected_for_a_cycle_are_carried_and_checked_again():
    graph = _merge_closing_a_cycle()
    enum = enumeration(graph)
    assert enum.cycle_rejected(), "the merge of the first two MatMuls closes a cycle"
    for seed in range(6):
        assert _walk_and_compare(graph, "analytic", steps=6, seed=seed) >= 1


def _dead_chain_beside_a_second_match() -> te.Graph:
    """Mul(Div(a, c), Mul(b, c)) => Mul(a, b) twice: the first's c is the end of a chain
    Tanh(Tanh(q)) that only it reads (its rewrite kills the chain), and q is also the
    second's c, so rewriting the second leaves q read by the chain alone: the first's
    rewrite then kills q too, though q is several hops from its ops."""
    b = te.GraphBuilder("dead_chain")
    q = b.relu(b.input("x", [8, 8]))

    def divided_and_multiplied(name: str, c: te.Tensor) -> te.Tensor:
        a, other = b.input(f"a{name}", [8, 8]), b.input(f"b{name}", [8, 8])
        return b.mul(b.op("Div", [a, c]), b.mul(other, c))

    b.output(divided_and_multiplied("1", b.tanh(b.tanh(q))), "y1")
    b.output(divided_and_multiplied("2", q), "y2")
    return b.build()


@pytest.mark.parametrize("model", [TABLE, "analytic"])
def test_a_carried_candidate_is_priced_again_when_the_rewrite_changes_what_its_rewrite_kills(model):
    graph = _dead_chain_beside_a_second_match()
    enum = enumeration(graph, model=model)
    assert len(enum.candidates) > 1
    for k in range(len(enum.candidates)):
        after = step(enum, k)
        assert _listed(after) == _listed(enumeration(after.graph, model=model)), k


def _target_input_made_constant_by_a_rewrite() -> te.Graph:
    """Mul(Div(a, c), Mul(b, c)) => Mul(a, b) twice: the first's a and b are weights and
    its c an input, so its rewrite makes k = Relu(first) constant; the second reads k
    (as its b, beside an input c), so the Mul(a, k) it plans turns constant while its own
    ops do not."""
    b = te.GraphBuilder("constant_after_rewrite")

    def divided_and_multiplied(a: te.Tensor, other: te.Tensor, c: te.Tensor) -> te.Tensor:
        return b.mul(b.op("Div", [a, c]), b.mul(other, c))

    k = b.relu(divided_and_multiplied(b.weight("a1", [8, 8]), b.weight("b1", [8, 8]), b.input("x", [8, 8])))
    b.output(divided_and_multiplied(b.weight("a2", [8, 8]), k, b.input("x2", [8, 8])), "y")
    return b.build()


@pytest.mark.parametrize("model", [TABLE, "analytic"])
def test_a_carried_candidate_is_planned_again_where_a_tensor_its_target_reads_turned_constant(model):
    graph = _target_input_made_constant_by_a_rewrite()
    enum = enumeration(graph, model=model)
    for k in range(len(enum.candidates)):
        after = step(enum, k)
        assert _listed(after) == _listed(enumeration(after.graph, model=model)), k


@pytest.mark.parametrize("model", [TABLE, "analytic"])
def test_nasrnn_steps_equal_full_enumerations_where_every_cell_reads_the_same_tensors(model):
    # nasrnn's cells read one input Split and share their weights: every op is a few
    # hops from every rewrite, so a step carries candidates right beside the change.
    enum = enumeration(te.graphs.load("nasrnn"), model=model)
    for _ in range(30):
        best = min(range(len(enum.candidates)), key=lambda k: enum.candidates[k].cost_delta)
        picks = {best, len(enum.candidates) // 2, len(enum.candidates) - 1}
        for k in sorted(picks):
            after = step(enum, k)
            assert _listed(after) == _listed(enumeration(after.graph, model=model)), k
        if enum.candidates[best].cost_delta >= 0:
            break
        enum = step(enum, best)


def test_a_step_is_one_apply_and_one_enumeration_of_real_work_and_refuses_a_bad_index():
    graph = te.graphs.load("squeezenet1_1")
    enum = enumeration(graph)
    before = real_work.counts()
    after = step(enum, 0)
    work = real_work.since(before)
    assert work["step"] == 1 and real_work.enumerations(work) == 1
    assert after.graph.hash() == graph.apply(enum.candidates[0]).hash()
    with pytest.raises(IndexError, match="out of range"):
        step(enum, len(enum.candidates))
    with pytest.raises(IndexError):
        step(enum, -1)


def test_the_env_offers_each_rules_candidates_sorted_by_location_after_every_step():
    env = GraphRewriteEnv("inception_v3", horizon=20)
    obs, info = env.reset(seed=0)
    rng = np.random.default_rng(0)
    for _ in range(8):
        full = enumeration(env.graph, rules=env.rules, model=env.cost_model)
        offered = [c for r in range(env.n_rules) for c in env.candidates(r)]
        assert [(c.rule_id, c.location, c.cost_delta) for c in offered] == \
               [(c.rule_id, c.location, c.cost_delta) for c in full.candidates]
        xfers = np.flatnonzero(info["xfer_mask"][:-1])
        if not len(xfers):
            break
        xfer = int(rng.choice(xfers))
        obs, reward, terminated, truncated, info = env.step(np.array([xfer, rng.integers(len(env.candidates(xfer)))]))
        if terminated or truncated:
            break


@pytest.mark.parametrize("cost_model", ["table:h100_fp32", "analytic:h100"])
def test_an_enumeration_prices_its_graph_as_the_cost_model_does(cost_model):
    """Along a greedy walk (steps carried, not enumerated whole), the op costs an
    enumeration gives are exactly its cost model's, with fused steps or without."""
    from taso_env.engine.cost_model import make_cost_model

    model = make_cost_model(cost_model)
    enum = enumeration(te.graphs.load(str(COVERAGE / "t5_small_encoder.onnx")), model=model)
    for _ in range(12):
        assert np.array_equal(enum.op_costs(), np.asarray(model.op_costs(enum.graph), dtype=np.float64))
        best = min(range(len(enum.candidates)), key=lambda i: enum.candidates[i].cost_delta)
        enum = step(enum, best)
