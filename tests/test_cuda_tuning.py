"""Tuning plans on the CUDA executor (docs/tuning.md): every recorded cuDNN choice, fusion
off, and any launch parameters of our kernels give the numpy reference's outputs; bad
plans raise typed errors; the plan store is picked up by `plan="auto"`.

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


def _graph() -> te.Graph:
    b = te.GraphBuilder("tune_block", seed=0)
    x = b.input("x", [1, 8, 14, 14])
    y = b.relu(b.add(b.conv2d(x, 16, 3, padding=1, name="c"), b.conv2d(x, 16, 1, name="d")))
    y = b.op("Clip", [b.conv2d(y, 16, 3, padding=1, name="e")], min=0.0, max=6.0)
    b.output(b.add(y, y), "y")
    g = b.build()
    return g.with_weights(g.random_weights(0))


def _check(g, plan, math="fp32"):
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(g, feeds, math=math, plan=plan)
    for name, ref in want.items():
        scale = max(float(np.max(np.abs(ref))), 1e-6)
        tol = 1e-4 if math == "fp32" else 5e-3
        assert float(np.max(np.abs(got[name] - ref))) <= tol * scale, plan


def test_every_recorded_conv_choice_and_fusion_off_match_the_reference():
    g = _graph()
    sites = {s["conv"]: s for s in cb.fusion_sites(g)}
    convs = [op.id for op in g.ops if op.type == "Conv2D"]
    assert sites, "the block has fusable epilogues"
    for conv in convs:
        for fused in ([True, False] if conv in sites else [False]):
            cands = cb.conv_choice_space(g, conv, fused, math="fp32")
            assert cands and all(c["ms"] > 0 and c["conv_math"] == 3 for c in cands)  # strict fp32: FMA only
            for c in cands:
                choice = {k: c[k] for k in ("conv_algo", "conv_math", "conv_fused_call")}
                _check(g, {conv: {**choice, "fuse": 1 if fused else 0}})


def test_fusion_off_and_launch_parameters():
    g = _graph()
    conv = next(iter(s["conv"] for s in cb.fusion_sites(g)))
    with cb.Executor(g, plan=None) as ex:
        fused = ex.fused_ops
        assert set(ex.conv_choices()) == {op.id for op in g.ops if op.type == "Conv2D"}
    convs = [op.id for op in g.ops if op.type == "Conv2D"]
    # (fused_ops also counts element-wise chains, which run whatever the convs do.)
    with cb.Executor(g, plan={c: {"fuse": 0} for c in convs}) as ex:
        assert all(ch["fuse"] == 0 for ch in ex.conv_choices().values()) and ex.fused_ops < fused
    # Unfusing one conv of a residual Add keeps the Add and ReLU separate: the other conv
    # does not fold them instead.
    add = next(op for op in g.ops if op.type == "Add" and conv in {r.op for r in op.inputs})
    other = next(r.op for r in add.inputs if r.op != conv)
    with cb.Executor(g, plan={conv: {"fuse": 0}}) as ex:
        assert ex.conv_choices()[conv]["fuse"] == 0 and ex.conv_choices()[other]["fuse"] == 0
    elementwise = [op.id for op in g.ops if op.type in ("Add", "Relu", "Clip")]
    for threads, items in [(32, 1), (128, 4), (1024, 2), (512, 64)]:
        _check(g, {i: {"threads": threads, "items_per_thread": items} for i in elementwise}
               | {conv: {"fuse": 0}})
    assert cb.measure_op_launch(g, elementwise[0], 1024, 4) > 0


def test_bad_plans_raise_typed_errors():
    g = _graph()
    conv = next(op.id for op in g.ops if op.type == "Conv2D")
    relu = next(op.id for op in g.ops if op.type == "Relu")
    with pytest.raises(IndexError, match="op id"):
        cb.Executor(g, plan={10_000: {"threads": 64}})
    with pytest.raises(ValueError, match="not a Conv2D"):
        cb.Executor(g, plan={relu: {"conv_algo": 1}})
    with pytest.raises(ValueError, match="multiple of 32"):
        cb.Executor(g, plan={relu: {"threads": 100}})
    with pytest.raises(ValueError, match="FMA"):
        cb.Executor(g, math="fp32", plan={conv: {"conv_algo": 1, "conv_math": 0}})
    with pytest.raises(ValueError, match="does not exist"):
        cb.Executor(g, plan={conv: {"conv_algo": 99}})
    with pytest.raises(ValueError, match="unknown tuning-plan knobs"):
        cb.Executor(g, plan={conv: {"layout": 1}})


def test_plan_store_is_used_by_auto(tmp_path, monkeypatch):
    from taso_env.gpu import plan_store

    monkeypatch.setenv(plan_store.ENV, str(tmp_path / "plans.json"))
    g = _graph()
    relu = next(op.id for op in g.ops if op.type == "Relu")
    plan = {relu: {"threads": 128, "items_per_thread": 2}}
    assert plan_store.save(g, "fp32", plan, tuned_ms=1.0, default_ms=2.0, tuner="test", trials=1)
    with cb.Executor(g, math="fp32") as ex:
        assert ex.plan == plan
    with cb.Executor(g, math="tf32") as ex:  # another math mode: no plan
        assert ex.plan == {}
    with cb.Executor(g, math="fp32", plan=None) as ex:
        assert ex.plan == {}
