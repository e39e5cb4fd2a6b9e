"""The CUDA executor's cuBLASLt GEMMs (csrc/gpu/gemm_fusion.h, gemm_lt.h) and strided
views (csrc/gpu/views.h): every fused pattern (bias, residual through Reshapes, output
written through a Transpose, Transposed and sliced operands read in place), and every
pattern that must not fuse, matches the numpy reference executor in strict fp32, with
fusion on and off; the zoo's transformers compute the same with and without fusion.

Skipped cleanly where the backend is not built or there is no GPU.
"""

import numpy as np
import pytest

import taso_env as te
from taso_env import dtypes
from taso_env.engine import reference

pytest.importorskip("taso_env._cuda", reason="the CUDA backend is not built here")
from taso_env.gpu import cuda_backend as cb  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))]


def _close(g: te.Graph, monkeypatch, fuse: bool, rtol: float = 1e-4, math: str = "fp32"):
    monkeypatch.setenv("RLFLOW_FUSE", "1" if fuse else "0")
    g = g.with_weights(g.random_weights(0))
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds, math=math)
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        err = float(np.max(np.abs(got[name].astype(np.float64) - ref)))
        assert err <= rtol * scale, f"{g.name} {name}: {err:.3g} > {rtol} x {scale:.3g}"


def _attention(b: te.GraphBuilder, x, heads: int, name: str):
    """BERT's self-attention as the Hugging Face export writes it: per-head Reshape +
    Transpose of Q, K (transposed to [B, H, D, S]) and V, scaled scores, Softmax, the
    context Transposed back and merged, the output projection plus the residual."""
    bsz, seq, width = x.shape
    d = width // heads

    def heads_of(t, perm):
        return b.transpose(b.reshape(t, [bsz, seq, heads, d]), perm)

    q = heads_of(b.linear(x, width, name=f"{name}.q"), [0, 2, 1, 3])
    k = heads_of(b.linear(x, width, name=f"{name}.k"), [0, 2, 3, 1])
    v = heads_of(b.linear(x, width, name=f"{name}.v"), [0, 2, 1, 3])
    scores = b.mul(b.matmul(q, k), b.weight(f"{name}.scale", [], value=np.float32(d ** -0.5)))
    ctx = b.matmul(b.softmax(scores, axis=-1), v)
    ctx = b.reshape(b.transpose(ctx, [0, 2, 1, 3]), [bsz, seq, width])
    return b.add(b.linear(ctx, width, name=f"{name}.o"), x)


def _graph(pattern: str) -> te.Graph:
    b = te.GraphBuilder(f"gemm_{pattern}", seed=0)
    x = b.input("x", [2, 24, 32])
    if pattern == "bias":
        y = b.linear(x, 48)
    elif pattern == "bias_swapped":  # Add(bias, x @ W)
        y = b.add(b.weight("bias", [48]), b.linear(x, 48, bias=False))
    elif pattern == "bias_residual":
        y = b.add(b.linear(x, 32), b.input("r", [2, 24, 32]))
    elif pattern == "residual_through_reshape":  # ViT: Gemm on [S, D], Reshape, Add to [1, S, D]
        x2 = b.input("x2", [24, 32])
        y = b.add(b.reshape(b.gemm(x2, 32), [1, 24, 32]), b.input("r", [1, 24, 32]))
    elif pattern == "gemm_c_matrix":
        x2 = b.input("x2", [24, 32])
        y = b.op("Gemm", [x2, b.weight("w", [32, 16]), b.input("c", [24, 16])])
    elif pattern == "gemm_transposes_and_alpha":
        y = b.op("Gemm", [b.input("at", [32, 24]), b.weight("w", [16, 32]), b.weight("c", [1, 16])],
                 trans_a=1, trans_b=1, alpha=0.5)
    elif pattern == "gemm_beta_not_one":  # stays on the plain GemmOp path
        y = b.op("Gemm", [b.input("x2", [24, 32]), b.weight("w", [32, 16]), b.weight("c", [16])], beta=0.5)
    elif pattern == "relu_matmul":
        y = b.linear(x, 48, bias=False, activation="relu")
    elif pattern == "bias_read_twice":  # the MatMul output has a second reader: no bias fusion
        m = b.linear(x, 48, bias=False)
        y = b.add(b.add(m, b.weight("bias", [48])), m)
    elif pattern == "bias_is_output":
        m = b.linear(x, 32)
        b.output(m, "m")
        y = b.add(m, x)
    elif pattern == "broadcast_not_bias":  # [24, 1] is not a bias along N
        y = b.add(b.linear(x, 48, bias=False), b.weight("col", [24, 1]))
    elif pattern == "attention":
        y = _attention(b, x, heads=4, name="att")
    elif pattern == "transpose_also_read_by_layernorm":  # the Transpose must be copied
        t = b.transpose(b.reshape(x, [2, 24, 4, 8]), [0, 2, 1, 3])
        y = b.add(b.reshape(b.transpose(b.matmul(t, b.weight("w", [8, 8])), [0, 2, 1, 3]), [2, 24, 32]),
                  b.reshape(b.transpose(b.layer_norm(t), [0, 2, 1, 3]), [2, 24, 32]))
    elif pattern == "transpose_is_output":
        t = b.transpose(x, [0, 2, 1])
        b.output(t, "t")
        y = b.matmul(t, b.input("w", [2, 24, 8]))
    elif pattern == "reshape_of_transpose_needs_copy":  # merging strided dims: a copy, still right
        t = b.transpose(b.reshape(x, [2, 24, 4, 8]), [0, 2, 1, 3])
        y = b.matmul(b.reshape(t, [2, 96, 8]), b.weight("w", [8, 8]))
    elif pattern == "chained_transposes":
        t = b.transpose(b.transpose(x, [0, 2, 1]), [0, 2, 1])
        y = b.matmul(t, b.weight("w", [32, 8]))
    elif pattern == "shared_weight_batched":  # [B, S, K] @ [K, N]: the batch folds into rows
        y = b.matmul(b.transpose(b.input("xt", [2, 32, 24]), [0, 2, 1]), b.weight("w", [32, 8]))
    elif pattern == "broadcast_batch_a":  # [S, K] @ [B, K, N]: plain MatMulOp path
        y = b.matmul(b.input("a", [24, 32]), b.input("bb", [2, 32, 8]))
    elif pattern == "vector_operand":  # rank-1 operand: plain MatMulOp path
        y = b.matmul(x, b.weight("v", [32]))
    elif pattern == "scaled_operands":  # known factors fold into alpha; a fed factor does not
        k = b.transpose(b.input("k", [2, 24, 32]), [0, 2, 1])
        y = b.matmul(b.mul(x, b.weight("cq", [1], value=np.float32(0.5))),
                     b.mul(b.weight("ck", [], value=np.float32(-2.0)), k))
        y = b.matmul(b.mul(y, b.input("c", [1])), b.weight("w", [24, 8]))
    elif pattern == "divided_operands":  # x / c folds into alpha (as 1 / c); c / x does not
        k = b.transpose(b.input("k", [2, 24, 32]), [0, 2, 1])
        y = b.matmul(b.op("Div", [x, b.weight("cq", [], value=np.float32(8.0))]),
                     b.op("Div", [b.weight("ck", [1], value=np.float32(-2.0)), k]))
    elif pattern == "constant_gathers":  # ViT's packed QKV: Gathers of known indices are slices
        qkv = b.transpose(b.reshape(b.linear(b.input("s", [24, 32]), 96), [24, 3, 32]), [1, 0, 2])
        q, k, v = (b.op("Gather", [qkv, b.weight(f"i{j}", [], dtypes.INT64, value=np.int64(j - 3 * (j == 2)))],
                        axis=0) for j in range(3))  # index 2 given as -1
        scores = b.softmax(b.matmul(b.mul(q, b.weight("c", [1], value=np.float32(0.3))), b.transpose(k, [1, 0])))
        y = b.add(b.matmul(scores, v), b.op("Gather", [b.reshape(qkv, [3, 24, 32]), b.input("j", [], dtypes.INT64)],
                                            axis=0))
    b.output(y, "y")
    return b.build()


PATTERNS = ["bias", "bias_swapped", "bias_residual", "residual_through_reshape", "gemm_c_matrix",
            "gemm_transposes_and_alpha", "gemm_beta_not_one", "relu_matmul", "bias_read_twice",
            "bias_is_output", "broadcast_not_bias", "attention", "transpose_also_read_by_layernorm",
            "transpose_is_output", "reshape_of_transpose_needs_copy", "chained_transposes",
            "shared_weight_batched", "broadcast_batch_a", "vector_operand", "scaled_operands", "divided_operands",
            "constant_gathers"]


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_gemm_fusions_and_views_match_the_reference(pattern, fuse, monkeypatch):
    _close(_graph(pattern), monkeypatch, fuse)


def test_attention_runs_in_fewer_steps_when_fused(monkeypatch):
    g = _graph("attention")
    monkeypatch.setenv("RLFLOW_FUSE", "0")
    with cb.Executor(g) as ex:
        plain = ex.num_steps
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    with cb.Executor(g) as ex:
        # 4 bias Adds, the residual Add, 4 Transposes (3 read in place by the GEMMs, the
        # context's written by its GEMM) and the scale Mul + Softmax chain.
        assert ex.num_steps <= plain - 9
        assert ex.fused_ops >= 9


def test_constant_gathers_are_views_and_their_index_is_pinned(monkeypatch):
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    g = _graph("constant_gathers")
    with cb.Executor(g, plan=None) as ex:
        # the packed-QKV Transpose, the three constant Gathers and the scale Mul run no step
        assert ex.fused_ops >= 5
        with pytest.raises(ValueError, match="fixed slice"):
            ex._ex.set_source("i0", np.int64(1))
        with pytest.raises(ValueError, match="GEMM scale"):
            ex._ex.set_source("c", np.float32(0.4))
        ex._ex.set_source("c", np.float32(0.3))  # the same value is fine
    monkeypatch.setenv("RLFLOW_FUSE", "0")
    with cb.Executor(g, plan=None) as ex:
        plain = ex.num_steps
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    with cb.Executor(g, plan=None) as ex:
        assert ex.num_steps <= plain - 5


@pytest.mark.parametrize("known", [True, False])
def test_a_known_divisor_folds_into_the_gemm(known, monkeypatch):
    """x / c on a MatMul operand runs no step of its own when c is a one-element weight
    with data (BERT's attention scale once a rule has moved it onto K); a divisor the
    executor cannot know (a graph input) keeps its own step."""
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    b = te.GraphBuilder("divisor")
    c = b.weight("c", [], value=np.float32(8.0)) if known else b.input("c", [])
    k = b.transpose(b.input("k", [2, 32, 24]), [0, 2, 1])  # K^T: read in place, no copy
    y = b.matmul(b.op("Div", [k, c]), b.input("q", [2, 32, 24]))
    b.output(y, "y")
    g = b.build()
    with cb.Executor(g, plan=None) as ex:
        if known:
            assert ex.num_steps == 1
        else:
            assert ex.num_steps >= 2
        feeds = g.random_inputs(0)
        if not known:
            feeds["c"] = np.float32(8.0)
        got = ex.run(feeds)["y"]
    want = reference.run(g, feeds)["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("model", ["bert_base", "vit_b_16"])
def test_zoo_transformers_compute_the_same_fused_and_unfused(model, monkeypatch):
    from taso_env.shipped_data import models

    g = te.load_onnx(models()[model])
    feeds = g.random_inputs(0)
    outs = {}
    for fuse in ("0", "1"):
        monkeypatch.setenv("RLFLOW_FUSE", fuse)
        with cb.Executor(g, opaque="host", seed=3, plan=None) as ex:
            outs[fuse] = ex.run(feeds)
            if fuse == "1":
                assert ex.fused_ops >= 12 * 6  # per layer: bias Adds, residuals, head Transposes, GELU
    for name, a in outs["0"].items():
        scale = max(float(np.max(np.abs(a))), 1e-6)
        assert float(np.max(np.abs(a - outs["1"][name]))) <= 1e-4 * scale, name


def test_gemm_algorithm_choices_persist_and_a_fresh_process_uses_them(tmp_path, monkeypatch):
    """The cuBLASLt algorithm a GEMM configuration is timed to is appended to the file
    RLFLOW_GEMM_ALGO_CACHE names; a later process reads it and times nothing again, so
    two processes (a cost table's measuring and a graph's) run the same kernels."""
    import os
    import subprocess
    import sys

    path = tmp_path / "gemm_algos.tsv"
    monkeypatch.setenv(cb.GEMM_ALGO_CACHE_ENV, str(path))
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    code = ("import numpy as np, taso_env as te; from taso_env.gpu import cuda_backend as cb\n"
            "b = te.GraphBuilder('fresh_gemm', seed=0)\n"  # shapes no other test uses
            "b.output(b.linear(b.input('x', [3, 37, 53]), 29, name='l'), 'y')\n"
            "print(cb.run(b.build(), {'x': np.ones((3, 37, 53), np.float32)})['y'].sum())")
    env = {**os.environ, "RLFLOW_TUNE_LOG": "1"}
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "candidates" in first.stderr  # timed here
    lines = path.read_text().splitlines()
    assert lines and all(len(line.split("\t")) == 2 and len(line.split("\t")[1].split()) == 9 for line in lines)
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "candidates" not in again.stderr  # read from the file, checked, used
    assert float(again.stdout) == float(first.stdout)
    assert path.read_text().splitlines() == lines
    path.write_text("".join(f"{line.split(chr(9))[0]}\tnot an algorithm\n" for line in lines))
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert "candidates" in bad.stderr  # an unreadable line is skipped: timed again
