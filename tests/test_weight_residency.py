"""The table model's weight-residency term (taso/weight_residency.h): GEMVs read their
weights cold once the distinct weights a run's GEMVs read pass 22-30 MiB. Graph and op
costs include it, charged to the GEMVs; every candidate's cost delta stays the applied
graph's cost less its parent's, to the unit, though the term is global; carried-over
candidates (step, successors) are priced against each new graph's reads."""

import random

import numpy as np
import pytest

import taso_env as te
from taso_env.engine.cost_model import CostModelError, make_cost_model, weight_residency
from taso_env.engine.search import enumeration, step, successors
from taso_env.gpu import cost_table
from taso_env.gpu.cost_models import TableCostModel, table_path

MiB = 2**20
TABLE = "table+residency:h100_fp32"


@pytest.fixture(scope="module")
def model():
    return make_cost_model(TABLE)


@pytest.fixture(scope="module")
def table_alone():
    """The same table without the term."""
    return TableCostModel(table_path("h100_fp32"), weight_residency=False)


@pytest.fixture(scope="module")
def nasrnn_graphs():
    """nasrnn and its random rewrites (as the measured ranking dumps have them), by the
    distinct weight bytes their GEMVs read."""
    g0 = te.graphs.build("nasrnn", seed=None)
    graphs = [g0] + cost_table.random_rewrites(g0, 30, seed=0)
    return sorted(graphs, key=lambda g: weight_residency(g)["distinct_bytes"])


def _over(graphs, lo_mib, hi_mib):
    """The first graph whose GEMVs read between lo and hi MiB of distinct weights."""
    return next(g for g in graphs if lo_mib * MiB < weight_residency(g)["distinct_bytes"] < hi_mib * MiB)


def _units(model, graph) -> int:
    return model._model.graph_cost_units(graph._core)


def test_the_term_is_priced_only_where_asked(model, table_alone):
    assert model._model.prices_weight_residency and model.name.endswith("+residency")
    assert not table_alone._model.prices_weight_residency
    assert not make_cost_model("table:h100_fp32")._model.prices_weight_residency  # search's default
    assert not make_cost_model("analytic")._model.prices_weight_residency
    with pytest.raises(CostModelError, match="table\\+residency"):
        make_cost_model("table+residency:")


def test_a_heavily_merged_nasrnn_prices_its_gemvs_cold_and_the_original_does_not(model, table_alone, nasrnn_graphs):
    original = te.graphs.build("nasrnn", seed=None)
    assert weight_residency(original)["distinct_bytes"] == 16 * MiB
    assert model.op_costs(original) == table_alone.op_costs(original)
    merged = _over(nasrnn_graphs, 30, 1000)
    reads = weight_residency(merged)["reads"]
    assert len(reads) > 20
    cold, hot = model.op_costs(merged), table_alone.op_costs(merged)
    for op, (nbytes, share) in reads.items():
        assert merged.ops[op].type in ("MatMul", "Gemm") and nbytes >= MiB  # nasrnn's weights: [512, 512] and merges
        assert cold[op] > hot[op] and cold[op] - hot[op] == pytest.approx(share, abs=2e-12)
    assert all(cold[i] == hot[i] for i in range(len(cold)) if i not in reads)
    # every GEMV read charged at its weight's full cold extra: 0.41-1.94 us
    assert all(0.4e-3 < share < 2e-3 for _, share in reads.values())


def test_op_costs_sum_to_the_graph_cost_with_the_term_active(model, table_alone, nasrnn_graphs):
    for graph in (_over(nasrnn_graphs, 22, 30), _over(nasrnn_graphs, 30, 1000)):
        costs = model.op_costs(graph)
        assert _units(model, graph) == sum(round(c / 1e-12) for c in costs)
        term = weight_residency(graph)["term_ms"]
        assert 0 < term and _units(model, graph) - _units(table_alone, graph) == round(term / 1e-12)
        # an enumeration's op costs (read from its facts) are the model's, term included
        assert np.array_equal(enumeration(graph, model=model).op_costs(), np.asarray(costs, dtype=np.float64))


@pytest.mark.parametrize("mib", [(20, 22), (22, 30), (30, 1000)], ids=["hot", "ramp", "cold"])
def test_every_candidates_delta_is_the_applied_graphs_cost_difference(model, nasrnn_graphs, mib):
    graph = _over(nasrnn_graphs, *mib)  # (hot: 21 MiB, a merge away from the ramp)
    base = _units(model, graph)
    cands = graph.candidates(model=model)
    moving = 0
    for c in cands:
        child = graph.apply(c)
        assert _units(model, child) - base == round(c.cost_delta / 1e-12), c.rule_name
        moving += weight_residency(child)["term_ms"] != weight_residency(graph)["term_ms"]
    assert moving >= 10  # rewrites that move the term (merges: new folded weights)


@pytest.mark.parametrize("start", [0, 1, 2], ids=["hot", "ramp", "cold"])
def test_steps_equal_full_enumerations_along_random_walks_on_nasrnn(model, nasrnn_graphs, start):
    graph = [nasrnn_graphs[0], _over(nasrnn_graphs, 22, 30), _over(nasrnn_graphs, 30, 1000)][start]
    for seed in range(2):
        rng = random.Random(seed)
        enum = enumeration(graph, model=model)
        for _ in range(12):
            after = step(enum, rng.randrange(len(enum.candidates)))
            full = enumeration(after.graph, model=model)
            assert [(c.rule_id, c.location, c.cost_delta) for c in after.candidates] == \
                   [(c.rule_id, c.location, c.cost_delta) for c in full.candidates]
            assert sorted(after.cycle_rejected()) == sorted(full.cycle_rejected())
            enum = after


def test_successors_price_carried_candidates_against_each_successors_reads(model, nasrnn_graphs):
    graph = _over(nasrnn_graphs, 22, 30)
    enum = enumeration(graph, model=model)
    which = list(range(0, len(enum.candidates), 7))
    for k, after in zip(which, successors(enum, which)):
        child = graph.apply(enum.candidates[k])
        deltas = [c.cost_delta for c in child.candidates(model=model)]
        assert after.best_delta == pytest.approx(min(deltas), abs=1e-13), enum.candidates[k].rule_name


def _weight_cone_rewritten_under_a_merge() -> te.Graph:
    """x reads three 8 MiB weights by GEMVs (24 MiB: inside the ramp); the first weight is
    w1 transposed three times, then Relu and Tanh four times over. Cancelling a pair of
    the transposes changes the value hash of the last Tanh, too far below the rewrite to
    be near it, where nothing else changes: the merge of the first two MatMuls, carried
    over, must list its reads again (its footprint holds that Tanh)."""
    b = te.GraphBuilder("weight_cone")
    x = b.input("x", [1, 1024])
    w1 = b.transpose(b.transpose(b.transpose(b.weight("w1", [2048, 1024]), [1, 0]), [1, 0]), [1, 0])
    for _ in range(4):
        w1 = b.tanh(b.relu(w1))
    first = b.matmul(x, w1)
    second = b.matmul(x, b.weight("w2", [1024, 2048]))
    third = b.matmul(b.relu(x), b.weight("w3", [1024, 2048]))
    b.output(b.add(b.add(first, second), third), "y")
    return b.build()


def test_a_carried_candidate_reads_the_weights_a_rewrite_upstream_in_their_cone_renamed(model):
    graph = _weight_cone_rewritten_under_a_merge()
    assert weight_residency(graph)["distinct_bytes"] == 24 * MiB
    enum = enumeration(graph, model=model)
    names = {c.rule_name for c in enum.candidates}
    assert {"cancel_transpose_pair", "merge_parallel_matmuls"} <= names
    for k in range(len(enum.candidates)):
        after = step(enum, k)
        full = enumeration(after.graph, model=model)
        assert [(c.rule_id, c.location, c.cost_delta) for c in after.candidates] == \
               [(c.rule_id, c.location, c.cost_delta) for c in full.candidates], enum.candidates[k].rule_name
        base = _units(model, after.graph)
        for c in after.candidates:
            assert _units(model, after.graph.apply(c)) - base == round(c.cost_delta / 1e-12), c.rule_name
