"""Depthwise convolutions by the CUDA executor's own kernel (library_ops.h,
kConvAlgoDepthwise): forced through a tuning plan, the kernel gives the numpy reference's
outputs for the kernel sizes, strides, dilations and paddings (asymmetric ones
included: read as zeros in place) of real exports, every epilogue the executor fuses,
batch sizes above 1 and each math mode; the timed search offers it for depthwise
convolutions only; a plan that asks for it elsewhere raises a typed error.

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

DEPTHWISE = 101  # kConvAlgoDepthwise
TOLERANCE = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2}
# (kernel, stride, padding, dilation): MobileNet / EfficientNet 3x3 and 5x5, ConvNeXt 7x7,
# TF-style SAME padding (more at the bottom / right), a dilated one (DeepLab)
CONFIGS = [(3, 1, 1, 1), (3, 2, 1, 1), (5, 2, 2, 1), (7, 1, 3, 1), (3, 2, (0, 0, 1, 1), 1), (3, 1, 2, 2)]


def _block(batch: int, channels: int, side: int, kernel, stride, padding, dilation) -> te.Graph:
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


def _convs(g: te.Graph) -> dict[str, int]:
    """{builder name: Conv2D op id} (the op is named by its weight, "<name>.weight")."""
    return {g.ops[op.inputs[1].op].name.removesuffix(".weight"): op.id for op in g.ops if op.type == "Conv2D"}


def _depthwise(g: te.Graph) -> list[int]:
    return [i for name, i in _convs(g).items() if name != "multiplier"]


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


@pytest.mark.parametrize("math", ["fp32", "tf32", "fp16"])
@pytest.mark.parametrize("config", CONFIGS)
def test_depthwise_kernel_matches_the_reference(config, math):
    for batch, channels, side in ((1, 24, 15), (2, 8, 9)):
        g = _block(batch, channels, side, *config)
        plan = {c: {"conv_algo": DEPTHWISE, "conv_math": 3 if math == "fp32" else 0} for c in _depthwise(g)}
        choices = _check(g, plan, math)
        assert all(choices[c]["conv_algo"] == DEPTHWISE for c in _depthwise(g))


def test_timed_search_offers_the_kernel_for_depthwise_convolutions_only():
    g = _block(1, 16, 14, 3, 1, 1, 1)
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
    g = _block(1, 8, 7, 3, 1, 1, 1)
    with pytest.raises(ValueError, match="depthwise kernel"):
        cb.Executor(g, plan={_convs(g)["multiplier"]: {"conv_algo": DEPTHWISE}})
    with pytest.raises(ValueError, match="fused call"):
        cb.Executor(g, plan={_convs(g)["first"]: {"conv_algo": DEPTHWISE, "conv_fused_call": 1}})
