"""The CUDA executor's convolution epilogue fusion (csrc/gpu/fusion.h) and its timed
algorithm choice: every fused pattern, and every pattern that must not fuse, matches
the numpy reference executor in strict fp32, with fusion on and off.

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


def _close(g: te.Graph, monkeypatch, fuse: bool, rtol: float = 1e-4):
    monkeypatch.setenv("RLFLOW_FUSE", "1" if fuse else "0")
    g = g.with_weights(g.random_weights(0))
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds)
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        err = float(np.max(np.abs(got[name].astype(np.float64) - ref)))
        assert err <= rtol * scale, f"{g.name} {name}: {err:.3g} > {rtol} x {scale:.3g}"


def _graph(pattern: str, bias: bool = True) -> te.Graph:
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


PATTERNS = ["relu", "relu6", "add_hardswish", "clip_not_relu6",
            "add", "add_swapped_relu", "add_relu", "two_convs_add_relu", "conv_read_twice",
            "relu_is_output", "broadcast_add", "asym_pads_strided"]


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pattern", PATTERNS)
def test_fused_conv_epilogues_match_the_reference(pattern, bias, fuse, monkeypatch):
    _close(_graph(pattern, bias), monkeypatch, fuse)


def test_fusion_removes_steps(monkeypatch):
    g = _graph("add_relu")
    monkeypatch.setenv("RLFLOW_FUSE", "0")
    with cb.Executor(g) as ex:
        plain = ex.num_steps
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    with cb.Executor(g) as ex:
        assert ex.num_steps == plain - 2


def test_resnet_blocks_fused_match_the_reference_in_tf32(monkeypatch):
    monkeypatch.setenv("RLFLOW_FUSE", "1")
    g = te.graphs.build("resnet50", seed=0) if "resnet50" in te.graphs.names() else _graph("add_relu")
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds, math="tf32")
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        assert float(np.max(np.abs(got[name] - ref))) <= 2e-2 * scale


def test_algorithm_choices_persist_in_the_cache_file(tmp_path, monkeypatch):
    path = tmp_path / "algos.tsv"
    monkeypatch.setenv("RLFLOW_CONV_ALGO_CACHE", str(path))
    # The file is read once per process; choices of configurations new to this process
    # are appended. A configuration no earlier test used:
    b = te.GraphBuilder("fresh", seed=0)
    y = b.conv2d(b.input("x", [1, 5, 11, 13]), 7, [3, 5], padding=[1, 2], name="c")
    b.output(y, "y")
    cb.run(b.build(), {"x": np.ones((1, 5, 11, 13), np.float32)})
    lines = path.read_text().splitlines()
    assert lines and all(len(line.split("\t")) == 2 and "x1x5x11x13" in line for line in lines)
