"""The model zoo of data/models/ (exported by benchmarks/export_zoo.py): the whole zoo is
there and every file loads with no opaque op. (tests/test_onnx_io.py checks every
shipped file against onnxruntime: reference executor and export round trip.)"""

import collections
from pathlib import Path

import pytest

import taso_env as te

MODELS = Path(__file__).resolve().parent.parent / "data" / "models"
ZOO = sorted(MODELS.glob("*.onnx"))


def test_the_zoo_is_complete():
    want = {"resnet18", "resnet50", "squeezenet1_1", "inception_v3", "mobilenet_v2", "mobilenet_v3_large",
            "efficientnet_b0", "densenet121", "convnext_tiny", "vit_b_16", "bert_base"}
    assert want <= {p.stem for p in ZOO}


@pytest.mark.parametrize("path", ZOO, ids=[p.stem for p in ZOO])
def test_zoo_model_loads_without_opaque_ops(path):
    g = te.load_onnx(path)
    opaque = collections.Counter(o.attrs.get("onnx_op_type") for o in g.ops if o.type == "Opaque")
    assert not opaque, f"{path.stem}: opaque ops {dict(opaque)}"
