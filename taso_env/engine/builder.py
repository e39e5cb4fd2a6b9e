"""GraphBuilder: build a `Graph` op by op, with layer helpers that create weights.

    b = GraphBuilder("tiny")
    x = b.input("input", [1, 3, 32, 32])
    y = b.conv2d(x, 16, kernel=3, padding=1, activation="relu")
    y = b.global_avg_pool(y)
    b.output(b.flatten(y), "output")
    g = b.build()

Every helper returns `Tensor`s (a reference plus shape and dtype) so that network code
can read shapes as it goes. `op()` adds any op of docs/operators.md directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from taso_env import _core, dtypes
from taso_env.engine.graph import Graph, TensorRef
from taso_env.errors import BuilderUsedError

ACTIVATIONS = {None: 0, "none": 0, "relu": 1, "sigmoid": 2, "tanh": 3}


class Tensor(NamedTuple):
    """A tensor being built: where it comes from, its shape and element type."""

    ref: TensorRef
    shape: tuple[int, ...]
    dtype: int = dtypes.FLOAT32

    @property
    def rank(self) -> int:
        return len(self.shape)


def _pair(v) -> list[int]:
    return [int(v), int(v)] if np.isscalar(v) else [int(x) for x in v]


def _pads4(padding) -> list[int]:
    """Pool/conv padding as 4 values (top, left, bottom, right) from an int, (h, w) or
    4 values."""
    if np.isscalar(padding) or len(padding) == 2:
        ph, pw = _pair(padding)
        return [ph, pw, ph, pw]
    if len(padding) != 4:
        raise ValueError(f"padding must be an int, (h, w) or 4 values, got {padding!r}")
    return [int(p) for p in padding]


class GraphBuilder:
    """Accumulates ops into a new graph; `build()` returns the immutable `Graph`."""

    def __init__(self, name: str = "graph", seed: int | None = None):
        self.name = name
        self._core = _core.CoreGraph()
        self._weights: dict[str, np.ndarray] = {}
        self._used_names: dict[str, int] = {}
        self._rng = np.random.default_rng(seed) if seed is not None else None

    # -- naming ------------------------------------------------------------------------
    def unique_name(self, prefix: str) -> str:
        """`prefix`, or `prefix_<n>` if already taken."""
        n = self._used_names.get(prefix, 0)
        self._used_names[prefix] = n + 1
        return prefix if n == 0 else f"{prefix}_{n}"

    # -- primitives --------------------------------------------------------------------
    def _wrap(self, op_id: int) -> list[Tensor]:
        _, _, _, _, _, _, outputs = self._core.op_record(op_id)
        return [Tensor(TensorRef(op_id, i), tuple(s), d) for i, (s, d) in enumerate(outputs)]

    def input(self, name: str, shape: Sequence[int], dtype: int = dtypes.FLOAT32) -> Tensor:
        """A graph input fed by `name`."""
        self._used_names.setdefault(name, 1)
        return self._wrap(self._core.add_op("Input", name, [], {}, [(list(shape), dtype)]))[0]

    def weight(self, name: str, shape: Sequence[int], dtype: int = dtypes.FLOAT32,
               value: np.ndarray | None = None) -> Tensor:
        """A constant parameter. With a seed, the builder also makes random data for it
        (He-style scale) unless `value` is given."""
        name = self.unique_name(name)
        t = self._wrap(self._core.add_op("Weight", name, [], {}, [(list(shape), dtype)]))[0]
        if value is not None:
            self._weights[name] = np.asarray(value, dtype=dtypes.to_numpy(dtype)).reshape(shape)
        elif self._rng is not None and dtypes.is_float(dtype):
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else int(shape[0]) if shape else 1
            self._weights[name] = (self._rng.standard_normal(shape) * np.sqrt(1.0 / max(fan_in, 1))
                                   ).astype(dtypes.to_numpy(dtype))
        return t

    def op(self, op_type: str, inputs: Sequence[Tensor], name: str | None = None,
           **attrs) -> Tensor | list[Tensor]:
        """Adds an op of any type; returns its output (a list for multi-output ops)."""
        name = self.unique_name(name or op_type.lower())
        outs = self._wrap(self._core.add_op(op_type, name, [tuple(t.ref) for t in inputs], attrs))
        return outs if len(outs) > 1 or op_type == "Split" else outs[0]

    def output(self, tensor: Tensor, name: str) -> None:
        self._core.add_output(tuple(tensor.ref), name)

    def build(self, metadata: dict | None = None) -> Graph:
        """The finished graph. The builder must not be used afterwards.

        Raises:
            BuilderUsedError: the builder already built its graph."""
        if self._core is None:
            raise BuilderUsedError(f"builder {self.name!r} already built its graph; start a new GraphBuilder")
        core, self._core = self._core, None
        return Graph(core, self._weights, self.name, metadata)

    # -- layers ------------------------------------------------------------------------
    def conv2d(self, x: Tensor, out_channels: int, kernel, stride=1, padding=0, dilation=1,
               groups: int = 1, bias: bool = True, activation: str | None = None,
               name: str = "conv") -> Tensor:
        """Conv2D with a new weight (and bias). `padding`: int, (h, w), 4 values
        (top, left, bottom, right) or "same" (stride-1 same padding)."""
        kh, kw = _pair(kernel)
        dh, dw = _pair(dilation)
        if padding == "same":
            ph, pw = (dh * (kh - 1)) // 2, (dw * (kw - 1)) // 2
            pads = [ph, pw, dh * (kh - 1) - ph, dw * (kw - 1) - pw]
        else:
            pads = _pads4(padding)
        name = self.unique_name(name)
        w = self.weight(f"{name}.weight", [out_channels, x.shape[1] // groups, kh, kw], x.dtype)
        inputs = [x, w]
        if bias:
            inputs.append(self.weight(f"{name}.bias", [out_channels], x.dtype))
        return self.op("Conv2D", inputs, name=name, strides=_pair(stride), pads=pads,
                       dilations=[dh, dw], group=groups, activation=ACTIVATIONS[activation])

    def linear(self, x: Tensor, out_features: int, bias: bool = True,
               activation: str | None = None, name: str = "linear") -> Tensor:
        """x @ W (+ b) on the last axis, as MatMul (+ Add), with an optional activation."""
        name = self.unique_name(name)
        w = self.weight(f"{name}.weight", [x.shape[-1], out_features], x.dtype)
        if not bias:
            return self.op("MatMul", [x, w], name=name, activation=ACTIVATIONS[activation])
        y = self.op("MatMul", [x, w], name=name)
        y = self.op("Add", [y, self.weight(f"{name}.bias", [out_features], x.dtype)], name=f"{name}.add")
        return self.activation(y, activation)

    def gemm(self, x: Tensor, out_features: int, bias: bool = True, name: str = "fc") -> Tensor:
        """A fully connected layer on a [M, K] matrix as one Gemm, with the weight stored
        [out_features, K] and `trans_b=1`, as PyTorch's ONNX export writes `nn.Linear`."""
        name = self.unique_name(name)
        inputs = [x, self.weight(f"{name}.weight", [out_features, x.shape[-1]], x.dtype)]
        if bias:
            inputs.append(self.weight(f"{name}.bias", [out_features], x.dtype))
        return self.op("Gemm", inputs, name=name, trans_b=1)

    def matmul(self, a: Tensor, b: Tensor, activation: str | None = None) -> Tensor:
        return self.op("MatMul", [a, b], activation=ACTIVATIONS[activation])

    def activation(self, x: Tensor, kind: str | None) -> Tensor:
        if kind in (None, "none"):
            return x
        op_type = {"relu": "Relu", "sigmoid": "Sigmoid", "tanh": "Tanh", "gelu": "Gelu"}[kind]
        return self.op(op_type, [x])

    def relu(self, x: Tensor) -> Tensor:
        return self.op("Relu", [x])

    def sigmoid(self, x: Tensor) -> Tensor:
        return self.op("Sigmoid", [x])

    def tanh(self, x: Tensor) -> Tensor:
        return self.op("Tanh", [x])

    def gelu(self, x: Tensor) -> Tensor:
        return self.op("Gelu", [x])

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return self.op("Add", [a, b])

    def mul(self, a: Tensor, b: Tensor) -> Tensor:
        return self.op("Mul", [a, b])

    def concat(self, xs: Sequence[Tensor], axis: int) -> Tensor:
        return self.op("Concat", list(xs), axis=axis)

    def split(self, x: Tensor, axis: int, sizes: Sequence[int]) -> list[Tensor]:
        return self.op("Split", [x], axis=axis, split=list(sizes))

    def transpose(self, x: Tensor, perm: Sequence[int]) -> Tensor:
        return self.op("Transpose", [x], perm=list(perm))

    def reshape(self, x: Tensor, shape: Sequence[int]) -> Tensor:
        return self.op("Reshape", [x], shape=list(shape))

    def flatten(self, x: Tensor, axis: int = 1) -> Tensor:
        return self.op("Flatten", [x], axis=axis)

    def max_pool(self, x: Tensor, kernel, stride=None, padding=0, ceil_mode: bool = False) -> Tensor:
        """MaxPool2D; `stride` defaults to the kernel; `padding`: int, (h, w) or 4 values
        (top, left, bottom, right)."""
        return self.op("MaxPool2D", [x], kernel=_pair(kernel), strides=_pair(stride or kernel),
                       pads=_pads4(padding), ceil_mode=int(ceil_mode))

    def avg_pool(self, x: Tensor, kernel, stride=None, padding=0, count_include_pad: bool = False,
                 ceil_mode: bool = False) -> Tensor:
        """AvgPool2D; `stride` defaults to the kernel; `padding` as in `max_pool`."""
        return self.op("AvgPool2D", [x], kernel=_pair(kernel), strides=_pair(stride or kernel),
                       pads=_pads4(padding), count_include_pad=int(count_include_pad),
                       ceil_mode=int(ceil_mode))

    def global_avg_pool(self, x: Tensor) -> Tensor:
        return self.op("GlobalAvgPool", [x])

    def batch_norm(self, x: Tensor, epsilon: float = 1e-5, name: str = "bn") -> Tensor:
        """Inference BatchNorm with new scale, bias, mean and (positive) variance."""
        name = self.unique_name(name)
        c = x.shape[1]
        scale, bias, mean = (self.weight(f"{name}.{p}", [c], x.dtype) for p in ("scale", "bias", "mean"))
        var_value = None if self._rng is None else 1.0 + np.abs(self._rng.standard_normal(c)) * 0.1
        var = self.weight(f"{name}.var", [c], x.dtype, value=var_value)
        return self.op("BatchNorm", [x, scale, bias, mean, var], name=name, epsilon=epsilon)

    def layer_norm(self, x: Tensor, epsilon: float = 1e-5, name: str = "ln") -> Tensor:
        name = self.unique_name(name)
        scale = self.weight(f"{name}.scale", [x.shape[-1]], x.dtype)
        bias = self.weight(f"{name}.bias", [x.shape[-1]], x.dtype)
        return self.op("LayerNorm", [x, scale, bias], name=name, axis=-1, epsilon=epsilon)

    def softmax(self, x: Tensor, axis: int = -1) -> Tensor:
        return self.op("Softmax", [x], axis=axis)

    def pad(self, x: Tensor, pads: Sequence[int], value: float = 0.0) -> Tensor:
        return self.op("Pad", [x], pads=list(pads), value=float(value))

    def reduce_mean(self, x: Tensor, axes: Sequence[int], keepdims: bool = True) -> Tensor:
        return self.op("ReduceMean", [x], axes=list(axes), keepdims=int(keepdims))
