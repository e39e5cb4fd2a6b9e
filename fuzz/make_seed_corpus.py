"""Writes the seed corpora of the fuzz harnesses under fuzz/corpus/<target>/.

Each corpus holds a few valid inputs and a few slightly broken ones. Run it from the
repository root (`python fuzz/make_seed_corpus.py`); it is deterministic apart from
the rollout file's timestamps, and the committed corpus is what the harnesses start from.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CORPUS = Path(__file__).resolve().parent / "corpus"
RULES = Path(__file__).resolve().parent.parent / "taso_env" / "rules"


def _tiny_conv_relu() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32) * 0.1, "w")
    b = numpy_helper.from_array(np.zeros(4, np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    graph = helper.make_graph(nodes, "conv_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tiny_matmul_add() -> onnx.ModelProto:
    w = numpy_helper.from_array(np.ones((8, 4), np.float32), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "m"], ["a"], name="add"),
             helper.make_node("Reshape", ["a", "shape"], ["y"], name="reshape"),
             helper.make_node("Transpose", ["y"], ["t"], name="tr", perm=[1, 0])]
    shape = numpy_helper.from_array(np.array([4, 2], np.int64), "shape")
    graph = helper.make_graph(nodes, "matmul_add", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 4])], [w, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tiny_concat_split_opaque() -> onnx.ModelProto:
    nodes = [helper.make_node("Concat", ["x", "x"], ["c"], name="cat", axis=1),
             helper.make_node("Split", ["c", "sizes"], ["s0", "s1"], name="split", axis=1),
             helper.make_node("Sigmoid", ["s0"], ["g"], name="sig"),
             helper.make_node("CumSum", ["s1", "axis"], ["cs"], name="cumsum"),
             helper.make_node("Mul", ["g", "cs"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.array([2, 2], np.int64), "sizes"),
             numpy_helper.from_array(np.array(1, np.int64), "axis")]
    graph = helper.make_graph(nodes, "concat_split", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def write_onnx_corpus(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    models = {"conv_relu": _tiny_conv_relu(), "matmul_add": _tiny_matmul_add(),
              "concat_split": _tiny_concat_split_opaque()}
    for name, model in models.items():
        data = model.SerializeToString()
        (folder / f"{name}.onnx").write_bytes(data)
        (folder / f"{name}_truncated.onnx").write_bytes(data[: len(data) * 2 // 3])
    symbolic = _tiny_matmul_add()
    symbolic.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    (folder / "matmul_add_symbolic_batch.onnx").write_bytes(symbolic.SerializeToString())
    wrong = _tiny_conv_relu()
    wrong.graph.node[1].input[0] = "nowhere"
    (folder / "conv_relu_dangling_input.onnx").write_bytes(wrong.SerializeToString())


def write_rule_corpus(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shipped = json.loads((RULES / "00_activation_fusion.json").read_text())
    rules = [dict(r, id=i) for i, r in enumerate(shipped["rules"][:3])]
    valid = {"family": "activation_fusion", "rules": rules}
    (folder / "three_rules.json").write_bytes(json.dumps(valid, indent=1).encode())
    (folder / "one_rule.json").write_bytes(json.dumps({"family": "f", "rules": rules[:1]}).encode())
    broken = json.loads(json.dumps(valid))
    broken["rules"][1]["source"]["ops"][0]["type"] = "NoSuchOp"
    (folder / "unknown_op.json").write_bytes(json.dumps(broken).encode())
    gap = json.loads(json.dumps(valid))
    gap["rules"][2]["id"] = 7
    (folder / "id_gap.json").write_bytes(json.dumps(gap).encode())
    (folder / "truncated.json").write_bytes(json.dumps(valid).encode()[:300])


def write_rollout_corpus(folder: Path) -> None:
    """Tagged inputs: byte 0 even -> the rest is the index file (beside a valid
    episode), odd -> the rest is episode 0's file (beside a valid index); see
    fuzz/fuzz_rollout_reader.py."""
    from taso_env.env.collection import CollectConfig, collect

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "conv_relu.onnx")
        onnx.save(_tiny_conv_relu(), model)
        out = os.path.join(tmp, "rollouts.h5")
        collect(CollectConfig(graphs=(model,), episodes=1, out=out, workers=0, horizon=2, seed=1,
                              policy="random", max_locations=8), progress=False)
        index = Path(out).read_bytes()
        episode = Path(out + ".episodes", "episode_0.h5").read_bytes()
    (folder / "valid_index").write_bytes(b"\x00" + index)
    (folder / "valid_episode").write_bytes(b"\x01" + episode)
    (folder / "truncated_episode").write_bytes(b"\x01" + episode[: len(episode) // 2])
    (folder / "truncated_index").write_bytes(b"\x00" + index[: len(index) // 2])
    flipped = bytearray(episode)
    flipped[len(flipped) // 3] ^= 0xFF
    (folder / "flipped_byte_episode").write_bytes(b"\x01" + bytes(flipped))


def main() -> None:
    write_onnx_corpus(CORPUS / "onnx_loader")
    write_rule_corpus(CORPUS / "rule_loader")
    write_rollout_corpus(CORPUS / "rollout_reader")


if __name__ == "__main__":
    main()
