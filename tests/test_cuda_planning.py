"""The CUDA executor's planning passes (csrc/gpu/planning.h), one test each on small
graphs: needed ops, the arena, constant folding, fusions, in-place views and the step
plan, read from `Executor.planning_report()`; the backend's switches as options.

The GPU tests are skipped cleanly where the backend is not built or there is no GPU.
"""

import numpy as np
import pytest

import taso_env as te
from taso_env.engine import reference
from taso_env.gpu import cuda_backend as cb

needs_gpu = pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))


def _executor(g: te.Graph, **kwargs) -> cb.Executor:
    """An executor of `g` with the executor's own choices (no stored tuning plan)."""
    return cb.Executor(g, plan=None, **kwargs)


def _runs_like_the_reference(ex: cb.Executor, g: te.Graph, rtol: float = 1e-4) -> None:
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = ex.run(feeds)
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        assert float(np.max(np.abs(got[name].astype(np.float64) - ref))) <= rtol * scale, name


def test_switches_come_from_the_caller_else_from_the_environment(monkeypatch):
    for name in (cb.FUSE_ENV, cb.CUDNN_FIND_ENV, cb.TUNE_LOG_ENV):
        monkeypatch.delenv(name, raising=False)
    assert cb.backend_switches() == cb.BackendSwitches(fuse=True, cudnn_find=True, tune_log=False)
    monkeypatch.setenv(cb.FUSE_ENV, "0")
    monkeypatch.setenv(cb.CUDNN_FIND_ENV, "0")
    monkeypatch.setenv(cb.TUNE_LOG_ENV, "")
    assert cb.backend_switches() == cb.BackendSwitches(fuse=False, cudnn_find=False, tune_log=True)
    assert cb.backend_switches(fuse=True, tune_log=False) == cb.BackendSwitches(True, False, False)
    monkeypatch.setenv(cb.FUSE_ENV, "1")
    assert cb.backend_switches().fuse


@pytest.mark.cuda
@needs_gpu
def test_needed_ops_are_those_the_outputs_read():
    b = te.GraphBuilder("needed", seed=0)
    x = b.input("x", [1, 256])
    y = b.relu(x)
    dead = b.sigmoid(b.add(x, b.weight("unused", [1, 256])))  # reaches no output
    b.output(y, "y")
    g = b.build()
    with _executor(g) as ex:
        report = ex.planning_report()
        assert report.needed == (x.ref.op, y.ref.op)
        assert dead.ref.op not in report.offsets and report.step_of(dead.ref.op) is None
        assert ex.num_steps == 1
        _runs_like_the_reference(ex, g)


@pytest.mark.cuda
@needs_gpu
def test_the_arena_holds_each_needed_tensor_once_aligned_and_shifted():
    b = te.GraphBuilder("arena", seed=0)
    x = b.input("x", [1, 1000])  # 4000 bytes in fp32: padded to 4096
    y = b.relu(x)
    r = b.reshape(y, [10, 100])
    b.output(r, "r")
    g = b.build()
    with _executor(g) as ex:
        report = ex.planning_report()
        assert report.arena_bytes == ex.arena_bytes == 2 * 4096
        assert report.offsets[x.ref.op] == (0,) and report.offsets[y.ref.op] == (4096,)
        assert report.aliases == (r.ref.op,) and report.offsets[r.ref.op] == report.offsets[y.ref.op]
    with _executor(g, arena_offset=512) as ex:
        shifted = ex.planning_report()
        assert shifted.arena_bytes == 512 + 2 * 4096
        assert shifted.offsets[y.ref.op] == (512 + 4096,)
    with _executor(g, math="fp16") as ex:  # float32 tensors stored 16-bit: 2000 bytes, padded to 2048
        assert ex.planning_report().arena_bytes == 2 * 2048


@pytest.mark.cuda
@needs_gpu
def test_a_weight_only_subgraph_is_folded_before_the_first_run():
    b = te.GraphBuilder("folding", seed=0)
    x = b.input("x", [4, 32])
    total = b.add(b.weight("a", [32, 32]), b.weight("b", [32, 32]))
    w = b.relu(total)  # computed from weights alone
    y = b.matmul(x, w)
    b.output(y, "y")
    g = b.build()
    with _executor(g) as ex:
        report = ex.planning_report()
        assert report.folded == (total.ref.op, w.ref.op)
        assert all(report.step_of(op).constant for op in report.folded)
        assert not report.step_of(y.ref.op).constant
        assert ex.num_steps == sum(not s.constant for s in report.steps) == 1
        _runs_like_the_reference(ex, g)


@pytest.mark.cuda
@needs_gpu
def test_a_conv_relu_chain_fuses_into_one_step_and_only_with_fusion_on():
    b = te.GraphBuilder("conv_relu", seed=0)
    x = b.input("x", [1, 8, 14, 14])
    c = b.conv2d(x, 16, 3, padding=1, name="c")
    y = b.relu(c)
    t = b.transpose(b.input("q", [2, 16, 8]), [0, 2, 1])
    z = b.matmul(t, b.weight("m", [16, 4]))
    s = b.sigmoid(b.mul(z, z))
    b.output(y, "y")
    b.output(s, "s")
    g = b.build()
    with _executor(g) as ex:
        report = ex.planning_report()
        conv = report.step_of(c.ref.op)
        assert (conv.op, conv.call, conv.ops) == (y.ref.op, "conv", (c.ref.op, y.ref.op))
        assert report.strided_views == (t.ref.op,)  # the GEMM reads the Transpose strided
        assert report.step_of(z.ref.op).call == "gemm"
        chain = report.step_of(s.ref.op)
        assert chain.call == "chain" and s.ref.op in chain.ops and len(chain.ops) >= 2
        assert ex.num_steps == 3
        _runs_like_the_reference(ex, g)
    with _executor(g, fuse=False) as ex:
        report = ex.planning_report()
        assert report.step_of(c.ref.op).ops == (c.ref.op,) and report.step_of(y.ref.op).call == "op"
        assert report.strided_views == () and report.fused_ops == 0
        assert ex.num_steps == 6  # conv, relu, transpose, matmul, mul, sigmoid
        _runs_like_the_reference(ex, g)


@pytest.mark.cuda
@needs_gpu
def test_concat_inputs_write_into_their_slices_and_split_parts_are_slices():
    b = te.GraphBuilder("in_place", seed=0)
    x = b.input("x", [1, 8, 8, 8])
    left, right = b.conv2d(x, 16, 3, padding=1, name="l"), b.conv2d(x, 16, 1, name="r")
    cat = b.concat([left, right], 1)
    b.output(b.relu(cat), "y")
    h = b.matmul(b.input("h", [1, 32]), b.weight("gates", [32, 3 * 64]))
    i, f, o = b.split(h, 1, [64, 64, 64])
    b.output(b.add(b.mul(i, f), o), "g")
    g = b.build()
    with _executor(g) as ex:
        report = ex.planning_report()
        assert report.in_place_concats == (cat.ref.op,) and report.step_of(cat.ref.op) is None
        slice_bytes = 16 * 8 * 8 * 4
        assert report.offsets[left.ref.op] == report.offsets[cat.ref.op]
        assert report.offsets[right.ref.op] == (report.offsets[cat.ref.op][0] + slice_bytes,)
        split = i.ref.op
        assert report.in_place_splits == (split,)
        assert report.offsets[split] == tuple(report.offsets[h.ref.op][0] + k * 64 * 4 for k in range(3))
        _runs_like_the_reference(ex, g)
    with _executor(g, fuse=False) as ex:
        report = ex.planning_report()
        assert report.in_place_concats == () and report.in_place_splits == ()
        assert report.step_of(cat.ref.op).call == "op"


@pytest.mark.cuda
@needs_gpu
def test_the_step_plan_runs_each_needed_op_once_and_a_reshape_as_a_view():
    b = te.GraphBuilder("steps", seed=0)
    x = b.input("x", [2, 3, 8, 8])
    y = b.relu(b.conv2d(x, 4, 3, padding=1, name="c"))
    flat = b.reshape(y, [2, 256])
    out = b.linear(flat, 10, name="fc")
    b.output(out, "y")
    g = b.build()
    with _executor(g) as ex:
        report = ex.planning_report()
        assert [s.op for s in report.steps] == sorted(s.op for s in report.steps)
        computed = [op for s in report.steps for op in s.ops]
        assert len(computed) == len(set(computed))
        sources = {op.id for op in g.ops if op.type in ("Input", "Weight")}
        elsewhere = set(report.aliases) | set(report.strided_views) | set(report.in_place_concats)
        assert set(computed) | sources | elsewhere == set(report.needed)
        assert report.step_of(flat.ref.op) is None and flat.ref.op in report.aliases
        assert ex.num_steps == len(report.steps) == 2  # conv + relu, the GEMM with its bias
        assert report.fused_ops == 2  # the Relu and the bias Add
        _runs_like_the_reference(ex, g)


@pytest.mark.cuda
@needs_gpu
def test_the_host_computes_the_plan_the_executor_runs():
    b = te.GraphBuilder("host_plan", seed=0)
    x = b.input("x", [1, 8, 14, 14])
    y = b.relu(b.add(b.conv2d(x, 8, 3, padding=1, name="c"), x))
    b.output(b.reshape(y, [1, 8 * 14 * 14]), "y")
    g = b.build()
    for kwargs in ({}, {"fuse": False}, {"math": "fp16", "arena_offset": 256}):
        with _executor(g, **kwargs) as ex:
            assert cb.planning_report(g, **kwargs) == ex.planning_report()


@pytest.mark.cuda
@needs_gpu
def test_the_fuse_option_is_what_the_environment_variable_sets(monkeypatch):
    from graph_fixtures import conv_epilogue_graph

    g = conv_epilogue_graph("add_relu")
    monkeypatch.setenv(cb.FUSE_ENV, "0")
    with _executor(g) as ex:
        assert ex.switches.fuse is False and ex.planning_report() == cb.planning_report(g, fuse=False)
        unfused = ex.num_steps
    with _executor(g, fuse=True) as ex:  # the caller's option wins
        assert ex.num_steps == unfused - 2
