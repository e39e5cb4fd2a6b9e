"""The numerics of every operator in docs/operators.md, one numpy function per op
(OP_REGISTRY); `taso_env.engine.reference` executes ops and graphs with them. Every
op computes in its input dtype (float32 stays float32). Conv2D is an im2col over a
strided window view followed by one batched matmul over the groups, so ResNet-50 at
224x224 runs in seconds.

Erf (and so Gelu) uses `scipy.special.erf` when scipy is importable. Otherwise it
uses a float64 rational approximation: a Taylor series for |x| < 0.5 and the
Numerical Recipes Chebyshev fit of erfc (fractional error < 1.2e-7) elsewhere, i.e.
about float32 precision; the result is cast back to the input dtype.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from taso_env import dtypes
from taso_env.errors import OpAttributeError, ShapeError

try:
    from scipy.special import erf as _scipy_erf
except ImportError:  # scipy is optional
    _scipy_erf = None

OpFn = Callable[[Mapping[str, Any], list[np.ndarray]], list[np.ndarray]]

#: ONNX TensorProto dtype codes the IR uses, and their numpy dtypes (taso_env.dtypes).
ONNX_TO_NUMPY_DTYPE: Mapping[int, np.dtype] = MappingProxyType(dtypes.NUMPY_BY_CODE)
#: Op types that have no computation: they are fed by name in `run`.
SOURCE_OP_TYPES = frozenset({"Input", "Weight"})

_REQUIRED = object()


# ----------------------------------------------------------------------------- helpers
def _attr(attrs: Mapping[str, Any], name: str, default: Any = _REQUIRED) -> Any:
    """Returns attribute `name`, its default, or raises OpAttributeError if required."""
    if name in attrs and attrs[name] is not None:
        return attrs[name]
    if default is _REQUIRED:
        raise OpAttributeError(f"missing required attribute {name!r}")
    return default


def _int(attrs: Mapping[str, Any], name: str, default: Any = _REQUIRED) -> int:
    """Reads a *scalar* int attribute (a one-element list is accepted too)."""
    value = _attr(attrs, name, default)
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise OpAttributeError(f"attribute {name!r} must be one int, got {value!r}")
        value = value[0]
    return int(value)


def _ints(attrs: Mapping[str, Any], name: str, default: Any = _REQUIRED,
          length: int | None = None) -> list[int]:
    """Reads a list-of-int attribute, checking its length when `length` is given."""
    value = [int(v) for v in _attr(attrs, name, default)]
    if length is not None and len(value) != length:
        raise OpAttributeError(f"attribute {name!r} must have {length} values, got {value}")
    return value


def _activation(y: np.ndarray, code: int) -> np.ndarray:
    """Applies the fused activation `code` (0 none, 1 relu, 2 sigmoid, 3 tanh)."""
    if code == 0:
        return y
    if code in _ACTIVATIONS:
        return _ACTIVATIONS[code](y)
    raise OpAttributeError(
        f"attribute 'activation' must be 0 (none), 1 (relu), 2 (sigmoid) or 3 (tanh), got {code}")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function, 1 / (1 + exp(-x))."""
    return np.exp(-np.logaddexp(0, -x)).astype(x.dtype, copy=False)


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0).astype(x.dtype, copy=False)


_ACTIVATIONS: Mapping[int, Callable[[np.ndarray], np.ndarray]] = MappingProxyType(
    {1: _relu, 2: _sigmoid, 3: np.tanh})

_NR_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
            -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def _erf_fallback(x: np.ndarray) -> np.ndarray:
    """Float64 erf without scipy (absolute error < 1.2e-7, relative < 1e-7 near 0)."""
    x = np.asarray(x, dtype=np.float64)
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = np.zeros_like(t)
    for coef in reversed(_NR_ERFC[1:]):
        poly = coef + t * poly
    erfc = t * np.exp(-z * z + _NR_ERFC[0] + t * poly)
    large = np.sign(x) * (1.0 - erfc)
    x2 = x * x  # Taylor series sum_n (-1)^n x^(2n+1) / (n! (2n+1)), to x^15
    series, term = np.zeros_like(x), x.copy()
    for n in range(8):
        series += term / (2 * n + 1)
        term = -term * x2 / (n + 1)
    return np.where(z < 0.5, series * (2.0 / math.sqrt(math.pi)), large)


def _erf(x: np.ndarray) -> np.ndarray:
    """Error function in x's dtype (scipy when available, else `_erf_fallback`)."""
    y = _scipy_erf(x) if _scipy_erf is not None else _erf_fallback(x)
    return np.asarray(y).astype(x.dtype, copy=False)


def _lowest(dtype: np.dtype) -> Any:
    """The value a max-pool pad never wins against: -inf or the integer minimum."""
    return -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min


def _windows(x: np.ndarray, pads: Sequence[int], value: Any, kernel: Sequence[int],
             strides: Sequence[int], dilations: Sequence[int], out_hw: Sequence[int]) -> np.ndarray:
    """Pads NCHW `x` (top, left, bottom, right) and returns the windows [N,C,OH,OW,kh,kw].

    The bottom/right padding is extended when `out_hw` needs more rows or columns
    (pool ceil_mode); the result is a strided view, nothing is copied but the pad.
    """
    span = [d * (k - 1) + 1 for k, d in zip(kernel, dilations)]
    extra = [max(0, (o - 1) * s + sp - (n + p0 + p1))
             for o, s, sp, n, p0, p1 in zip(out_hw, strides, span, x.shape[2:], pads[:2], pads[2:])]
    widths = ((0, 0), (0, 0), (pads[0], pads[2] + extra[0]), (pads[1], pads[3] + extra[1]))
    xp = np.pad(x, widths, constant_values=value) if any(map(any, widths)) else x
    win = sliding_window_view(xp, span, axis=(2, 3))
    win = win[:, :, ::strides[0], ::strides[1], ::dilations[0], ::dilations[1]]
    return win[:, :, :out_hw[0], :out_hw[1]]


def _out_size(size: int, kernel: int, stride: int, pad0: int, pad1: int, dilation: int = 1,
              ceil_mode: bool = False) -> int:
    """Output length of a conv/pool window along one axis, ONNX rules (see operators.md)."""
    span = dilation * (kernel - 1) + 1
    padded = size + pad0 + pad1
    if padded < span:
        raise ShapeError(f"window of {span} does not fit input size {size} with padding {pad0}+{pad1}")
    if not ceil_mode:
        return (padded - span) // stride + 1
    out = -(-(padded - span) // stride) + 1
    return out - 1 if (out - 1) * stride >= size + pad0 else out


def _expect_rank(x: np.ndarray, rank: int, what: str) -> None:
    if x.ndim != rank:
        raise ShapeError(f"{what} must have rank {rank}, got shape {x.shape}")


# ------------------------------------------------------------------------- operators
def _conv2d(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ONNX Conv (NCHW, groups, dilations, asymmetric pads), bias, fused activation."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    _expect_rank(x, 4, "Conv2D input x")
    _expect_rank(w, 4, "Conv2D weight w")
    strides = _ints(attrs, "strides", [1, 1], 2)
    pads = _ints(attrs, "pads", [0, 0, 0, 0], 4)
    dilations = _ints(attrs, "dilations", [1, 1], 2)
    group = _int(attrs, "group", 1)
    n, c, h, wd = x.shape
    k, cg, kh, kw = w.shape
    if group < 1 or c != cg * group or k % group:
        raise ShapeError(f"Conv2D: input {x.shape} and weight {w.shape} do not fit group={group}")
    oh = _out_size(h, kh, strides[0], pads[0], pads[2], dilations[0])
    ow = _out_size(wd, kw, strides[1], pads[1], pads[3], dilations[1])
    win = _windows(x, pads, 0, (kh, kw), strides, dilations, (oh, ow))  # [N,C,OH,OW,kh,kw]
    cols = (win.reshape(n, group, cg, oh, ow, kh, kw)
            .transpose(1, 0, 3, 4, 2, 5, 6).reshape(group, n * oh * ow, cg * kh * kw))
    kernels = w.reshape(group, k // group, cg * kh * kw).transpose(0, 2, 1)
    y = np.matmul(cols, kernels)  # [G, N*OH*OW, K/G]
    y = y.reshape(group, n, oh, ow, k // group).transpose(1, 0, 4, 2, 3).reshape(n, k, oh, ow)
    if bias is not None:
        if bias.shape != (k,):
            raise ShapeError(f"Conv2D: bias must have shape ({k},), got {bias.shape}")
        y = y + bias.reshape(1, k, 1, 1)
    y = _activation(y, _int(attrs, "activation", 0))
    return [np.ascontiguousarray(y, dtype=x.dtype)]


def _matmul(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """np.matmul with broadcasting, then the fused activation."""
    return [_activation(np.matmul(inputs[0], inputs[1]), _int(attrs, "activation", 0))]


def _gemm(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """alpha * op(a) @ op(b) + beta * c (ONNX Gemm)."""
    a, b = inputs[0], inputs[1]
    _expect_rank(a, 2, "Gemm input a")
    _expect_rank(b, 2, "Gemm input b")
    a = a.T if _int(attrs, "trans_a", 0) else a
    b = b.T if _int(attrs, "trans_b", 0) else b
    y = float(_attr(attrs, "alpha", 1.0)) * (a @ b)
    if len(inputs) > 2:
        y = y + float(_attr(attrs, "beta", 1.0)) * inputs[2]
    return [y.astype(inputs[0].dtype, copy=False)]


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division in the input dtype; integers truncate towards zero as in ONNX."""
    if np.issubdtype(np.result_type(a, b), np.integer):
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) != (b < 0), -q, q)
    return np.divide(a, b)


def _elementwise(fn: Callable[..., np.ndarray]) -> OpFn:
    """Wraps an element-wise numpy function as an op (result cast to input 0's dtype)."""
    def op(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
        del attrs  # element-wise ops have no attributes
        return [np.asarray(fn(*inputs)).astype(inputs[0].dtype, copy=False)]
    op.__doc__ = f"Element-wise {getattr(fn, '__name__', fn)!s}."
    return op


def _gelu(x: np.ndarray) -> np.ndarray:
    """Exact Gelu, 0.5 * x * (1 + erf(x / sqrt(2)))."""
    return 0.5 * x * (1 + _erf(x / np.asarray(math.sqrt(2.0), dtype=x.dtype)))


def _clip(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """min(max(x, min), max), bounds in x's dtype (ONNX Clip)."""
    x = inputs[0]
    lo, hi = (np.asarray(_attr(attrs, k, d)).astype(x.dtype) for k, d in
              (("min", float(np.finfo(np.float32).min)), ("max", float(np.finfo(np.float32).max))))
    return [np.minimum(np.maximum(x, lo), hi).astype(x.dtype, copy=False)]


def _hard_sigmoid(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid)."""
    x = inputs[0]
    alpha, beta = (np.asarray(_attr(attrs, k, d), dtype=x.dtype) for k, d in (("alpha", 0.2), ("beta", 0.5)))
    return [np.clip(alpha * x + beta, 0, 1).astype(x.dtype, copy=False)]


def _hard_swish(x: np.ndarray) -> np.ndarray:
    """x * max(0, min(1, x / 6 + 1 / 2)) (ONNX HardSwish)."""
    return x * np.clip(x / np.asarray(6, x.dtype) + np.asarray(0.5, x.dtype), 0, 1)


def _concat(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate(inputs, axis=_int(attrs, "axis"))]


def _split(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Splits along `axis` into pieces of the `split` sizes."""
    x, axis, sizes = inputs[0], _int(attrs, "axis"), _ints(attrs, "split")
    if sum(sizes) != x.shape[axis] or min(sizes, default=-1) < 0:
        raise ShapeError(f"Split: sizes {sizes} do not add up to dim {axis} of shape {x.shape}")
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _transpose(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    x = inputs[0]
    perm = _ints(attrs, "perm", []) or list(range(x.ndim))[::-1]
    return [np.transpose(x, perm)]


def _reshape(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Reshape; `0` (copy the input dim) and `-1` (infer) are resolved as in ONNX."""
    x = inputs[0]
    shape = [x.shape[i] if d == 0 else d for i, d in enumerate(_ints(attrs, "shape"))]
    try:
        return [np.reshape(x, shape)]
    except ValueError as err:
        raise ShapeError(f"Reshape: cannot reshape {x.shape} to {shape}") from err


def _flatten(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    x, axis = inputs[0], _int(attrs, "axis", 1)
    return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


def _pool_geometry(attrs: Mapping[str, Any], x: np.ndarray, what: str):
    """Reads kernel/strides/pads/ceil_mode and returns them with the output H, W."""
    _expect_rank(x, 4, f"{what} input x")
    kernel = _ints(attrs, "kernel", length=2)
    strides = _ints(attrs, "strides", [1, 1], 2)
    pads = _ints(attrs, "pads", [0, 0, 0, 0], 4)
    ceil_mode = bool(_int(attrs, "ceil_mode", 0))
    out_hw = [_out_size(x.shape[2 + i], kernel[i], strides[i], pads[i], pads[i + 2],
                        ceil_mode=ceil_mode) for i in range(2)]
    return kernel, strides, pads, out_hw


def _max_pool(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ONNX MaxPool: pads are -inf so padding never wins."""
    x = inputs[0]
    kernel, strides, pads, out_hw = _pool_geometry(attrs, x, "MaxPool2D")
    win = _windows(x, pads, _lowest(x.dtype), kernel, strides, (1, 1), out_hw)
    return [win.max(axis=(-2, -1))]


def _avg_pool(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ONNX AveragePool; the divisor counts the input (and explicit pads if included)."""
    x = inputs[0]
    kernel, strides, pads, out_hw = _pool_geometry(attrs, x, "AvgPool2D")
    sums = _windows(x, pads, 0, kernel, strides, (1, 1), out_hw).sum(axis=(-2, -1))
    h, w = x.shape[2:]
    if _int(attrs, "count_include_pad", 0):  # explicit pads count, ceil_mode overhang not
        mask = np.ones((1, 1, h + pads[0] + pads[2], w + pads[1] + pads[3]), dtype=x.dtype)
        mask_pads = [0, 0, 0, 0]
    else:
        mask, mask_pads = np.ones((1, 1, h, w), dtype=x.dtype), pads
    counts = _windows(mask, mask_pads, 0, kernel, strides, (1, 1), out_hw).sum(axis=(-2, -1))
    return [(sums / counts).astype(x.dtype, copy=False)]


def _global_avg_pool(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    del attrs
    _expect_rank(inputs[0], 4, "GlobalAvgPool input x")
    return [inputs[0].mean(axis=(2, 3), keepdims=True, dtype=inputs[0].dtype)]


def _channel(v: np.ndarray, rank: int) -> np.ndarray:
    """Reshapes a per-channel vector [C] to broadcast against [N, C, ...] of `rank`."""
    return v.reshape((1, -1) + (1,) * (rank - 2))


def _batch_norm(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Inference batch normalisation over channel axis 1."""
    x, scale, bias, mean, var = inputs
    c = x.shape[1] if x.ndim >= 2 else -1
    for name, v in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var)):
        if v.shape != (c,):
            raise ShapeError(f"BatchNorm: {name} must have shape ({c},), got {v.shape}")
    eps = float(_attr(attrs, "epsilon", 1e-5))
    factor = scale / np.sqrt(var + eps)
    y = (x - _channel(mean, x.ndim)) * _channel(factor, x.ndim) + _channel(bias, x.ndim)
    return [y.astype(x.dtype, copy=False)]


def _enlarge(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Zero-pads a [K,C,kh,kw] kernel symmetrically to the `kernel` size."""
    w = inputs[0]
    _expect_rank(w, 4, "Enlarge input w")
    kernel = _ints(attrs, "kernel", length=2)
    diff = [new - old for new, old in zip(kernel, w.shape[2:])]
    if any(d < 0 or d % 2 for d in diff):
        raise OpAttributeError(
            f"Enlarge: kernel {kernel} must be >= {list(w.shape[2:])} with even differences")
    return [np.pad(w, ((0, 0), (0, 0), (diff[0] // 2,) * 2, (diff[1] // 2,) * 2))]


def _softmax(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Numerically stable softmax along `axis`."""
    x, axis = inputs[0], _int(attrs, "axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return [e / e.sum(axis=axis, keepdims=True)]


def _pad(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Constant padding; `pads` lists all begins, then all ends (ONNX order)."""
    x = inputs[0]
    pads = _ints(attrs, "pads", length=2 * x.ndim)
    if min(pads, default=0) < 0:
        raise OpAttributeError(f"Pad: pads must be >= 0, got {pads}")
    widths = list(zip(pads[:x.ndim], pads[x.ndim:]))
    return [np.pad(x, widths, constant_values=float(_attr(attrs, "value", 0.0)))]


def _reduce(fn: Callable[..., np.ndarray]) -> OpFn:
    """Builds ReduceMean / ReduceSum: over `axes` (empty or absent: all), in x's dtype."""
    def op(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        axes = tuple(_ints(attrs, "axes", [])) or tuple(range(x.ndim))
        keepdims = bool(_int(attrs, "keepdims", 1))
        return [np.asarray(fn(x, axis=axes, keepdims=keepdims)).astype(x.dtype, copy=False)]
    op.__doc__ = f"np.{fn.__name__} over axes."
    return op


def _layer_norm(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """(x - mean) / sqrt(var + eps) * scale + bias over axes [axis, rank)."""
    x, scale = inputs[0], inputs[1]
    axes = tuple(range(_int(attrs, "axis", -1) % max(x.ndim, 1), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    centred = x - mean
    var = np.mean(centred * centred, axis=axes, keepdims=True)
    y = centred / np.sqrt(var + float(_attr(attrs, "epsilon", 1e-5))) * scale
    if len(inputs) > 2:
        y = y + inputs[2]
    return [y.astype(x.dtype, copy=False)]


def _gather(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """np.take along `axis`; negative indices wrap, out-of-range ones are an error."""
    data, indices = inputs
    if indices.dtype not in (np.int32, np.int64):
        raise ShapeError(f"Gather: indices must be int32 or int64, got {indices.dtype}")
    axis = _int(attrs, "axis", 0)
    try:
        return [np.take(data, indices, axis=axis)]
    except IndexError as err:
        raise ShapeError(f"Gather: index out of range for dim {axis} of {data.shape}") from err


def _where(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    del attrs
    cond, x, y = inputs
    if cond.dtype != np.bool_:
        raise ShapeError(f"Where: cond must be bool, got {cond.dtype}")
    return [np.where(cond, x, y)]


def _cast(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    to = _int(attrs, "to")
    if to not in ONNX_TO_NUMPY_DTYPE:
        raise OpAttributeError(f"Cast: unsupported dtype code to={to}")
    return [inputs[0].astype(ONNX_TO_NUMPY_DTYPE[to])]


def _cumsum(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """ONNX CumSum along `axis` in the input's dtype: `exclusive` leaves each element out
    of its own sum, `reverse` sums from the end of the axis."""
    x = inputs[0]
    if x.dtype == np.bool_:
        raise ShapeError("CumSum: cannot sum bools")
    axis = _int(attrs, "axis") % max(x.ndim, 1)
    reverse = bool(_int(attrs, "reverse", 0))
    if reverse:
        x = np.flip(x, axis)
    y = np.cumsum(x, axis=axis, dtype=x.dtype)
    if _int(attrs, "exclusive", 0):
        shifted = np.zeros_like(y)
        kept = [slice(None)] * x.ndim
        kept[axis] = slice(0, x.shape[axis] - 1)
        moved = [slice(None)] * x.ndim
        moved[axis] = slice(1, None)
        shifted[tuple(moved)] = y[tuple(kept)]
        y = shifted
    if reverse:
        y = np.flip(y, axis)
    return [np.ascontiguousarray(y)]


def _equal(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """a == b element-wise with broadcasting: a bool tensor."""
    del attrs
    a, b = inputs
    if a.dtype != b.dtype:
        raise ShapeError(f"Equal: operands differ in dtype ({a.dtype}, {b.dtype})")
    return [np.equal(a, b)]


def _gather_elements(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    """np.take_along_axis along `axis` (ONNX GatherElements); negative indices wrap,
    out-of-range ones are an error."""
    data, indices = inputs
    if indices.dtype not in (np.int32, np.int64):
        raise ShapeError(f"GatherElements: indices must be int32 or int64, got {indices.dtype}")
    if indices.ndim != data.ndim:
        raise ShapeError(f"GatherElements: indices {indices.shape} must have the rank of data {data.shape}")
    axis = _int(attrs, "axis", 0) % max(data.ndim, 1)
    dim = data.shape[axis]
    if np.any((indices < -dim) | (indices >= dim)):
        raise ShapeError(f"GatherElements: index out of range for dim {axis} of {data.shape}")
    wrapped = np.where(indices < 0, indices + dim, indices).astype(np.int64)
    window = tuple(slice(0, n) if d != axis else slice(None) for d, n in enumerate(indices.shape))
    return [np.take_along_axis(data[window], wrapped, axis=axis)]


def _constant(attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    dtype = ONNX_TO_NUMPY_DTYPE[_int(attrs, "dtype", 1)]
    return [np.full(tuple(_ints(attrs, "shape", [])), _attr(attrs, "value", 0.0), dtype=dtype)]


#: Op type -> implementation `fn(attrs, inputs) -> outputs`. Read-only.
OP_REGISTRY: Mapping[str, OpFn] = MappingProxyType({
    "Conv2D": _conv2d, "MatMul": _matmul, "Gemm": _gemm,
    "Add": _elementwise(np.add), "Sub": _elementwise(np.subtract),
    "Mul": _elementwise(np.multiply), "Div": _elementwise(_div),
    "Relu": _elementwise(_relu), "Sigmoid": _elementwise(_sigmoid),
    "Tanh": _elementwise(np.tanh), "Erf": _elementwise(_erf), "Gelu": _elementwise(_gelu),
    "Sqrt": _elementwise(np.sqrt), "Exp": _elementwise(np.exp),
    "Identity": _elementwise(np.asarray),
    "Concat": _concat, "Split": _split, "Transpose": _transpose, "Reshape": _reshape,
    "Flatten": _flatten, "MaxPool2D": _max_pool, "AvgPool2D": _avg_pool,
    "GlobalAvgPool": _global_avg_pool, "BatchNorm": _batch_norm, "Enlarge": _enlarge,
    "Softmax": _softmax, "Pad": _pad, "ReduceMean": _reduce(np.mean),
    "ReduceSum": _reduce(np.sum), "LayerNorm": _layer_norm, "Gather": _gather,
    "Where": _where, "Cast": _cast, "Constant": _constant,
    "Clip": _clip, "HardSigmoid": _hard_sigmoid, "HardSwish": _elementwise(_hard_swish),
    "CumSum": _cumsum, "Equal": _equal, "GatherElements": _gather_elements,
})


def supported_op_types() -> frozenset[str]:
    """Op types `run` can execute: the registry plus the fed sources Input and Weight."""
    return frozenset(OP_REGISTRY) | SOURCE_OP_TYPES
