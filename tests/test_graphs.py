"""Tests of the standard benchmark network builders (taso_env.graphs).

Expected op histograms and parameter counts are derived from the architectures:
resnet18 / resnet50 / squeezenet / bert_base match the parameter counts of the exported
ONNX models shipped in data/models (bert_base without its pooler); nasnet_a matches
Keras' NASNetMobile total, vit_base timm's vit_base_patch16_224, resnext50 and
inception_v3 torchvision's counts after BN folding. "params" counts the elements of
every float weight (integer index weights such as BERT's position ids are not counted;
the transformers' shared attention scale scalar is).
"""

from __future__ import annotations

import numpy as np
import pytest

import taso_env as te
from taso_env import dtypes
from taso_env.engine import reference
from taso_env.graphs import names
from taso_env.graphs.nasbench import DEFAULT_CELL, validate_cell, vertex_channels

ALL = ["bert_base", "inception_v3", "nasbench", "nasnet_a", "nasrnn", "resnet18", "resnet50",
       "resnext50", "squeezenet", "vit_base"]

EXPECTED_OPS = {
    # Conv2D 20 = stem + 16 in blocks + 3 downsample; 8 blocks: Add + Relu each.
    "resnet18": {"Conv2D": 20, "Add": 8, "Relu": 8, "MaxPool2D": 1, "GlobalAvgPool": 1,
                 "Flatten": 1, "Gemm": 1},
    # Conv2D 53 = stem + 16 blocks x 3 + 4 downsample.
    "resnet50": {"Conv2D": 53, "Add": 16, "Relu": 16, "MaxPool2D": 1, "GlobalAvgPool": 1,
                 "Flatten": 1, "Gemm": 1},
    "resnext50": {"Conv2D": 53, "Add": 16, "Relu": 16, "MaxPool2D": 1, "GlobalAvgPool": 1,
                  "Flatten": 1, "Gemm": 1},
    # Conv2D 26 = stem + 8 fires x 3 + classifier conv; ReLUs fused into the convs.
    "squeezenet": {"Conv2D": 26, "Concat": 8, "MaxPool2D": 3, "GlobalAvgPool": 1, "Flatten": 1},
    # Conv2D 94 = stem 5 + 3 x 7 (A) + 4 (B) + 4 x 10 (C) + 6 (D) + 2 x 9 (E);
    # Concat 15 = 11 modules + 2 x 2 inner concats of E; AvgPool 3 + 4 + 2; MaxPool 2 + B + D.
    "inception_v3": {"Conv2D": 94, "Concat": 15, "AvgPool2D": 9, "MaxPool2D": 4,
                     "GlobalAvgPool": 1, "Flatten": 1, "Gemm": 1},
    # Per layer: 8 MatMul (q, k, v, scores, context, out, ffn x2), 8 Add (6 biases,
    # 2 residuals), 4 Reshape, 4 Transpose, 2 LayerNorm; embeddings 3 Gather, 2 Add, 1 LN.
    "bert_base": {"Add": 98, "MatMul": 96, "Reshape": 48, "Transpose": 48, "LayerNorm": 25,
                  "Div": 12, "Softmax": 12, "Gelu": 12, "Gather": 3},
    # Blocks with the same ops as BERT's layers (8 MatMul, 8 Add, ...), plus the patch
    # embedding (Conv, Reshape, Transpose), class token Concat, position Add, Gather, Gemm.
    "vit_base": {"Add": 97, "MatMul": 96, "Reshape": 49, "Transpose": 49, "LayerNorm": 25,
                 "Div": 12, "Softmax": 12, "Gelu": 12, "Conv2D": 1, "Concat": 1, "Gather": 1,
                 "Gemm": 1},
    # 5 steps x (16 MatMul, 11 Add, 8 Tanh, 5 Sigmoid, 4 Mul, 2 Relu, 1 Reshape) + Split.
    "nasrnn": {"MatMul": 80, "Add": 55, "Tanh": 40, "Sigmoid": 25, "Mul": 20, "Relu": 10,
               "Reshape": 5, "Split": 1},
    # Conv2D 356 = stem + 16 cells x (5 separables x 4 + 1x1) + 19 adjust convs
    # (4 factorized reductions x 2 + 11 projections); 20 concats: 16 cells + 4 adjusts.
    "nasnet_a": {"Conv2D": 356, "BatchNorm": 192, "Relu": 192, "Add": 80, "AvgPool2D": 52,
                 "Concat": 20, "Pad": 8, "MaxPool2D": 8, "Split": 8, "GlobalAvgPool": 1,
                 "Flatten": 1, "Gemm": 1},
    # Conv2D 73 = stem + 9 cells x (4 projections + 4 vertex convs); MaxPool 9 + 2.
    "nasbench": {"Conv2D": 73, "BatchNorm": 73, "Relu": 73, "MaxPool2D": 11, "Concat": 9,
                 "ReduceMean": 1, "Gemm": 1},
}

EXPECTED_PARAMS = {
    "resnet18": 11_684_712,       # resnet18.onnx
    "resnet50": 25_530_472,       # resnet50.onnx
    "squeezenet": 1_235_496,      # squeezenet1_1.onnx
    "resnext50": 24_994_792,      # torchvision 25,028,904 - 34,112 BN channels
    "inception_v3": 23_817_352,   # torchvision 27,161,264 - aux 3,326,696 - 17,216 BN channels
    "bert_base": 108_891_648 + 1,  # bert_base.onnx 109,482,240 - pooler 590,592; + scale
    "vit_base": 86_567_656 + 1,   # timm vit_base_patch16_224; + scale
    "nasrnn": 16 * 512 * 512 + 512,  # shared W_i, U_i and h_0
    "nasnet_a": 5_326_716,        # Keras NASNetMobile (BN with mean and variance)
    "nasbench": 2_705_290,        # hand count: stem 3,968, stacks 138,240 / 514,048 /
                                  # 2,043,904, dense 5,130 (BN with mean and variance)
}

INPUTS = {
    "bert_base": ("input_ids", (1, 128), dtypes.INT64),
    "inception_v3": ("input", (1, 3, 299, 299), dtypes.FLOAT32),
    "nasbench": ("input", (1, 3, 32, 32), dtypes.FLOAT32),
    "nasrnn": ("input", (5, 1, 512), dtypes.FLOAT32),
}
OUTPUTS = {"bert_base": (1, 128, 768), "nasbench": (1, 10), "nasrnn": (1, 512)}


def params(g: te.Graph) -> int:
    return sum(o.outputs[0].num_elements for o in g.weight_ops
               if dtypes.is_float(o.outputs[0].dtype))


@pytest.fixture(scope="module")
def shape_only() -> dict[str, te.Graph]:
    """Every network built without weight data (fast)."""
    return {n: te.graphs.build(n, seed=None) for n in names()}


def test_names_are_the_registered_benchmarks():
    assert names() == ALL


@pytest.mark.parametrize("name", ALL)
def test_op_histogram(shape_only, name):
    g = shape_only[name]
    assert dict(g.op_type_counts()) == EXPECTED_OPS[name]
    assert g.num_ops == sum(EXPECTED_OPS[name].values())


@pytest.mark.parametrize("name", ALL)
def test_param_count(shape_only, name):
    assert params(shape_only[name]) == EXPECTED_PARAMS[name]


@pytest.mark.parametrize("name", ALL)
def test_inputs_and_outputs(shape_only, name):
    g = shape_only[name]
    in_name, in_shape, in_dtype = INPUTS.get(name, ("input", (1, 3, 224, 224), dtypes.FLOAT32))
    assert [(o.name, o.outputs[0].shape, o.outputs[0].dtype) for o in g.inputs] == \
        [(in_name, in_shape, in_dtype)]
    assert g.output_names == ("output",)
    out = g.tensor(g.outputs[0])
    assert out.shape == OUTPUTS.get(name, (1, 1000)) and out.dtype == dtypes.FLOAT32


def test_shape_only_graphs_have_no_float_weight_data(shape_only):
    for g in shape_only.values():
        with_data = {o.name for o in g.weight_ops if dtypes.is_float(o.outputs[0].dtype)} & \
            set(g.weights)
        assert with_data <= {"attention.scale"}  # constants keep their value
    # integer index weights (BERT's position / token type ids) and the attention scale
    # constant keep their data
    bert = shape_only["bert_base"]
    assert set(bert.weights) == {"embeddings.position_ids", "embeddings.token_type_ids",
                                 "attention.scale"}
    assert float(bert.weights["attention.scale"]) == 8.0
    np.testing.assert_array_equal(bert.weights["embeddings.position_ids"], np.arange(128)[None])


def test_seeded_build_has_data_for_every_weight():
    g = te.graphs.build("resnet18")
    assert set(g.weights) == {o.name for o in g.weight_ops}


def test_build_is_deterministic():
    a, b = te.graphs.build("squeezenet"), te.graphs.build("squeezenet")
    assert a.hash() == b.hash()
    for k in a.weights:
        np.testing.assert_array_equal(a.weights[k], b.weights[k])
    c = te.graphs.build("squeezenet", seed=1)
    assert c.hash() == a.hash()  # the hash is structural
    assert any(not np.array_equal(a.weights[k], c.weights[k]) for k in a.weights)
    assert te.graphs.build("squeezenet", seed=None).hash() == a.hash()
    assert te.graphs.build("resnet18").hash() != a.hash()


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown graph 'resnet1000'") as err:
        te.graphs.build("resnet1000")
    for n in ALL:
        assert n in str(err.value)


def test_keyword_arguments():
    g = te.graphs.build("bert_base", num_layers=2, seq_len=64, seed=None)
    assert g.op_type_counts()["MatMul"] == 16 and g.op_type_counts()["LayerNorm"] == 5
    assert g.tensor(g.outputs[0]).shape == (1, 64, 768)
    g = te.graphs.build("nasrnn", seq_len=3, share_weights=False, seed=None)
    assert g.op_type_counts()["MatMul"] == 48
    assert params(g) == 3 * 16 * 512 * 512 + 512
    g = te.graphs.build("resnet50", batch_size=2, seed=None)
    assert g.tensor(g.outputs[0]).shape == (2, 1000)
    g = te.graphs.build("vit_base", batch_size=2, num_layers=1, seed=None)
    assert g.tensor(g.outputs[0]).shape == (2, 1000)
    # ResNeXt with one group of 64 is ResNet-50
    assert te.graphs.build("resnext50", groups=1, width_per_group=64, seed=None).hash() == \
        te.graphs.build("resnet50", seed=None).hash()


def test_grouped_convs(shape_only):
    groups = [o.attrs["group"] for o in shape_only["resnext50"].ops if o.type == "Conv2D"]
    assert groups.count(32) == 16 and groups.count(1) == 37
    widths = [o.outputs[0].shape[1] for o in shape_only["resnext50"].ops
              if o.type == "Conv2D" and o.attrs["group"] == 32]
    assert sorted(set(widths)) == [128, 256, 512, 1024]


def test_inception_asymmetric_convs_and_pools(shape_only):
    g = shape_only["inception_v3"]
    kernels = [tuple(g.tensor(o.inputs[1]).shape[2:]) for o in g.ops if o.type == "Conv2D"]
    assert kernels.count((1, 7)) == kernels.count((7, 1)) == 4 * 3 + 1  # 6b..6e, 7a
    assert kernels.count((1, 3)) == kernels.count((3, 1)) == 4  # 7b, 7c
    assert all(o.attrs["count_include_pad"] == 1 for o in g.ops if o.type == "AvgPool2D")


def test_nasbench_cells():
    m, ops = validate_cell(*DEFAULT_CELL)
    assert vertex_channels(128, 128, m) == [128, 32, 32, 32, 32, 32, 128]
    # a custom cell with the input feeding the output (an extra projection + Add) and
    # a dangling vertex (pruned)
    cell = ([[0, 1, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]],
            ["input", "conv3x3-bn-relu", "maxpool3x3", "output"])
    g = te.graphs.build("nasbench", cell=cell, seed=None)
    assert g.op_type_counts()["Add"] == 9 and g.op_type_counts()["Conv2D"] == 1 + 9 * 3
    assert te.graphs.build("nasbench", cell=DEFAULT_CELL, seed=None).hash() == \
        te.graphs.build("nasbench", seed=None).hash()
    bad = [
        ([[0, 1], [1, 0]], ["input", "output"]),                      # not upper-triangular
        (np.zeros((8, 8), int), ["input"] + ["maxpool3x3"] * 6 + ["output"]),  # 8 vertices
        ([[0, 1, 0], [0, 0, 1], [0, 0, 0]], ["input", "conv5x5", "output"]),  # bad op
        ([[0, 1, 0], [0, 0, 0], [0, 0, 0]], ["input", "maxpool3x3", "output"]),  # no path
        ([[0, 2], [0, 0]], ["input", "output"]),                      # not 0/1
    ]
    for matrix, ops in bad:
        with pytest.raises(ValueError):
            te.graphs.build("nasbench", cell=(matrix, ops), seed=None)


def test_nasrnn_matches_numpy():
    g = te.graphs.build("nasrnn", seq_len=2, hidden=16)
    w = g.weights
    x = np.random.default_rng(1).standard_normal((2, 1, 16)).astype(np.float32)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    relu = lambda v: np.maximum(v, 0)  # noqa: E731
    h = w["h0"]
    for step in range(2):
        t = [x[step] @ w[f"cell0.w{i}"] + h @ w[f"cell0.u{i}"] for i in range(8)]
        m0, m1 = relu(t[0]) + sig(t[3]), sig(t[1]) + np.tanh(t[2])
        m2, m3 = sig(t[4]) * np.tanh(t[5]), sig(t[6]) * relu(t[7])
        m4, m5 = sig(m1) + np.tanh(m2), np.tanh(m0) * np.tanh(m3)
        h = np.tanh(np.tanh(m4) * np.tanh(m5))
    np.testing.assert_allclose(reference.run(g, {"input": x})["output"], h, rtol=1e-5, atol=1e-6)


def _run(name: str, **kw) -> np.ndarray:
    g = te.graphs.build(name, **kw)
    out = reference.run(g, g.random_inputs(seed=0))["output"]
    assert out.shape == g.tensor(g.outputs[0]).shape
    assert np.isfinite(out).all() and np.abs(out).max() > 0
    return out


@pytest.mark.parametrize("name, kw", [
    ("squeezenet", {}), ("resnet18", {}), ("nasbench", {}), ("nasrnn", {}),
    ("bert_base", {"num_layers": 2}), ("vit_base", {"num_layers": 2}), ("nasnet_a", {}),
])
def test_reference_executor_runs(name, kw):
    _run(name, **kw)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "resnext50", "inception_v3", "bert_base",
                                  "vit_base"])
def test_reference_executor_runs_full_size(name):
    _run(name)
