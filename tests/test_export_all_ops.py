"""Export covers every modelled op: graphs exported to ONNX compute in onnxruntime what
the numpy reference executor computes — for an all-ops graph and every builder."""

import pytest
from graph_fixtures import all_ops_graph

import taso_env as te
from taso_env.onnx.check import round_trip_check


def _compare(g: te.Graph):
    report = round_trip_check(g, seed=7)
    assert report.ok, f"{g.name}: {report}"
    assert report.checked_against == "the numpy reference executor"


def test_all_ops_graph_uses_every_modelled_op_type():
    from taso_env import _core

    used = {o.type for o in all_ops_graph().ops}
    assert used == set(_core.list_op_types()) - {"Opaque"}


def test_all_ops_graph_exports_and_matches_the_reference_executor():
    g = all_ops_graph()
    model = g.export_onnx()
    assert model.opset_import[0].version == 20  # Gelu needs opset 20
    _compare(g)


@pytest.mark.parametrize("name", te.graphs.names())
def test_builder_graph_exports_and_matches_the_reference_executor(name):
    kwargs = {"num_layers": 2} if name == "bert_base" else {}
    if name == "vit_base":
        kwargs = {"num_layers": 2}
    _compare(te.graphs.build(name, **kwargs))
