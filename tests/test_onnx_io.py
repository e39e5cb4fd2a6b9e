"""ONNX round trips on the real shipped models and on builder graphs, checked by
onnxruntime and by the numpy reference executor."""

import numpy as np
import onnx
import pytest
from conftest import MODEL_FILES, MODELS

import taso_env as te
from taso_env.engine import reference
from taso_env.onnx.check import check_equivalent, random_feeds, run_onnxruntime


@pytest.mark.parametrize("filename", MODEL_FILES)
def test_shipped_model_round_trip_matches_in_onnxruntime(filename):
    path = MODELS / filename
    source = onnx.load(path)
    g = te.load_onnx(path)
    exported = g.export_onnx()
    assert [i.name for i in exported.graph.input if not i.doc_string.startswith("weight")] == \
        [i.name for i in source.graph.input if not i.doc_string.startswith("weight")]
    assert [o.name for o in exported.graph.output] == [o.name for o in source.graph.output]
    for seed in (0, 1):
        report = check_equivalent(source, exported, random_feeds(g, seed * 10), rtol=1e-4, atol=1e-5)
        assert report.equivalent, report


@pytest.mark.parametrize("filename", MODEL_FILES)
def test_reference_executor_matches_onnxruntime_on_shipped_models(filename):
    path = MODELS / filename
    g = te.load_onnx(path)
    feeds = random_feeds(g, 3)
    expected = run_onnxruntime(onnx.load(path), feeds)
    got = reference.run(g, feeds)
    assert set(got) == set(expected)
    for name in expected:
        # float32 sums in a different order: tolerance relative to the output's scale
        scale = float(np.abs(expected[name]).max())
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-4, atol=1e-4 * scale)


def test_shipped_models_load_with_the_expected_op_histograms():
    resnet50 = te.load_onnx(MODELS / "resnet50.onnx")
    assert resnet50.op_type_counts() == {"Conv2D": 53, "Relu": 49, "Add": 16, "MaxPool2D": 1,
                                         "GlobalAvgPool": 1, "Flatten": 1, "Gemm": 1}
    bert = te.load_onnx(MODELS / "bert_base.onnx")
    counts = bert.op_type_counts()
    assert bert.num_ops == 424
    assert counts["MatMul"] == 96 and counts["LayerNorm"] == 25 and counts["Softmax"] == 12
    # The attention-mask preprocessing's GatherND and And are lowered at import
    # (onnx/lowering.py) to Reshape + Gather and Cast + Where + Cast: no opaque op.
    assert "Opaque" not in counts and counts["Where"] == 2 and counts["Gather"] == 5


def test_conv_biases_stay_conv_inputs_through_the_round_trip():
    # The earlier system turned each conv bias into Reshape + Add and lost it when
    # folding weights; here a bias stays the Conv's third input, with its data.
    g = te.load_onnx(MODELS / "resnet18.onnx")
    feeds = random_feeds(g, 5)
    g = g.with_weights({k: v for k, v in feeds.items() if k in {o.name for o in g.weight_ops}})
    exported = g.export_onnx()
    convs = [n for n in exported.graph.node if n.op_type == "Conv"]
    assert len(convs) == 20 and all(len(n.input) == 3 for n in convs)
    initializers = {i.name: onnx.numpy_helper.to_array(i) for i in exported.graph.initializer}
    for n in convs:
        assert np.abs(initializers[n.input[2]]).max() > 0  # biases kept, not zeroed
    source = onnx.load(MODELS / "resnet18.onnx")
    report = check_equivalent(source, exported, feeds)
    assert report.equivalent, report


def test_weights_without_data_are_exported_as_marked_inputs():
    g = te.load_onnx(MODELS / "squeezenet1_1.onnx")
    exported = g.export_onnx()
    weight_inputs = [i for i in exported.graph.input if i.doc_string.startswith("weight")]
    assert len(weight_inputs) == 52 and not exported.graph.initializer
    with_data = g.with_weights(g.random_weights(0)).export_onnx()
    assert len(with_data.graph.initializer) == 52
    assert [i.name for i in with_data.graph.input] == ["input"]


def test_export_to_file_and_reload_gives_the_same_graph(tmp_path):
    g = te.load_onnx(MODELS / "bert_base.onnx")
    out = tmp_path / "bert.onnx"
    g.export_onnx(out)
    again = te.load_onnx(out)
    assert again.hash() == g.hash()
    assert again.num_ops == g.num_ops
    assert again.cost() == pytest.approx(g.cost(), rel=1e-12)


def test_a_model_with_real_weights_loads_them_all_and_is_left_as_it_was():
    # Large learned weights are set aside while the checker and shape inference run;
    # every one comes back with its data, and the caller's ModelProto is not changed.
    proto = te.graphs.build("resnet18", seed=0).export_onnx()
    before = proto.SerializeToString()
    sizes = {i.name: int(np.prod(i.dims)) for i in proto.graph.initializer}
    assert max(sizes.values()) > 4096
    loaded = te.load_onnx(proto)
    assert proto.SerializeToString() == before
    want = {i.name: onnx.numpy_helper.to_array(i) for i in proto.graph.initializer}
    got = loaded.weights
    assert set(want) <= set(got)
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
    feeds = random_feeds(loaded, 0)
    assert check_equivalent(proto, loaded, feeds).equivalent


def test_a_model_with_external_data_loads_its_weights_from_beside_the_file(tmp_path):
    proto = te.graphs.build("resnet18", seed=0).export_onnx()
    path = tmp_path / "model.onnx"
    copy = onnx.ModelProto.FromString(proto.SerializeToString())  # onnx.save moves a model's data out
    onnx.save(copy, path, save_as_external_data=True, all_tensors_to_one_file=True, location="model.data",
              size_threshold=1024)
    loaded = te.load_onnx(path)
    for init in proto.graph.initializer:
        np.testing.assert_array_equal(loaded.weights[init.name], onnx.numpy_helper.to_array(init))
    (tmp_path / "model.data").unlink()
    with pytest.raises(te.errors.MalformedOnnxError, match="model.onnx"):
        te.load_onnx(path)
    with pytest.raises(te.errors.MalformedOnnxError, match="external data"):
        te.load_onnx(onnx.load(path, load_external_data=False))


def test_a_float16_model_optimises_and_checks_equal_within_its_precision():
    from onnx import TensorProto, helper, numpy_helper

    from taso_env.onnx.check import compare_outputs, output_rtol

    rng = np.random.default_rng(0)
    half = [numpy_helper.from_array(rng.random(shape).astype(np.float16), name)
            for name, shape in (("w", (64, 32)), ("b", (32,)), ("w2", (64, 32)))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"]), helper.make_node("MatMul", ["x", "w2"], ["a2"]),
             helper.make_node("Relu", ["a2"], ["y2"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT16, [4, 32]) for n in ("y", "y2")]
    model = helper.make_model(helper.make_graph(nodes, "half", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT16, [4, 64])], outputs, half), opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    g = te.load_onnx(model)
    best = te.search(g, "backtracking").graph
    report = check_equivalent(model, best, random_feeds(g, 0))
    assert report.equivalent and all(np.isfinite(v) for v in report.max_rel_diff.values())
    # float16 results are compared at 8 of its epsilons (7.8e-3 of the scale), float32 at rtol
    assert output_rtol(np.float16, 1e-4) == pytest.approx(8 * 2.0 ** -10) and output_rtol(np.float32, 1e-4) == 1e-4
    want = {"y": np.array([100.0, 1.0], np.float16)}
    assert compare_outputs(want, {"y": np.array([100.5, 1.0], np.float16)}).equivalent
    assert not compare_outputs(want, {"y": np.array([101.0, 1.0], np.float16)}).equivalent
