"""The CUDA executor's fused element-wise chains (csrc/gpu/elementwise_fusion.h,
kernels_fused.h): GELU and SiLU as ONNX exports write them, broadcast scalars, bias rows,
per-channel scales and attention masks, BERT's scale + mask + Softmax in one kernel,
inputs read through strided views of Transposes, and every pattern that must split a
chain or must not fuse. Each matches the numpy reference executor in strict fp32 with
fusion on and off, and fusion removes the steps it should.

Skipped cleanly where the backend is not built or there is no GPU.
"""

import numpy as np
import pytest

import taso_env as te
from taso_env.engine import reference

pytest.importorskip("taso_env._cuda", reason="the CUDA backend is not built here")
from taso_env.gpu import cuda_backend as cb  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))]

MAX_CHAIN_INPUTS = 8  # kMaxChainInputs (kernels_fused.h)
MAX_CHAIN_OPS = 16    # kMaxChainOps


def _feeds(g: te.Graph) -> tuple[te.Graph, dict]:
    return g.with_weights(g.random_weights(0)), g.random_inputs(0)


def _close(g: te.Graph, monkeypatch, fuse: bool, rtol: float = 1e-4, **kwargs):
    monkeypatch.setenv("RLFLOW_FUSE", "1" if fuse else "0")
    g, feeds = _feeds(g)
    want = reference.run(g, feeds)
    kwargs.setdefault("plan", None)  # the executor's own choices, never a stored plan
    got = cb.run(g, feeds, **kwargs)
    for name, ref in want.items():
        assert np.all(np.isfinite(got[name])), f"{g.name} {name}: non-finite GPU output"
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        err = float(np.max(np.abs(got[name].astype(np.float64) - ref)))
        assert err <= rtol * scale, f"{g.name} {name}: {err:.3g} > {rtol} x {scale:.3g}"


def _scalar(b: te.GraphBuilder, name: str, value: float):
    return b.weight(name, [], value=np.float32(value))


def _gelu_erf(b: te.GraphBuilder, x):
    """GELU as PyTorch's ONNX export writes it: x * (erf(x / sqrt(2)) + 1) * 0.5."""
    t = b.op("Div", [x, _scalar(b, "sqrt2", 1.4142135381698608)])
    t = b.op("Erf", [t])
    t = b.add(t, _scalar(b, "one", 1.0))
    t = b.mul(x, t)
    return b.mul(t, _scalar(b, "half", 0.5))


def _graph(pattern: str) -> te.Graph:
    b = te.GraphBuilder(f"chain_{pattern}", seed=0)
    if pattern == "gelu_erf":
        y = _gelu_erf(b, b.input("x", [2, 16, 64]))
    elif pattern == "gelu_of_bias_add":  # x computed in the chain, read by Div and the Mul
        y = _gelu_erf(b, b.add(b.input("x", [2, 16, 64]), b.weight("bias", [64])))
    elif pattern == "silu":
        x = b.input("x", [2, 32, 7, 7])
        y = b.mul(x, b.sigmoid(x))
    elif pattern == "silu_of_bias_add":
        x = b.add(b.input("x", [2, 32, 7, 7]), b.weight("bias", [32, 1, 1]))
        y = b.mul(b.sigmoid(x), x)
    elif pattern == "scale_bias_mask":  # scalar weight, row bias [N], mask [1, 1, S, S]
        s = b.mul(b.input("s", [2, 4, 16, 16]), _scalar(b, "scale", 0.125))
        y = b.tanh(b.add(b.add(s, b.weight("bias", [16])), b.weight("mask", [1, 1, 16, 16])))
    elif pattern.startswith("attention_softmax_"):  # BERT: scores * scale + mask, Softmax
        seq = int(pattern.rsplit("_", 1)[1])
        s = b.mul(b.input("scores", [2, 3, 4, seq]), _scalar(b, "scale", 0.125))
        y = b.softmax(b.add(s, b.weight("mask", [1, 1, 4, seq])), axis=-1)
    elif pattern == "softmax_alone":
        y = b.softmax(b.input("x", [4, 8, 100]), axis=-1)
    elif pattern == "transposed_input":  # the chain reads the Transpose as a strided view
        t = b.transpose(b.input("x", [2, 8, 4, 16]), [0, 2, 1, 3])
        y = b.relu(b.add(b.mul(t, _scalar(b, "scale", 0.5)), b.weight("bias", [16])))
    elif pattern == "transposed_softmax":  # the softmax rows are strided
        t = b.transpose(b.input("x", [2, 40, 3, 24]), [0, 2, 3, 1])
        y = b.softmax(b.mul(t, _scalar(b, "scale", 0.5)), axis=-1)
    elif pattern == "transposed_odd_sizes":
        t = b.transpose(b.input("x", [3, 5, 7]), [0, 2, 1])
        y = b.tanh(b.op("Sub", [t, b.input("r", [3, 7, 5])]))
    elif pattern == "second_reader":  # Exp's output is read by two chains: it must be written
        a = b.op("Exp", [b.mul(b.input("x", [4, 32]), _scalar(b, "w", 0.5))])
        b.output(b.relu(a), "r")
        y = b.tanh(a)
    elif pattern == "intermediate_is_output":  # the Sigmoid must still be written
        x = b.input("x", [4, 32])
        a = b.sigmoid(x)
        b.output(a, "a")
        y = b.mul(x, a)
    elif pattern == "softmax_middle_axis":  # must not fuse: not the last axis
        y = b.softmax(b.mul(b.input("x", [2, 6, 8]), _scalar(b, "scale", 0.5)), axis=1)
    elif pattern == "softmax_read_twice":  # the Add has a second reader: no softmax prologue
        a = b.add(b.input("x", [3, 50]), b.weight("bias", [50]))
        b.output(a, "a")
        y = b.softmax(a, axis=-1)
    elif pattern == "many_inputs":  # more external inputs than one kernel takes
        y = b.input("x", [2, 16])
        for i in range(MAX_CHAIN_INPUTS + 4):
            y = b.add(y, b.weight(f"w{i}", [16]))
    elif pattern == "many_ops":  # more ops than one program holds
        y = b.input("x", [2, 16])
        for i in range(2 * MAX_CHAIN_OPS + 8):
            y = b.tanh(y) if i % 2 else b.sigmoid(y)
    elif pattern.startswith("every_unary_"):  # every op type, per-channel [C, 1, 1] scale
        w = int(pattern.rsplit("_", 1)[1])
        t = b.mul(b.input("x", [2, 8, w, w]), b.weight("scale", [8, 1, 1]))
        t = b.add(t, b.weight("bias", [1, 8, 1, 1]))
        t = b.op("Clip", [t], min=-1.5, max=2.0)
        t = b.op("HardSigmoid", [t], alpha=0.3, beta=0.4)
        t = b.op("HardSwish", [b.op("Sub", [t, b.weight("row", [w])])])
        t = b.op("Sqrt", [b.relu(t)])
        t = b.gelu(b.op("Exp", [t]))
        y = b.op("Div", [t, b.add(b.tanh(b.input("z", [2, 8, w, w])), _scalar(b, "two", 2.0))])
    elif pattern == "general_broadcast":  # [2, 1, 16] and [8, 1] over [2, 8, 16]; x * x
        x = b.input("x", [2, 8, 16])
        t = b.op("Sub", [b.mul(x, x), b.input("r", [2, 1, 16])])
        y = b.op("Div", [b.weight("w", [8, 1]), b.add(b.relu(t), _scalar(b, "one", 1.0))])
    elif pattern == "head_merge_residual":  # Transpose + Reshape merging strided dims, residual
        t = b.reshape(b.transpose(b.input("ctx", [2, 4, 8, 16]), [0, 2, 1, 3]), [2, 8, 64])
        y = b.add(t, b.input("r", [2, 8, 64]))
    b.output(y, "y")
    return b.build()


PATTERNS = ["gelu_erf", "gelu_of_bias_add", "silu", "silu_of_bias_add", "scale_bias_mask",
            "attention_softmax_16", "attention_softmax_128", "attention_softmax_200", "attention_softmax_1500",
            "softmax_alone", "transposed_input", "transposed_softmax", "transposed_odd_sizes", "second_reader",
            "intermediate_is_output", "softmax_middle_axis", "softmax_read_twice", "many_inputs", "many_ops",
            "every_unary_4", "every_unary_5", "general_broadcast", "head_merge_residual"]


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_chains_match_the_reference(pattern, fuse, monkeypatch):
    _close(_graph(pattern), monkeypatch, fuse)


@pytest.mark.parametrize("pattern", ["gelu_erf", "transposed_input", "every_unary_5", "attention_softmax_128",
                                     "attention_softmax_1500"])
@pytest.mark.parametrize("threads, items", [(32, 3), (1024, 1), (64, 7)])
def test_chains_are_right_under_any_launch_geometry(pattern, threads, items, monkeypatch):
    """A tuning plan's threads / items per thread on the op whose step runs the chain
    (the last one): grid-stride loops and rows per warp still cover every element."""
    g = _graph(pattern)
    last = g.outputs[0].op
    _close(g, monkeypatch, True, plan={last: {"threads": threads, "items_per_thread": items}})


@pytest.mark.parametrize("pattern", ["gelu_erf", "gelu_of_bias_add", "silu_of_bias_add", "every_unary_4",
                                     "general_broadcast", "transposed_input", "many_ops"])
def test_fused_chains_round_like_the_separate_kernels(pattern, monkeypatch):
    """The fused program uses the separate kernels' formulas, and its Add / Mul never
    contract into an FMA: fused and unfused results agree to an ulp or so (exactly, as
    compiled today; the tolerance only allows for the compiler's choices)."""
    g, feeds = _feeds(_graph(pattern))
    outs = {}
    for fuse in ("0", "1"):
        monkeypatch.setenv("RLFLOW_FUSE", fuse)
        outs[fuse] = cb.run(g, feeds, plan=None)
    for name, a in outs["0"].items():
        scale = max(float(np.max(np.abs(a))), 1e-6)
        assert float(np.max(np.abs(a - outs["1"][name]))) <= 1e-6 * scale, name


# pattern: (steps unfused, steps fused). Unfused, every op is a step (a Transpose too);
# fused, a chain is one step and a Transpose read only by chains is a view.
STEPS = {
    "gelu_erf": (5, 1),
    "gelu_of_bias_add": (6, 1),
    "silu_of_bias_add": (3, 1),
    "attention_softmax_128": (3, 1),
    "softmax_alone": (1, 1),
    "transposed_input": (4, 1),
    "second_reader": (4, 3),          # Mul + Exp, Relu, Tanh
    "intermediate_is_output": (2, 2),
    "softmax_middle_axis": (2, 2),
    "softmax_read_twice": (2, 2),
    "many_inputs": (MAX_CHAIN_INPUTS + 4, 2),
    "many_ops": (2 * MAX_CHAIN_OPS + 8, 3),
}


@pytest.mark.parametrize("pattern", sorted(STEPS))
def test_chains_remove_steps(pattern, monkeypatch):
    g = _graph(pattern)
    plain, fused = STEPS[pattern]
    monkeypatch.setenv("RLFLOW_FUSE", "0")
    with cb.Executor(g, plan=None) as ex:
        assert ex.num_steps == plain
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    with cb.Executor(g, plan=None) as ex:
        assert ex.num_steps == fused
        assert ex.fused_ops == plain - fused
