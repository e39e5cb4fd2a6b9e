"""The CUDA executor's CumSum, Equal and GatherElements steps against the numpy reference
executor: each op over axes, attributes, dtypes and broadcasts, in strict fp32 and with
float32 tensors stored as fp16, and the RoBERTa- and OPT-like position ids end to end.

Skipped cleanly where the backend is not built or there is no GPU.
"""

import numpy as np
import pytest
from position_id_models import opt_position_ids_model, roberta_position_ids_model, token_feeds

import taso_env as te
from taso_env import dtypes
from taso_env.engine import reference

_cuda = pytest.importorskip("taso_env._cuda", reason="the CUDA backend is not built here")
from taso_env.gpu import cuda_backend as cb  # noqa: E402

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not cb.available(), reason=str(cb.unavailable_reason()))]

#: math mode -> relative tolerance against the output's scale (fp16: stored 16-bit)
TOLERANCE = {"fp32": 1e-5, "fp16": 1e-2}


def _assert_matches_reference(g: te.Graph, feeds: dict, math: str = "fp32") -> None:
    want = reference.run(g, feeds)
    got = cb.run(g, feeds, math=math)
    assert set(got) == set(want)
    for name, ref in want.items():
        out = got[name]
        assert out.shape == ref.shape and out.dtype == ref.dtype, f"{g.name} {name}: {out.dtype} {ref.dtype}"
        if not np.issubdtype(ref.dtype, np.floating):
            np.testing.assert_array_equal(out, ref, err_msg=f"{g.name} {name} ({math})")
            continue
        scale = max(float(np.max(np.abs(ref), initial=0.0)), 1e-6)
        err = float(np.max(np.abs(out.astype(np.float64) - ref.astype(np.float64)), initial=0.0))
        assert err <= TOLERANCE[math] * scale, f"{g.name} {name} ({math}): max abs diff {err:.3g}, scale {scale:.3g}"


@pytest.mark.parametrize("math", ["fp32", "fp16"])
@pytest.mark.parametrize("dtype", [dtypes.FLOAT32, dtypes.INT64, dtypes.INT32])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_the_reference(math, dtype, axis, exclusive, reverse):
    b = te.GraphBuilder(f"cumsum_{axis}_{exclusive}{reverse}")
    x = b.input("x", [3, 37, 5], dtype)
    b.output(b.op("CumSum", [x], axis=axis, exclusive=exclusive, reverse=reverse), "y")
    g = b.build()
    rng = np.random.default_rng(axis)
    value = rng.standard_normal((3, 37, 5)) if dtype == dtypes.FLOAT32 else rng.integers(-9, 10, (3, 37, 5))
    _assert_matches_reference(g, {"x": value.astype(dtypes.to_numpy(dtype))}, math)


@pytest.mark.parametrize("math", ["fp32", "fp16"])
@pytest.mark.parametrize("dtype", [dtypes.FLOAT32, dtypes.INT64, dtypes.INT32])
@pytest.mark.parametrize("shape", [[1, 128], [2, 301, 3], [3, 1000]])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_of_few_long_lines_matches_the_reference(math, dtype, shape, exclusive, reverse):
    # a block per line (position ids: one line of the sequence length per batch row)
    b = te.GraphBuilder(f"cumsum_long_{len(shape)}_{exclusive}{reverse}")
    b.output(b.op("CumSum", [b.input("x", shape, dtype)], axis=1, exclusive=exclusive, reverse=reverse), "y")
    g = b.build()
    rng = np.random.default_rng(shape[1])
    value = rng.standard_normal(shape) if dtype == dtypes.FLOAT32 else rng.integers(-9, 10, shape)
    _assert_matches_reference(g, {"x": value.astype(dtypes.to_numpy(dtype))}, math)


@pytest.mark.parametrize("math", ["fp32", "fp16"])
@pytest.mark.parametrize("dtype", [dtypes.FLOAT32, dtypes.INT64, dtypes.INT32, dtypes.BOOL])
@pytest.mark.parametrize("shapes", [([4, 6], [4, 6]), ([2, 3, 6], [6]), ([2, 1, 6], [3, 1]), ([4, 6], [])])
def test_equal_matches_the_reference(math, dtype, shapes):
    b = te.GraphBuilder("equal")
    a_shape, b_shape = shapes
    b.output(b.op("Equal", [b.input("a", a_shape, dtype), b.input("b", b_shape, dtype)]), "y")
    g = b.build()
    rng = np.random.default_rng(len(b_shape))
    feeds = {n: rng.integers(0, 3, s).astype(dtypes.to_numpy(dtype)) for n, s in zip("ab", shapes, strict=True)}
    _assert_matches_reference(g, feeds, math)


@pytest.mark.parametrize("math", ["fp32", "fp16"])
@pytest.mark.parametrize("index_dtype", [dtypes.INT64, dtypes.INT32])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("data_dtype", [dtypes.FLOAT32, dtypes.INT64])
def test_gather_elements_matches_the_reference(math, index_dtype, axis, data_dtype):
    b = te.GraphBuilder(f"gather_elements_{axis}")
    data_shape, index_shape = [3, 4, 5], [2, 3, 4]
    index_shape[axis] = 7
    data = b.input("data", data_shape, data_dtype)
    b.output(b.op("GatherElements", [data, b.input("indices", index_shape, index_dtype)], axis=axis), "y")
    g = b.build()
    rng = np.random.default_rng(axis)
    dim = data_shape[axis]
    feeds = {"data": (rng.standard_normal(data_shape) * 10).astype(dtypes.to_numpy(data_dtype)),
             "indices": rng.integers(-dim, dim, index_shape).astype(dtypes.to_numpy(index_dtype))}
    _assert_matches_reference(g, feeds, math)


@pytest.mark.parametrize("math", ["fp32", "fp16"])
@pytest.mark.parametrize("make", [roberta_position_ids_model, opt_position_ids_model], ids=["roberta", "opt"])
def test_position_ids_run_on_the_gpu_with_no_opaque_op(make, math):
    model = make()
    g = te.load_onnx(model)
    assert not [o for o in g.ops if o.type == "Opaque"]
    _assert_matches_reference(g, token_feeds(model), math)
    _assert_matches_reference(te.search(g, "greedy").graph, token_feeds(model, seed=1), math)
