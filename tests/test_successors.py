"""Looking one rewrite ahead (taso_env.engine.search.successors): each successor's hash
and best next cost delta, found by enumerating only the matches near the rewrite, equal
what building the successor and enumerating all of it gives."""

import random
from pathlib import Path

import pytest

import taso_env as te
from taso_env.engine import real_work
from taso_env.engine.search import enumeration, successors

TABLE = "table:h100_fp32"
COVERAGE = Path(__file__).resolve().parent.parent / "data" / "models" / "coverage"


def _walk(graph: te.Graph, steps: int, seed: int):
    """The enumeration of the graph after each of `steps` random rewrites (and before)."""
    rng = random.Random(seed)
    for _ in range(steps + 1):
        enum = enumeration(graph, model=TABLE)
        yield enum
        if not enum.candidates:
            return
        graph = graph.apply(enum.candidates[rng.randrange(len(enum.candidates))])


@pytest.mark.parametrize("name", ["nasrnn", "squeezenet1_1", "inception_v3", "bert_base", "nasbench", "resnet50",
                                  "mobilenet_v3_large"])
def test_successors_equal_a_full_enumeration_of_each_successor(name):
    rng = random.Random(1)
    checked = 0
    for enum in _walk(te.graphs.load(name), steps=3, seed=0):
        graph, cands = enum.graph, enum.candidates
        which = rng.sample(range(len(cands)), min(12, len(cands)))
        for k, after in zip(which, successors(enum, which)):
            child = graph.apply(cands[k])
            deltas = [c.cost_delta for c in child.candidates(model=TABLE)]
            assert after.child_hash == child.hash()
            if deltas:
                assert after.best_delta == pytest.approx(min(deltas), abs=1e-12), cands[k].rule_name
            else:
                assert after.best_delta is None
            checked += 1
    assert checked >= 24


@pytest.mark.parametrize("name", ["qwen2_small", "t5_small_encoder"])
def test_every_successor_of_a_transformer_equals_its_full_enumeration(name):
    """Where ops run in one another's steps, candidates a few hops from the rewrite are
    priced again, and a match found near it in another order than a full enumeration's
    (qwen2_small's three-way MatMul merge, bound (54, 62, 58) near a commuted Mul where
    the full enumeration keeps (58, 62, 54)) is priced as the binding that is kept."""
    graph = te.load_onnx(str(COVERAGE / f"{name}.onnx"))
    enum = enumeration(graph, model=TABLE)
    cands = enum.candidates
    for k, after in enumerate(successors(enum, range(len(cands)))):
        deltas = [c.cost_delta for c in graph.apply(cands[k]).candidates(model=TABLE)]
        assert after.best_delta == pytest.approx(min(deltas), abs=1e-12), (k, cands[k].rule_name)


def test_a_successor_with_no_candidates_has_none():
    b = te.GraphBuilder("two_relus")
    x = b.input("x", [1, 8, 4, 4])
    b.output(b.relu(b.relu(x)), "y")
    graph = b.build()
    enum = enumeration(graph, model=TABLE)
    cands = enum.candidates
    assert cands, "a double ReLU has a rewrite"
    for k, after in enumerate(successors(enum, range(len(cands)))):
        child = graph.apply(cands[k])
        assert (after.best_delta is None) == (not child.candidates(model=TABLE))


def test_successors_are_real_work_and_refuse_a_bad_index():
    enum = enumeration(te.graphs.load("squeezenet1_1"), model=TABLE)
    before = real_work.counts()
    successors(enum, [0, 1, 2])
    assert real_work.since(before)["successors"] == 3
    with pytest.raises(IndexError, match="out of range"):
        successors(enum, [len(enum.candidates)])
    with real_work.forbidden("a test"), pytest.raises(real_work.RealWorkForbiddenError):
        successors(enum, [0])
    with pytest.raises(TypeError, match="Enumeration"):
        successors(enum.graph, [0])
