"""Equality saturation (te.search(method="eqsat")): real egglog e-graph, the real C++
rules and engine, outputs checked in onnxruntime against the input."""

import pytest

import taso_env as te
from taso_env.engine.eqsat import EqsatArgumentError
from taso_env.onnx.check import check_equivalent, random_feeds

pytest.importorskip("egglog")


def _parallel_convs() -> te.Graph:
    """Two 3x3 convs reading one tensor (merge), each followed by a Relu (fusion)."""
    b = te.GraphBuilder("parallel", seed=0)
    x = b.input("x", [1, 8, 12, 12])
    y1 = b.relu(b.conv2d(x, 8, kernel=3, padding=1))
    y2 = b.relu(b.conv2d(x, 8, kernel=3, padding=1))
    b.output(b.concat([y1, y2], axis=1), "y")
    return b.build()


def _tiny() -> te.Graph:
    b = te.GraphBuilder("tiny", seed=0)
    x = b.input("x", [1, 4, 8, 8])
    b.output(b.relu(b.conv2d(x, 4, kernel=3, padding=1)), "y")
    return b.build()


def _equal(g, r):
    report = check_equivalent(g.export_onnx(), r.graph, random_feeds(g, 3))
    assert report.equivalent, report


def test_eqsat_improves_a_small_graph_and_output_equals_input():
    g = _parallel_convs()
    r = te.search(g, "eqsat", time_limit=5.0)
    assert r.method == "eqsat" and r.final_cost < r.initial_cost
    assert r.final_cost <= te.search(g, "greedy").final_cost + 1e-12
    assert abs(r.graph.cost() - r.final_cost) < 1e-9  # the reported cost is the real graph's
    assert r.graph.output_names == g.output_names
    assert r.details["rules_translated"] == len(te.rules.default())
    _equal(g, r)


def test_optimal_extraction_on_a_tiny_graph():
    g = _tiny()
    r = te.search(g, "eqsat", seed=None, polish=False)
    assert r.details["extraction"] == "optimal" and r.details["optimal"]
    assert r.details["stop"] == "saturated" and r.complete
    assert r.graph.op_type_counts() == {"Conv2D": 1}  # relu fused
    _equal(g, r)


def test_squeezenet_within_limits_and_equal_in_onnxruntime():
    g = te.graphs.build("squeezenet", seed=None)
    r = te.search(g, "eqsat", node_limit=600, time_limit=5.0)
    assert r.details["enodes"] <= 600 or r.details["iterations"] == 0
    assert r.details["stop"] in ("node limit", "saturated")
    assert r.final_cost <= r.initial_cost
    _equal(g, r)


def test_time_limit_stops_saturation():
    g = te.graphs.build("nasbench", seed=None)
    r = te.search(g, "eqsat", time_limit=0.5, seed=None, polish=False)
    assert r.details["stop"] in ("time limit", "node limit", "saturated")
    assert r.details["seconds_saturation"] < 0.5 + 3.0  # one query batch may finish
    assert r.final_cost <= r.initial_cost


def test_deterministic():
    g = _parallel_convs()
    a = te.search(g, "eqsat", time_limit=5.0)
    b = te.search(g, "eqsat", time_limit=5.0)
    assert a.graph.hash() == b.graph.hash() and a.final_cost == b.final_cost
    assert a.details["enodes"] == b.details["enodes"]


def test_generic_over_the_rule_set():
    specs = [s for s in te.rules.load_rule_specs() if s["name"] == "fuse_conv_relu"]
    one = te.rules.build_rule_set([dict(s, id=0) for s in specs])
    r = te.search(_parallel_convs(), "eqsat", rules=one, seed=None, polish=False)
    assert r.details["rules_translated"] == 1 and set(r.rule_fires) == {"fuse_conv_relu"}
    assert r.graph.op_type_counts()["Conv2D"] == 2 and "Relu" not in r.graph.op_type_counts()


@pytest.mark.parametrize("kwargs", [{"node_limit": 0}, {"time_limit": -1.0}, {"iter_limit": 1.5},
                                    {"seed": "annealing"}, {"optimal_limit": -3}, {"bogus": 1}])
def test_bad_arguments_are_typed_errors(kwargs):
    with pytest.raises((EqsatArgumentError, TypeError)) as info:
        te.search(_tiny(), "eqsat", **kwargs)
    if "bogus" not in kwargs:
        assert isinstance(info.value, ValueError) and "eqsat" in str(info.value)


def test_eqsat_options_refused_for_other_methods():
    with pytest.raises(ValueError, match="eqsat"):
        te.search(_tiny(), "greedy", time_limit=1.0)
