"""Import coverage beyond the evaluation zoo: data/models/coverage/ holds shape-only
exports of other torchvision classifiers and Hugging Face encoders (benchmarks/export_zoo.py,
see data/models/README.md). Each loads with no opaque op (RoBERTa: only its position-id
preprocessing, computed from the input ids), computes what onnxruntime computes on the
file itself, and its greedy-optimised graph still does."""

import collections
from pathlib import Path

import onnx
import pytest

import taso_env as te
from taso_env.onnx.check import check_equivalent, random_feeds

COVERAGE = sorted((Path(__file__).resolve().parent.parent / "data" / "models" / "coverage").glob("*.onnx"))

#: Opaque ops a file may keep: RoBERTa's position ids (Equal, Not, CumSum of the input ids).
PREPROCESSING = {"roberta_base": {"Equal", "Not", "CumSum", "GatherElements"}}


def test_the_coverage_set_spans_the_families():
    names = {p.stem for p in COVERAGE}
    assert {"swin_t", "swin_v2_t", "maxvit_t", "shufflenet_v2_x1_0", "googlenet", "regnet_y_400mf", "gpt2",
            "t5_small_encoder", "distilbert", "albert_base", "roberta_base", "bert_base_sdpa"} <= names


@pytest.mark.parametrize("path", COVERAGE, ids=[p.stem for p in COVERAGE])
def test_export_loads_modelled_and_optimises_equal_to_onnxruntime(path):
    g = te.load_onnx(path)
    opaque = collections.Counter(str(o.attrs["onnx_op_type"], "ascii") for o in g.ops if o.type == "Opaque")
    assert set(opaque) <= PREPROCESSING.get(path.stem, set()), f"{path.stem}: opaque ops {dict(opaque)}"
    feeds = random_feeds(g, 0)
    report = check_equivalent(onnx.load(str(path)), g, feeds)
    assert report.equivalent, f"{path.stem} as loaded: {report}"
    result = te.search(g, "greedy")
    report = check_equivalent(onnx.load(str(path)), result.graph, feeds)
    assert report.equivalent, f"{path.stem} after greedy ({result.rule_fires.most_common(3)}): {report}"
