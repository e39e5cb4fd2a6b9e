"""A NAS-Bench-101 network (Ying et al., "NAS-Bench-101: Towards Reproducible Neural
Architecture Search", ICML 2019), laid out as the benchmark's `model_builder.py`
(google-research/nasbench) for CIFAR-10.

Input "input" [1, 3, 32, 32] -> output "output" [1, 10].

    stem conv3x3-bn-relu, 128 channels                    32x32
    stack 1: 3 cells, 128 channels                        32x32
    max pool 2x2/2, then stack 2: 3 cells, 256 channels   16x16
    max pool 2x2/2, then stack 3: 3 cells, 512 channels    8x8
    ReduceMean over H, W -> Gemm 10

A cell is a DAG of at most 7 vertices given by an upper-triangular adjacency matrix and
one op per vertex (vertex 0 "input", the last "output", the others conv3x3-bn-relu,
conv1x1-bn-relu or maxpool3x3). As in model_builder.py: the channels of the vertices
feeding the output split the cell's channels (the remainder to the first ones); other
vertices take the max of their successors; a vertex sums its inputs, each interior
input truncated to its width (a Split keeping the first channels) and the cell input
through a 1x1 conv-bn-relu projection; the output concatenates the vertices feeding it
(plus a projection of the cell input if it feeds the output too). Vertices not on an
input-to-output path are pruned, as NAS-Bench-101's ModelSpec does.

The default cell is the Inception-like example of the NAS-Bench-101 README (about
93% CIFAR-10 test accuracy), with every vertex 32 channels wide in the first stack:

    input -> conv1x1 ----------------------> output (concat)
    input -> conv3x3 ----------------------> output
    input -> conv3x3 -> conv3x3 -----------> output
    input -> maxpool3x3 -------------------> output

The BatchNorm ops are kept (conv without bias -> BatchNorm -> Relu, eps 1e-5) so that
conv+bn folding rewrites have something to fold. Default: 73 convs, 73 BatchNorms,
11 max pools; 2,705,290 parameters counting BN scale, shift, mean and variance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph
from taso_env.graphs import register
from taso_env.graphs.blocks import conv_bn

CELL_OPS = ("conv3x3-bn-relu", "conv1x1-bn-relu", "maxpool3x3")
DEFAULT_CELL = (
    [[0, 1, 1, 1, 0, 1, 0],   # input
     [0, 0, 0, 0, 0, 0, 1],   # conv 1x1
     [0, 0, 0, 0, 0, 0, 1],   # conv 3x3
     [0, 0, 0, 0, 1, 0, 0],   # conv 3x3
     [0, 0, 0, 0, 0, 0, 1],   # conv 3x3
     [0, 0, 0, 0, 0, 0, 1],   # max pool 3x3
     [0, 0, 0, 0, 0, 0, 0]],  # output
    ["input", "conv1x1-bn-relu", "conv3x3-bn-relu", "conv3x3-bn-relu", "conv3x3-bn-relu",
     "maxpool3x3", "output"],
)


def validate_cell(matrix: Sequence[Sequence[int]],
                  ops: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Checks a NAS-Bench-101 cell and prunes vertices off every input->output path.

    Raises:
        ValueError: not square / over 7 vertices / over 9 edges / not strictly upper
            triangular 0-1 / bad ops / output unreachable from input.
    """
    m = np.asarray(matrix, dtype=np.int64)
    n = m.shape[0] if m.ndim == 2 else 0
    if m.ndim != 2 or m.shape != (n, n) or not 2 <= n <= 7:
        raise ValueError(f"cell matrix must be square with 2..7 vertices, got shape {m.shape}")
    if not np.isin(m, (0, 1)).all() or np.tril(m).any():
        raise ValueError("cell matrix must be 0/1 and strictly upper-triangular")
    if m.sum() > 9:
        raise ValueError(f"cell has {int(m.sum())} edges; NAS-Bench-101 allows at most 9")
    ops = list(ops)
    if len(ops) != n or ops[0] != "input" or ops[-1] != "output" or \
            any(op not in CELL_OPS for op in ops[1:-1]):
        raise ValueError(f"cell ops must be 'input', {n - 2} of {CELL_OPS}, 'output'; got {ops}")
    fwd, bwd = {0}, {n - 1}
    for v in range(1, n):
        if any(m[u, v] for u in fwd):
            fwd.add(v)
    for v in range(n - 2, -1, -1):
        if any(m[v, w] for w in bwd):
            bwd.add(v)
    if n - 1 not in fwd:
        raise ValueError("cell output is not reachable from its input")
    keep = sorted(fwd & bwd)
    return m[np.ix_(keep, keep)], [ops[v] for v in keep]


def vertex_channels(in_channels: int, out_channels: int, m: np.ndarray) -> list[int]:
    """model_builder.compute_vertex_channels."""
    n = m.shape[0]
    ch = [in_channels] + [0] * (n - 2) + [out_channels]
    if n == 2:
        return ch
    in_degree = m[1:].sum(axis=0)
    interior, correction = divmod(out_channels, int(in_degree[n - 1]))
    for v in range(1, n - 1):
        if m[v, n - 1]:
            ch[v] = interior + (1 if correction > 0 else 0)
            correction -= 1
    for v in range(n - 3, 0, -1):
        if not m[v, n - 1]:
            ch[v] = max(ch[w] for w in range(v + 1, n - 1) if m[v, w])
    return ch


def build_cell(b: GraphBuilder, x: Tensor, channels: int, m: np.ndarray, ops: list[str],
         name: str) -> Tensor:
    n = m.shape[0]
    ch = vertex_channels(x.shape[1], channels, m)
    tensors, concat_in = [x], []
    for t in range(1, n - 1):
        add_in = []
        for src in range(1, t):
            if m[src, t]:
                s = tensors[src]
                if s.shape[1] > ch[t]:
                    s = b.split(s, 1, [ch[t], s.shape[1] - ch[t]])[0]
                add_in.append(s)
        if m[0, t]:
            add_in.append(conv_bn(b, x, ch[t], 1, relu=True, name=f"{name}.proj{t}"))
        v = add_in[0]
        for other in add_in[1:]:
            v = b.add(v, other)
        if ops[t] == "maxpool3x3":
            v = b.max_pool(v, 3, stride=1, padding=1)
        else:
            k = 3 if ops[t] == "conv3x3-bn-relu" else 1
            v = conv_bn(b, v, ch[t], k, padding=k // 2, relu=True, name=f"{name}.vertex{t}")
        tensors.append(v)
        if m[t, n - 1]:
            concat_in.append(v)
    if not concat_in:
        return conv_bn(b, x, channels, 1, relu=True, name=f"{name}.proj_out")
    out = concat_in[0] if len(concat_in) == 1 else b.concat(concat_in, axis=1)
    if m[0, n - 1]:
        out = b.add(out, conv_bn(b, x, channels, 1, relu=True, name=f"{name}.proj_out"))
    return out


@register("nasbench")
def nasbench(cell: tuple | None = None, stem_channels: int = 128, num_stacks: int = 3,
             cells_per_stack: int = 3, num_classes: int = 10, image_size: int = 32,
             batch_size: int = 1, seed: int | None = 0) -> Graph:
    """A NAS-Bench-101 network; `seed=None` builds a shape-only graph.

    Args:
        cell: (adjacency matrix, ops) of the cell used everywhere, e.g.
            ([[0, 1, 1], [0, 0, 1], [0, 0, 0]], ["input", "conv3x3-bn-relu", "output"]);
            default DEFAULT_CELL.
    """
    m, ops = validate_cell(*(cell if cell is not None else DEFAULT_CELL))
    b = GraphBuilder("nasbench", seed=seed)
    x = b.input("input", [batch_size, 3, image_size, image_size])
    channels = stem_channels
    x = conv_bn(b, x, channels, 3, padding=1, relu=True, name="stem")
    for stack in range(num_stacks):
        if stack > 0:
            x = b.max_pool(x, 2, stride=2)
            channels *= 2
        for i in range(cells_per_stack):
            x = build_cell(b, x, channels, m, ops, name=f"stack{stack}.cell{i}")
    x = b.reduce_mean(x, [2, 3], keepdims=False)
    b.output(b.gemm(x, num_classes, name="dense"), "output")
    return b.build()
