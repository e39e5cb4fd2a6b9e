"""The CUDA backend's 16-bit math modes on a GPU: every float32 tensor stored as float16 /
bfloat16 on the device (weights and inputs cast at upload, outputs returned as float32),
float32 accumulation. Outputs are checked against the float32 numpy reference with the
tolerances the modes state (docs/gpu.md): max abs diff <= RTOL[mode] x the output's
scale (max |reference|).

Skipped cleanly where the backend is not built or there is no GPU.
"""

from pathlib import Path

import numpy as np
import pytest
from graph_fixtures import all_ops_graph
from test_cuda import assert_close

import taso_env as te
from taso_env.engine import reference

_cuda = pytest.importorskip("taso_env._cuda", reason="the CUDA backend is not built here")
from taso_env.gpu import cuda_backend as cb  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))]

MODELS = Path(__file__).resolve().parent.parent / "data" / "models"
# float16 keeps 11 significant bits, bfloat16 8: rounding every stored tensor of a deep
# graph costs a few units of the last place, relative to the output's scale.
RTOL = {"fp16": 1e-2, "bf16": 6e-2}
MODES = sorted(RTOL)


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.max(np.abs(want))), 1e-6)
    return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64)))) / scale


def check(g: te.Graph, math: str):
    """Runs `g` in `math` on random inputs; outputs float32 and within RTOL[math] of the
    float32 reference (integer outputs exactly equal)."""
    feeds = g.random_inputs(0)
    assert_close(cb.run(g, feeds, math=math), reference.run(g, feeds), RTOL[math], f"{g.name} {math}")


@pytest.mark.parametrize("math", MODES)
def test_all_ops_graph_runs_in_16_bit(math):
    check(all_ops_graph(), math)


@pytest.mark.parametrize("math", MODES)
@pytest.mark.parametrize("name", ["squeezenet", "resnet18", "inception_v3", "nasrnn", "bert_base", "vit_base"])
def test_builder_graph_runs_in_16_bit(name, math):
    check(te.graphs.build(name, seed=0), math)


@pytest.mark.parametrize("math", MODES)
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v3_large", "vit_b_16", "bert_base"])
def test_zoo_export_runs_in_16_bit(model, math):
    g = te.load_onnx(MODELS / f"{model}.onnx")
    g = g.with_weights(g.random_weights(0))
    check(g, math)


@pytest.mark.parametrize("math", MODES)
def test_optimised_graph_in_16_bit_matches_the_original_in_float32(math):
    g = te.graphs.build("inception_v3", seed=0)
    best = te.optimize(g, "backtracking", budget=30)
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    got = cb.run(best, feeds, math=math)
    for name in want:
        assert rel_err(got[name], want[name]) <= RTOL[math]


def test_16_bit_is_not_float32_and_fp16_is_closer_than_bf16():
    # the modes really store 16 bits (not a float32 run with another name), and fp16's
    # longer mantissa shows
    g = te.graphs.build("resnet18", seed=0)
    feeds = g.random_inputs(0)
    want = reference.run(g, feeds)
    errs = {m: max(rel_err(cb.run(g, feeds, math=m)[k], want[k]) for k in want) for m in ("fp32", "fp16", "bf16")}
    assert errs["fp32"] < 1e-4 < errs["fp16"] < errs["bf16"]


def test_inputs_are_cast_at_upload_and_outputs_read_back_as_float32():
    from taso_env.engine.builder import GraphBuilder

    b = GraphBuilder("cast")
    x = b.input("x", [1, 4, 8])
    b.output(b.relu(b.add(x, b.weight("w", [1, 4, 8], value=np.zeros((1, 4, 8), np.float32)))), "y")
    g = b.build()
    feeds = {"x": np.full((1, 4, 8), 1.0 + 2 ** -12, np.float32)}  # not a float16 / bfloat16 value
    for math, stored in (("fp16", np.float16), ("fp32", np.float32)):
        with cb.Executor(g, math=math) as ex:
            y = ex.run(feeds)["y"]
        assert y.dtype == np.float32
        np.testing.assert_array_equal(y, feeds["x"].astype(stored).astype(np.float32))


@pytest.mark.parametrize("math", MODES)
def test_measurement_in_16_bit_uses_cuda_graphs(math):
    g = te.graphs.build("resnet18", seed=None)
    with cb.Executor(g, math=math) as ex:
        m = ex.measure(warmup=3, repeats=10)
    assert m.cuda_graph and m.math == math and m.median_ms > 0


def test_op_costs_measure_in_16_bit():
    rows, skipped = cb.measure_op_costs(te.graphs.build("squeezenet", seed=None), math="fp16")
    assert rows and not skipped and all(ms > 0 for _, _, ms, _ in rows)
    sig = rows[0][0]
    assert cb.measure_signature(sig, "fp16") > 0


def test_unknown_math_mode_is_refused():
    with pytest.raises(ValueError, match="math mode"):
        cb.Executor(te.graphs.build("squeezenet", seed=None), math="fp8")
