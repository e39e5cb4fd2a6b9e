"""The engine's operators over z3 terms: a graph executed on tensors of concrete shape
whose elements are real-valued z3 expressions.

Every element of an Input or Weight is a z3 real variable (``x[0,2,1]``); each op
computes its output elements as z3 expressions of them. Linear and index operators
(Add, Sub, Mul, MatMul, Conv2D, AvgPool2D, Concat, Split, Transpose, Reshape, Enlarge,
...) run through the numpy reference implementations themselves (`reference_ops`),
on object arrays of z3 terms, so their semantics here is exactly the reference's. The
operators numpy cannot run on z3 terms have their own encoding: Relu and MaxPool2D as
``If`` (exact), Div as multiplication by the inverse of the divisor (`inverse`: an
uninterpreted function that a proof constrains by ``d * inverse(d) == 1`` wherever
``d != 0``, so that products of inverses normalise as polynomials; the divisors met are
recorded: a proof assumes the source's non-zero and must show the target's are), and Sigmoid, Tanh, Sqrt,
Erf, Exp, Gelu as uninterpreted functions (equal arguments give equal values, nothing
more), also when fused as a Conv2D / MatMul activation. An op without an encoding
raises `NoSemanticsError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import z3

from taso_env.engine.reference_ops import OP_REGISTRY, SOURCE_OP_TYPES, _pool_geometry, _windows
from taso_env.errors import TasoEnvError

#: element-wise operators encoded as uninterpreted functions, and activation codes
UNINTERPRETED = ("Sigmoid", "Tanh", "Sqrt", "Erf", "Exp", "Gelu")
_ACTIVATION_OPS = {1: "Relu", 2: "Sigmoid", 3: "Tanh"}


class NoSemanticsError(TasoEnvError, NotImplementedError):
    """An op of the graph has no z3 encoding (names the op type)."""


def as_term(value: Any) -> z3.ExprRef:
    """A z3 real term for an element (z3 expressions pass; numbers become exact reals)."""
    if z3.is_expr(value):
        return value
    return z3.RealVal(float(value)) if isinstance(value, (float, np.floating)) else z3.RealVal(int(value))


class SymbolicExecution:
    """Executes graphs on z3-term tensors; the uninterpreted functions and the divisors
    met are shared by every graph run through one instance (source and target of a
    rule are compared through one)."""

    def __init__(self):
        self.functions: dict[str, z3.FuncDeclRef] = {}
        self.divisors: list[z3.ExprRef] = []
        self.inverse = z3.Function("inverse", z3.RealSort(), z3.RealSort())
        self._variables: dict[str, np.ndarray] = {}

    def variables(self, name: str, shape) -> np.ndarray:
        """The tensor of z3 real variables for the source op `name` (one per element)."""
        if name not in self._variables:
            arr = np.empty(tuple(shape), dtype=object)
            for index in np.ndindex(*arr.shape):
                arr[index] = z3.Real(f"{name}{list(index)}")
            self._variables[name] = arr
        return self._variables[name]

    def uses_uninterpreted(self) -> bool:
        """Whether a function without a full definition was used (Tanh, Sigmoid, ...):
        a counterexample may then be one that the real function cannot produce."""
        return bool(self.functions)

    def divide(self, numerator, divisor) -> z3.ExprRef:
        """numerator * inverse(divisor), with the inverse of a product taken factor by
        factor and inverse(inverse(x)) as x (both hold wherever the divisor is non-zero,
        which is all a proof uses); each non-constant factor is recorded as a divisor."""
        factors = [z3.simplify(as_term(divisor))]
        if z3.is_mul(factors[0]):
            factors = list(factors[0].children())
        out = as_term(numerator)
        for f in factors:
            if z3.is_rational_value(f) and f.as_fraction() != 0:
                out = out * (1 / f)
                continue
            self.divisors.append(f)
            out = out * (f.arg(0) if z3.is_app(f) and f.decl().eq(self.inverse) else self.inverse(f))
        return out

    def inverse_axioms(self) -> list:
        """``d * inverse(d) == 1`` for every non-zero divisor met (what division is)."""
        return [z3.Implies(d != 0, d * self.inverse(d) == 1) for d in self.divisors]

    def run(self, graph) -> dict[str, np.ndarray]:
        """The graph's outputs by output name, as object arrays of z3 terms.

        Raises:
            NoSemanticsError: an op has no encoding.
        """
        values: dict[tuple[int, int], np.ndarray] = {}
        for op in graph.ops:
            if op.type in SOURCE_OP_TYPES:
                results = [self.variables(op.name, op.outputs[0].shape)]
            else:
                results = self.execute(op.type, op.attrs, [values[(r[0], r[1])] for r in op.inputs])
            for i, arr in enumerate(results):
                values[(op.id, i)] = arr
        return {name: values[(r[0], r[1])] for name, r in zip(graph.output_names, graph.outputs)}

    def execute(self, op_type: str, attrs: Mapping[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
        """One op on object arrays of z3 terms."""
        inputs = [np.asarray(a, dtype=object) for a in inputs]
        if op_type == "Relu":
            return [self._map(inputs[0], _relu)]
        if op_type in UNINTERPRETED:
            return [self._map(inputs[0], self._function(op_type))]
        if op_type == "Div":
            a, b = np.broadcast_arrays(*inputs)
            return [self._zip(a, b, self.divide)]
        if op_type == "MaxPool2D":
            return [_max_pool(attrs, inputs[0])]
        if op_type == "BatchNorm":
            return [self._batch_norm(attrs, inputs)]
        if op_type in ("Conv2D", "MatMul"):
            code = int(attrs.get("activation", 0))
            out = OP_REGISTRY[op_type]({**attrs, "activation": 0}, inputs)
            if code:
                out = self.execute(_ACTIVATION_OPS[code], {}, out)
            return out
        if op_type in ("Constant", "Add", "Sub", "Mul", "Concat", "Split", "Transpose", "Reshape",
                       "Flatten", "AvgPool2D", "Enlarge", "Identity", "Pad", "GlobalAvgPool",
                       "ReduceSum"):
            out = OP_REGISTRY[op_type](attrs, inputs)
            return [self._map(np.asarray(a, dtype=object), as_term) for a in out]
        raise NoSemanticsError(f"no z3 encoding for op type {op_type!r}")

    def _function(self, name: str):
        if name not in self.functions:
            self.functions[name] = z3.Function(name, z3.RealSort(), z3.RealSort())
        f = self.functions[name]
        return lambda e: f(as_term(e))

    def _batch_norm(self, attrs, inputs) -> np.ndarray:
        x, scale, bias, mean, var = inputs
        shape = (1, -1) + (1,) * (x.ndim - 2)
        eps = as_term(float(attrs.get("epsilon", 1e-5)))
        root = self._map(var, lambda v: self._function("Sqrt")(as_term(v) + eps))
        factor = self._zip(scale, root, self.divide)
        return (x - mean.reshape(shape)) * factor.reshape(shape) + bias.reshape(shape)

    @staticmethod
    def _map(arr: np.ndarray, fn) -> np.ndarray:
        out = np.empty(arr.shape, dtype=object)
        for index in np.ndindex(*arr.shape):
            out[index] = fn(arr[index])
        return out

    @staticmethod
    def _zip(a: np.ndarray, b: np.ndarray, fn) -> np.ndarray:
        out = np.empty(a.shape, dtype=object)
        for index in np.ndindex(*a.shape):
            out[index] = fn(a[index], b[index])
        return out


def _relu(e) -> z3.ExprRef:
    e = as_term(e)
    return z3.If(e > 0, e, z3.RealVal(0))


def _max_pool(attrs, x: np.ndarray) -> np.ndarray:
    """ONNX MaxPool: padding (None here) never wins."""
    kernel, strides, pads, out_hw = _pool_geometry(attrs, x, "MaxPool2D")
    windows = _windows(x, pads, None, kernel, strides, (1, 1), out_hw)
    out = np.empty(windows.shape[:4], dtype=object)
    for index in np.ndindex(*out.shape):
        best = None
        for e in windows[index].flat:
            if e is None:
                continue
            e = as_term(e)
            best = e if best is None else z3.If(e > best, e, best)
        out[index] = best
    return out
