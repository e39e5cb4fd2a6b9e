"""Small ONNX models of the position ids Hugging Face exports compute from their inputs:
RoBERTa's (XLM-R's, MPNet's) running count of the tokens that are not padding (Equal,
Not, Cast, CumSum, Mul, Add, then GatherElements of the token-type buffer at those
positions) and OPT's (BLOOM's) CumSum over the attention mask. Shared by
test_new_onnx_ops.py and test_cuda_new_ops.py."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BATCH, SEQUENCE, HIDDEN, VOCAB, MAX_POSITIONS = 2, 8, 16, 10, 12
PAD_ID = 1
OPSET = 18
IR_VERSION = 10  # onnxruntime reads up to 13


def _weight(name: str, shape: tuple[int, ...], seed: int) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _embeddings_sum(nodes: list, inits: list, gathered: list[str]) -> onnx.ModelProto:
    """Adds the gathered embeddings and normalises them into output "hidden"."""
    total = gathered[0]
    for i, g in enumerate(gathered[1:]):
        nodes.append(helper.make_node("Add", [total, g], [f"sum{i}"]))
        total = f"sum{i}"
    inits += [numpy_helper.from_array(np.linspace(0.5, 1.5, HIDDEN, dtype=np.float32), "ln_scale"),
              numpy_helper.from_array(np.linspace(-0.2, 0.2, HIDDEN, dtype=np.float32), "ln_bias")]
    nodes.append(helper.make_node("LayerNormalization", [total, "ln_scale", "ln_bias"], ["hidden"], axis=-1,
                                  epsilon=1e-5))
    return nodes


def roberta_position_ids_model() -> onnx.ModelProto:
    """input_ids [BATCH, SEQUENCE] -> hidden [BATCH, SEQUENCE, HIDDEN], as RoBERTa's
    embeddings: positions = cumsum(ids != pad) * (ids != pad) + pad, the token types
    gathered from a buffer at those positions."""
    inits = [numpy_helper.from_array(np.array(PAD_ID, dtype=np.int64), "pad"),
             numpy_helper.from_array(np.array(1, dtype=np.int64), "axis"),
             numpy_helper.from_array(np.tile(np.arange(MAX_POSITIONS, dtype=np.int64) % 2, (BATCH, 1)),
                                     "token_type_buffer"),
             _weight("word_embeddings", (VOCAB, HIDDEN), 1), _weight("token_type_embeddings", (2, HIDDEN), 2),
             _weight("position_embeddings", (MAX_POSITIONS, HIDDEN), 3)]
    nodes = [
        helper.make_node("Equal", ["input_ids", "pad"], ["is_pad"]),
        helper.make_node("Not", ["is_pad"], ["not_pad"]),
        helper.make_node("Cast", ["not_pad"], ["mask32"], to=TensorProto.INT32),
        helper.make_node("Cast", ["mask32"], ["mask64"], to=TensorProto.INT64),
        helper.make_node("CumSum", ["mask64", "axis"], ["count"], exclusive=0, reverse=0),
        helper.make_node("Cast", ["count"], ["count32"], to=TensorProto.INT32),
        helper.make_node("Mul", ["count32", "mask32"], ["masked"]),
        helper.make_node("Cast", ["masked"], ["masked64"], to=TensorProto.INT64),
        helper.make_node("Add", ["masked64", "pad"], ["position_ids"]),
        helper.make_node("GatherElements", ["token_type_buffer", "position_ids"], ["token_types"], axis=1),
        helper.make_node("Gather", ["word_embeddings", "input_ids"], ["words"], axis=0),
        helper.make_node("Gather", ["token_type_embeddings", "token_types"], ["types"], axis=0),
        helper.make_node("Gather", ["position_embeddings", "position_ids"], ["positions"], axis=0),
    ]
    _embeddings_sum(nodes, inits, ["words", "types", "positions"])
    graph = helper.make_graph(
        nodes, "roberta_position_ids",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [BATCH, SEQUENCE])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [BATCH, SEQUENCE, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def opt_position_ids_model() -> onnx.ModelProto:
    """input_ids, attention_mask [BATCH, SEQUENCE] -> hidden, as OPT's learned positions:
    positions = cumsum(mask) * mask - 1 + 2 (the offset of OPT's table)."""
    inits = [numpy_helper.from_array(np.array(1, dtype=np.int64), "axis"),
             numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
             numpy_helper.from_array(np.array(2, dtype=np.int64), "offset"),
             _weight("word_embeddings", (VOCAB, HIDDEN), 4),
             _weight("position_embeddings", (MAX_POSITIONS, HIDDEN), 5)]
    nodes = [
        helper.make_node("CumSum", ["attention_mask", "axis"], ["count"]),
        helper.make_node("Mul", ["count", "attention_mask"], ["masked"]),
        helper.make_node("Sub", ["masked", "one"], ["from_zero"]),
        helper.make_node("Add", ["from_zero", "offset"], ["position_ids"]),
        helper.make_node("Gather", ["word_embeddings", "input_ids"], ["words"], axis=0),
        helper.make_node("Gather", ["position_embeddings", "position_ids"], ["positions"], axis=0),
    ]
    _embeddings_sum(nodes, inits, ["words", "positions"])
    graph = helper.make_graph(
        nodes, "opt_position_ids",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [BATCH, SEQUENCE]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [BATCH, SEQUENCE])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, [BATCH, SEQUENCE, HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)


def token_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Ids in [0, VOCAB) with padding (PAD_ID) in each row's tail; attention masks of 1s
    then 0s (a left-aligned batch)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(2, VOCAB, (BATCH, SEQUENCE)).astype(np.int64)
    lengths = [SEQUENCE, SEQUENCE - 3][:BATCH]
    mask = np.zeros((BATCH, SEQUENCE), dtype=np.int64)
    for row, n in enumerate(lengths):
        ids[row, n:] = PAD_ID
        mask[row, :n] = 1
    feeds = {"input_ids": ids, "attention_mask": mask}
    return {i.name: feeds[i.name] for i in model.graph.input}
