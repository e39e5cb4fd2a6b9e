"""The NAS recurrent cell (Zoph & Le, "Neural Architecture Search with Reinforcement
Learning", ICLR 2017, Fig. 8 / appendix), unrolled as in TASO's benchmark
(jiazhihao/TASO, examples/nasrnn.py): hidden size 512, batch 1, `seq_len` = 5 steps.

Input "input" [5, 1, 512] -> Split on axis 0 -> Reshape each step to x_t [1, 512];
output "output" [1, 512], the hidden state after the last step. The initial state h_0 is
a weight [1, 512] (as in TASO).

One step (h = previous state, x = x_t): eight leaf combinations
t_i = x @ W_i + h @ U_i (16 MatMuls and 8 Adds), then the published cell tree

    m0 = relu(t0) + sigmoid(t3)        m1 = sigmoid(t1) + tanh(t2)
    m2 = sigmoid(t4) * tanh(t5)        m3 = sigmoid(t6) * relu(t7)
    m4 = sigmoid(m1) + tanh(m2)        m5 = tanh(m0) * tanh(m3)
    m6 = tanh(m4) * tanh(m5)           h' = tanh(m6)

per step: 16 MatMul, 11 Add, 4 Mul, 5 Sigmoid, 8 Tanh, 2 Relu (plus a Reshape). The 16
weight matrices [512, 512] are shared by all steps (`share_weights=True`, a real RNN:
4,194,816 parameters with h_0); TASO's script creates fresh weights at every step, which
`share_weights=False` reproduces (20,972,032 parameters). The op structure is the same.
"""

from __future__ import annotations

from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.graph import Graph
from taso_env.graphs import register


def nas_cell(b: GraphBuilder, x: Tensor, h: Tensor, weights: list[tuple[Tensor, Tensor]]) -> Tensor:
    """One step of the NAS cell; `weights` holds the 8 (W_i for x, U_i for h) pairs."""
    t = [b.add(b.matmul(x, wx), b.matmul(h, wh)) for wx, wh in weights]
    m0 = b.add(b.relu(t[0]), b.sigmoid(t[3]))
    m1 = b.add(b.sigmoid(t[1]), b.tanh(t[2]))
    m2 = b.mul(b.sigmoid(t[4]), b.tanh(t[5]))
    m3 = b.mul(b.sigmoid(t[6]), b.relu(t[7]))
    m4 = b.add(b.sigmoid(m1), b.tanh(m2))
    m5 = b.mul(b.tanh(m0), b.tanh(m3))
    m6 = b.mul(b.tanh(m4), b.tanh(m5))
    return b.tanh(m6)


@register("nasrnn")
def nasrnn(seq_len: int = 5, hidden: int = 512, batch_size: int = 1, share_weights: bool = True,
           seed: int | None = 0) -> Graph:
    """The NAS RNN cell unrolled `seq_len` steps; `seed=None` builds a shape-only graph."""
    b = GraphBuilder("nasrnn", seed=seed)
    seq = b.input("input", [seq_len, batch_size, hidden])
    steps = b.split(seq, 0, [1] * seq_len) if seq_len > 1 else [seq]
    h = b.weight("h0", [batch_size, hidden])

    def new_weights(step: int) -> list[tuple[Tensor, Tensor]]:
        return [(b.weight(f"cell{step}.w{i}", [hidden, hidden]),
                 b.weight(f"cell{step}.u{i}", [hidden, hidden])) for i in range(8)]

    weights = new_weights(0)
    for step, x in enumerate(steps):
        if step > 0 and not share_weights:
            weights = new_weights(step)
        h = nas_cell(b, b.reshape(x, [batch_size, hidden]), h, weights)
    b.output(h, "output")
    return b.build()
