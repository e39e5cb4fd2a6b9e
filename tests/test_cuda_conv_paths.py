"""The executor's own convolution paths beside cuDNN's algorithms (library_ops.h):

- pointwise convolutions (1x1, stride 1, unpadded, one group) as one cuBLASLt GEMM per
  image (Y[K, HW] = W[K, C] X[C, HW]) with our bias / residual / activation epilogue
  after it (kConvAlgoGemm);
- depthwise convolutions (one group per channel) on our own kernel, padding read as
  zeros in place, the epilogue before its one write (kConvAlgoDepthwise).

Forced through a tuning plan, each gives the numpy reference's outputs for the shapes
of real exports, every epilogue the executor fuses, batch sizes above 1 and each math
mode; the timed search offers each only where it applies; a plan that asks for one
elsewhere raises a typed error.

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

GEMM = 100  # kConvAlgoGemm
DEPTHWISE = 101  # kConvAlgoDepthwise
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2}


def _convs(g: te.Graph) -> dict[str, int]:
    """{builder name: Conv2D op id} (the op is named by its weight, "<name>.weight")."""
    return {g.ops[op.inputs[1].op].name.removesuffix(".weight"): op.id for op in g.ops if op.type == "Conv2D"}


def _check(g: te.Graph, plan, math: str) -> dict:
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    with cb.Executor(g, math=math, plan=plan) as ex:
        got = ex.run(feeds)
        choices = ex.conv_choices()
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        err = float(np.max(np.abs(got[name].astype(np.float64) - ref)))
        assert err <= TOLERANCE[math] * scale, (g.name, math, name, err, scale)
    return choices


# ---- pointwise convolutions: the GEMM path --------------------------------------------

def _pointwise_block(batch: int, channels: int, out: int, side: int) -> te.Graph:
    """Pointwise convs with each epilogue the executor fuses: residual Add + ReLU, Clip
    (ReLU6), none; one without a bias; one strided 1x1 and one 3x3 (not pointwise)."""
    b = te.GraphBuilder(f"pointwise_{batch}_{channels}_{out}_{side}", seed=0)
    x = b.input("x", [batch, channels, side, side])
    skip = b.conv2d(x, out, 1, name="skip")
    y = b.relu(b.add(b.conv2d(x, out, 1, name="main"), skip))
    y = b.op("Clip", [b.conv2d(y, out, 1, name="six")], min=0.0, max=6.0)
    y = b.conv2d(y, channels, 1, bias=False, name="plain")
    b.output(b.conv2d(y, out, 1, stride=2, name="strided"), "strided")
    b.output(b.conv2d(y, out, 3, padding=1, name="wide"), "wide")
    g = b.build()
    return g.with_weights(g.random_weights(0))


POINTWISE = ("skip", "main", "six", "plain")


def _pointwise(g: te.Graph) -> list[int]:
    ids = [i for name, i in _convs(g).items() if name in POINTWISE]
    assert len(ids) == len(POINTWISE)
    return ids


@pytest.mark.parametrize("math", ["fp32", "tf32", "fp16"])
@pytest.mark.parametrize("shape", [(1, 64, 32, 7), (2, 48, 40, 5), (1, 96, 24, 1), (3, 16, 8, 14)])
def test_gemm_path_matches_the_reference(shape, math):
    g = _pointwise_block(*shape)
    plan = {c: {"conv_algo": GEMM, "conv_math": 3 if math == "fp32" else 0} for c in _pointwise(g)}
    choices = _check(g, plan, math)
    assert all(choices[c]["conv_algo"] == GEMM for c in _pointwise(g))


def test_timed_search_offers_the_gemm_for_pointwise_convolutions_only():
    g = _pointwise_block(1, 64, 32, 7)
    by_name = _convs(g)
    assert len(by_name) == 6
    for name, conv in by_name.items():
        for math in ("fp32", "tf32"):
            algos = {c["conv_algo"] for c in cb.conv_choice_space(g, conv, False, math=math)}
            assert (GEMM in algos) == (name in POINTWISE), (name, math, algos)


def test_default_choice_runs_a_many_channel_pointwise_conv():
    """960 channels at 7x7: cuDNN's strict-fp32 kernels take ~25 us here on the H100, the
    GEMM ~10 us; whichever the search picks (in 16-bit modes: the graph API's engine or
    the GEMM) computes the reference's output."""
    b = te.GraphBuilder("wide_pointwise", seed=0)
    x = b.input("x", [1, 960, 7, 7])
    b.output(b.relu(b.conv2d(x, 160, 1, name="squeeze")), "y")
    g = b.build()
    g = g.with_weights(g.random_weights(0))
    for math in ("fp32", "tf32", "fp16"):
        _check(g, None, math)


def test_gemm_plan_on_a_non_pointwise_conv_is_a_typed_error():
    g = _pointwise_block(1, 16, 8, 7)
    for conv in (_convs(g)["wide"], _convs(g)["strided"]):
        with pytest.raises(ValueError, match="GEMM path"):
            cb.Executor(g, plan={conv: {"conv_algo": GEMM}})
    pointwise = _pointwise(g)[0]
    with pytest.raises(ValueError, match="fused call"):
        cb.Executor(g, plan={pointwise: {"conv_algo": GEMM, "conv_fused_call": 1}})


# ---- depthwise convolutions: our kernel ------------------------------------------------

# (kernel, stride, padding, dilation): MobileNet / EfficientNet 3x3 and 5x5, ConvNeXt 7x7,
# TF-style SAME padding (more at the bottom / right), a dilated one (DeepLab)
CONFIGS = [(3, 1, 1, 1), (3, 2, 1, 1), (5, 2, 2, 1), (7, 1, 3, 1), (3, 2, (0, 0, 1, 1), 1), (3, 1, 2, 2)]


def _depthwise_block(batch: int, channels: int, side: int, kernel, stride, padding, dilation) -> te.Graph:
    """A depthwise conv with each epilogue the executor fuses: ReLU, a residual Add where
    the shapes allow it, Clip (ReLU6), HardSwish; then a plain one without a bias."""
    b = te.GraphBuilder(f"depthwise_{batch}_{channels}_{side}_{kernel}_{stride}", seed=0)
    x = b.input("x", [batch, channels, side, side])
    dw = dict(stride=stride, padding=padding, dilation=dilation, groups=channels)
    y = b.relu(b.conv2d(x, channels, kernel, name="first", **dw))
    if stride == 1:
        y = b.relu(b.add(b.conv2d(y, channels, kernel, name="residual", **dw), y))
    y = b.op("Clip", [b.conv2d(y, channels, 3, padding=1, groups=channels, name="six")], min=0.0, max=6.0)
    y = b.op("HardSwish", [b.conv2d(y, channels, 3, padding=1, groups=channels, name="swish")])
    b.output(b.conv2d(y, channels, 3, padding=1, groups=channels, bias=False, name="plain"), "y")
    b.output(b.conv2d(y, 2 * channels, 3, padding=1, groups=channels, name="multiplier"), "multiplied")
    g = b.build()
    return g.with_weights(g.random_weights(0))


def _depthwise(g: te.Graph) -> list[int]:
    return [i for name, i in _convs(g).items() if name != "multiplier"]


@pytest.mark.parametrize("math", ["fp32", "tf32", "fp16"])
@pytest.mark.parametrize("config", CONFIGS)
def test_depthwise_kernel_matches_the_reference(config, math):
    for batch, channels, side in ((1, 24, 15), (2, 8, 9)):
        g = _depthwise_block(batch, channels, side, *config)
        plan = {c: {"conv_algo": DEPTHWISE, "conv_math": 3 if math == "fp32" else 0} for c in _depthwise(g)}
        choices = _check(g, plan, math)
        assert all(choices[c]["conv_algo"] == DEPTHWISE for c in _depthwise(g))


def test_timed_search_offers_the_kernel_for_depthwise_convolutions_only():
    g = _depthwise_block(1, 16, 14, 3, 1, 1, 1)
    for name, conv in _convs(g).items():
        algos = {c["conv_algo"] for c in cb.conv_choice_space(g, conv, False, math="fp32")}
        assert (DEPTHWISE in algos) == (name != "multiplier"), (name, algos)


def test_default_choice_runs_convnext_depthwise_convs():
    """ConvNeXt's 7x7 depthwise convolutions, whichever implementation the search picks."""
    b = te.GraphBuilder("convnext_dw", seed=0)
    x = b.input("x", [1, 96, 56, 56])
    b.output(b.conv2d(x, 96, 7, padding=3, groups=96, name="dw"), "y")
    g = b.build()
    g = g.with_weights(g.random_weights(0))
    for math in ("fp32", "tf32", "fp16"):
        _check(g, None, math)


def test_depthwise_plan_elsewhere_is_a_typed_error():
    g = _depthwise_block(1, 8, 7, 3, 1, 1, 1)
    with pytest.raises(ValueError, match="depthwise kernel"):
        cb.Executor(g, plan={_convs(g)["multiplier"]: {"conv_algo": DEPTHWISE}})
    with pytest.raises(ValueError, match="fused call"):
        cb.Executor(g, plan={_convs(g)["first"]: {"conv_algo": DEPTHWISE, "conv_fused_call": 1}})
