"""Graphs shared by several test files."""

import numpy as np

import taso_env as te
from taso_env import dtypes


def all_ops_graph() -> te.Graph:
    """Every op type of docs/operators.md but Opaque, with the awkward cases: asymmetric
    conv pads, groups, dilation, every fused activation, broadcast batched MatMul,
    ceil-mode pooling, softmax on a middle axis, non-trivial transposes and casts."""
    b = te.GraphBuilder("all_ops_gpu", seed=0)
    x = b.input("x", [2, 4, 9, 9])
    ids = b.input("ids", [2, 3], dtypes.INT64)
    y = b.conv2d(x, 8, 3, padding=[0, 1, 2, 1], activation="relu", name="asym")
    y = b.conv2d(y, 8, 3, padding=2, dilation=2, groups=2, activation="sigmoid", name="grouped")
    y = b.conv2d(y, 8, 1, activation="tanh", bias=False, name="nobias")
    w3 = b.weight("w3", [8, 8, 1, 1])
    y = b.add(y, b.op("Conv2D", [y, b.op("Enlarge", [w3], kernel=[3, 3])], pads=[1, 1, 1, 1]))
    y = b.batch_norm(y)
    y = b.op("Sub", [y, b.op("Tanh", [y])])
    one = b.op("Constant", [], value=1.0, shape=[1])
    y = b.op("Div", [y, b.op("Add", [b.op("Exp", [b.op("Sigmoid", [y])]), one])])
    left, right = b.split(y, axis=1, sizes=[3, 5])
    y = b.concat([b.op("Sqrt", [b.op("Relu", [right])]), left], axis=1)
    y = b.max_pool(y, 3, 2, padding=1, ceil_mode=True)
    y = b.avg_pool(b.pad(y, [0, 0, 1, 0, 0, 0, 0, 1], value=0.5), 2, 1, count_include_pad=True)
    y = b.avg_pool(y, 2, 1, padding=[1, 0, 0, 1])
    pooled = b.global_avg_pool(y)
    t = b.transpose(b.reshape(y, [2, 8, -1]), [0, 2, 1])
    t = b.layer_norm(t)
    heads = b.reshape(t, [2, t.shape[1], 2, 4])
    q = b.transpose(heads, [0, 2, 1, 3])            # [2, 2, S, 4]
    k = b.transpose(heads, [2, 0, 3, 1])            # [2, 2, 4, S]
    att = b.softmax(b.op("MatMul", [q, k]), axis=2)  # softmax over a middle axis
    v = b.op("MatMul", [att, b.weight("wv", [1, 2, t.shape[1], 4])], activation=1)  # batch broadcast
    t = b.op("MatMul", [t, b.weight("wm", [8, 8])], activation=3)
    t = b.gelu(b.op("Erf", [t]))
    t = b.op("HardSwish", [b.op("HardSigmoid", [b.op("Clip", [t], min=-1.5, max=2.0)], alpha=0.3, beta=0.4)])
    t = b.softmax(b.op("Mul", [t, b.op("Identity", [t])]), axis=-1)
    flat = b.flatten(pooled)
    g = b.op("Gemm", [flat, b.weight("wg", [6, 8]), b.weight("bg", [6])], trans_b=1, alpha=0.5, beta=2.0)
    g2 = b.op("Gemm", [b.weight("wa", [8, 2]), b.weight("wb", [8, 3])], trans_a=1)
    emb = b.op("Gather", [b.weight("table", [10, 6]), ids], axis=0)
    mask = b.op("Cast", [ids], to=dtypes.BOOL)
    sel = b.op("Where", [b.reshape(mask, [2, 3, 1]), emb, b.op("Add", [emb, emb])])
    b.output(b.reduce_mean(t, axes=[1], keepdims=False), "attention")
    b.output(b.op("ReduceSum", [v], axes=[1, 3], keepdims=0), "values")
    b.output(g, "logits")
    b.output(g2, "gemm_t")
    b.output(b.op("ReduceSum", [sel], axes=[0, 2], keepdims=1), "selected")
    b.output(b.op("Cast", [b.op("Mul", [ids, ids])], to=dtypes.FLOAT32), "ids_sq")
    # Position ids as RoBERTa computes them: a running count of the ids that are not 1.
    is_pad = b.op("Equal", [ids, b.weight("pad_id", [], dtypes.INT64, value=np.int64(1))])
    count = b.op("CumSum", [b.op("Cast", [is_pad], to=dtypes.INT64)], axis=1)
    picked = b.op("GatherElements", [b.weight("ge_data", [2, 10]), ids], axis=1)
    running = b.op("CumSum", [picked], axis=-1, exclusive=1, reverse=1)
    b.output(b.op("Add", [running, b.op("Cast", [count], to=dtypes.FLOAT32)]), "positions")
    return b.build()


def conv_epilogue_graph(pattern: str, bias: bool = True) -> te.Graph:
    """A convolution "c" and what reads it, by `pattern` (CONV_EPILOGUE_PATTERNS): the
    cases of the epilogue rule (taso/epilogue.h) that fuse and those that must not."""
    b = te.GraphBuilder(f"fuse_{pattern}_{int(bias)}", seed=0)
    x = b.input("x", [1, 8, 14, 14])
    r = b.input("r", [1, 16, 14, 14])
    y = b.conv2d(x, 16, 3, padding=1, bias=bias, name="c")
    if pattern == "relu":
        y = b.relu(y)
    elif pattern == "add":
        y = b.add(y, r)
    elif pattern == "add_swapped_relu":
        y = b.relu(b.add(r, y))
    elif pattern == "add_relu":
        y = b.relu(b.add(y, r))
    elif pattern == "two_convs_add_relu":  # both operands are convolutions (ResNet downsample)
        y = b.relu(b.add(y, b.conv2d(x, 16, 1, name="d")))
    elif pattern == "conv_read_twice":  # must not fuse: the conv output has two readers
        y = b.add(b.relu(y), y)
    elif pattern == "relu_is_output":  # the Add is an output too: only conv+add may fuse
        a = b.add(y, r)
        b.output(a, "sum")
        y = b.relu(a)
    elif pattern == "broadcast_add":  # must not fuse: the residual broadcasts
        y = b.relu(b.add(y, b.input("c1", [1, 16, 1, 1])))
    elif pattern == "relu6":
        y = b.op("Clip", [y], min=0.0, max=6.0)
    elif pattern == "add_hardswish":
        y = b.op("HardSwish", [b.add(y, r)])
    elif pattern == "clip_not_relu6":  # fuses nothing: only Clip(0, 6) is an epilogue
        y = b.op("Clip", [y], min=-1.0, max=1.0)
    elif pattern == "asym_pads_strided":
        y = b.relu(b.add(b.conv2d(x, 16, 3, stride=2, padding=[0, 0, 1, 1], name="s"), b.input("r2", [1, 16, 7, 7])))
    b.output(y, "y")
    return b.build()


CONV_EPILOGUE_PATTERNS = ["relu", "relu6", "add_hardswish", "clip_not_relu6",
            "add", "add_swapped_relu", "add_relu", "two_convs_add_relu", "conv_read_twice",
            "relu_is_output", "broadcast_add", "asym_pads_strided"]
# pattern -> the types of the ops the convolution runs in its epilogue
CONV_EPILOGUE_OPS = {"relu": ["Relu"], "relu6": ["Clip"], "add_hardswish": ["Add", "HardSwish"],
                     "clip_not_relu6": [], "add": ["Add"], "add_swapped_relu": ["Add", "Relu"],
                     "add_relu": ["Add", "Relu"], "two_convs_add_relu": ["Add", "Relu"], "conv_read_twice": [],
                     "relu_is_output": ["Add"], "broadcast_add": [], "asym_pads_strided": ["Add", "Relu"]}
# pattern -> the types of the ops that, unfused into the convolution, join the element-wise
# chain of the op reading them (taso/epilogue.h): priced at a share of their cost alone
CONV_PATTERN_CHAIN_OPS = {"conv_read_twice": ["Relu"], "broadcast_add": ["Add"]}


def epilogue_free_ops(graph: te.Graph, fused, alone) -> tuple[list[int], list[float], list[float]]:
    """(ops `fused`, a table model, prices at nothing that `alone`, the same table pricing
    every op alone, charges: the ops it deems run in an epilogue or as a view
    (taso/epilogue.h); each model's per-op costs)."""
    fused_costs, alone_costs = fused.op_costs(graph), alone.op_costs(graph)
    free = [i for i, (a, b) in enumerate(zip(fused_costs, alone_costs)) if a == 0 and b > 0]
    return free, fused_costs, alone_costs


def chained_ops(fused_costs: list[float], alone_costs: list[float]) -> list[int]:
    """The ops a table model prices at a share of their cost alone: those it deems join
    the element-wise chain of the op reading them (taso/epilogue.h)."""
    return [i for i, (a, b) in enumerate(zip(fused_costs, alone_costs)) if 0 < a < 0.9 * b]
