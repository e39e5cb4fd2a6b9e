"""Import coverage beyond the evaluation zoo: data/models/coverage/ holds shape-only
exports of other torchvision classifiers, segmentation and video models and Hugging Face
text, image and audio encoders (benchmarks/export_zoo.py, see data/models/README.md). Each
loads with no opaque op, computes what onnxruntime computes on the file itself, and its
greedy-optimised graph still does. distilbert_dynamic is the TorchScript export with
symbolic batch and sequence dims (as user scripts and optimum make them): it loads once
they are given, its Shape arithmetic folded away."""

import collections
import subprocess
from pathlib import Path

import onnx
import pytest

import taso_env as te
from taso_env.env.rewrite_env import GraphRewriteEnv
from taso_env.onnx.check import check_equivalent, random_feeds

COVERAGE = sorted((Path(__file__).resolve().parent.parent / "data" / "models" / "coverage").glob("*.onnx"))

#: Opaque ops a file may keep: none (RoBERTa's and MPNet's position ids, Equal / CumSum /
#: GatherElements of the input ids, load as core ops).
PREPROCESSING: dict[str, set[str]] = {}
#: Sizes of the symbolic input dims of the dynamic exports.
DIMS = {"distilbert_dynamic": {"batch": 1, "sequence": 128}}


def test_the_coverage_set_spans_the_families():
    names = {p.stem for p in COVERAGE}
    assert {"swin_t", "swin_v2_t", "maxvit_t", "shufflenet_v2_x1_0", "googlenet", "regnet_y_400mf", "gpt2",
            "t5_small_encoder", "distilbert", "albert_base", "roberta_base", "bert_base_sdpa", "llama_small",
            "qwen2_small", "deberta_v2_small", "mpnet", "distilbert_dynamic", "squeezebert", "gemma_small",
            "falcon_small", "mobilevit", "wav2vec2_small", "fcn_resnet50", "lraspp_mobilenet_v3_large",
            "deeplabv3_mobilenet_v3_large", "r3d_18", "t5_small_seq2seq", "bart_small"} <= names


@pytest.mark.parametrize("path", COVERAGE, ids=[p.stem for p in COVERAGE])
def test_export_loads_modelled_and_optimises_equal_to_onnxruntime(path):
    g = te.load_onnx(path, dims=DIMS.get(path.stem))
    opaque = collections.Counter(str(o.attrs["onnx_op_type"], "ascii") for o in g.ops if o.type == "Opaque")
    assert set(opaque) <= PREPROCESSING.get(path.stem, set()), f"{path.stem}: opaque ops {dict(opaque)}"
    feeds = random_feeds(g, 0)
    report = check_equivalent(onnx.load(str(path)), g, feeds)
    assert report.equivalent, f"{path.stem} as loaded: {report}"
    result = te.search(g, "greedy")
    report = check_equivalent(onnx.load(str(path)), result.graph, feeds)
    assert report.equivalent, f"{path.stem} after greedy ({result.rule_fires.most_common(3)}): {report}"


@pytest.mark.parametrize("dims", [{"batch": 2, "sequence": 16},
                                  {"input_ids:0": 1, "attention_mask:0": 1, "sequence": 8}])
def test_a_dynamic_export_loads_at_the_sizes_given(dims):
    path = COVERAGE[0].parent / "distilbert_dynamic.onnx"
    g = te.load_onnx(path, dims=dims)
    batch = dims.get("batch", 1)
    assert g.tensor(g.outputs[0]).shape == (batch, dims["sequence"], 768)
    assert not [o for o in g.ops if o.type in ("Opaque",) or o.name.startswith("/Shape")]
    feeds = random_feeds(g, 1)
    assert check_equivalent(onnx.load(str(path)), g, feeds).equivalent


def test_a_dynamic_export_without_sizes_names_every_symbolic_dim():
    path = COVERAGE[0].parent / "distilbert_dynamic.onnx"
    with pytest.raises(te.errors.DynamicShapeError, match=r"input_ids\[0\] \('batch'\).*attention_mask\[1\] "
                                                            r"\('sequence'\).*--dims batch=N sequence=N"):
        te.load_onnx(path)
    with pytest.raises(te.errors.OnnxImportError, match="no input has"):
        te.load_onnx(path, dims={"batch": 1, "sequence": 8, "heads": 12})
    with pytest.raises(te.errors.DynamicShapeError, match="sequence"):
        te.load_onnx(path, dims={"batch": 1})


def test_optimize_takes_dims_on_the_command_line(tmp_path):
    path = COVERAGE[0].parent / "distilbert_dynamic.onnx"
    out = tmp_path / "opt.onnx"
    done = subprocess.run(["rlflow", "optimize", str(path), "--method", "greedy", "--dims", "batch=1", "sequence=32",
                           "-o", str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "equivalent" in done.stdout and out.exists()
    bad = subprocess.run(["rlflow", "optimize", str(path), "--dims", "batch"], capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode != 0 and "expected NAME=SIZE" in bad.stderr


def test_a_graph_spec_carries_the_dims_wherever_graphs_are_named():
    spec = str(COVERAGE[0].parent / "distilbert_dynamic.onnx") + "[batch=1, sequence=8]"
    g = te.graphs.load(spec)
    assert g.tensor(g.outputs[0]).shape == (1, 8, 768)
    obs, info = GraphRewriteEnv(spec, horizon=2).reset(seed=0)  # the environment names graphs by spec
    assert info["initial_cost"] == pytest.approx(g.cost())
    with pytest.raises(te.errors.ConfigError, match="expected NAME=SIZE"):
        te.graphs.load(spec.replace("batch=1", "batch"))


@pytest.fixture(scope="module")
def shipped_tables():
    from taso_env import shipped_data
    from taso_env.gpu import cost_table

    return {m: cost_table.load(shipped_data.cost_tables()[f"h100_{m}"]) for m in ("fp32", "tf32", "fp16")}


@pytest.mark.parametrize("path", COVERAGE, ids=[p.stem for p in COVERAGE])
def test_every_op_configuration_of_the_export_is_measured_in_the_shipped_tables(path, shipped_tables):
    from taso_env.gpu import cost_table

    g = te.load_onnx(path, dims=DIMS.get(path.stem))
    for math_mode, table in shipped_tables.items():
        missing = {sig for _, op_type, sig, _ in cost_table.op_configs(g) if sig not in table and op_type != "Opaque"}
        assert not missing, f"{path.stem}: {len(missing)} missing from h100_{math_mode}: {sorted(missing)[:3]}"
