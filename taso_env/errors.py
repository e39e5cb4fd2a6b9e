"""Typed errors of taso_env.

Every error names what is wrong: the file, the op or node, the field, and what was
expected. The C++ core raises the same kinds; `taso_env._core` translates them into
these classes. All derive from `TasoEnvError`; those caused by bad arguments also
derive from `ValueError` so generic handlers still work.
"""

from __future__ import annotations


class TasoEnvError(Exception):
    """Base class of every error raised by taso_env."""


class ShapeError(TasoEnvError, ValueError):
    """Tensor shapes are inconsistent for an op (names the op and the shapes)."""


class OpAttributeError(TasoEnvError, ValueError):
    """An op attribute is missing, unknown or invalid (names the op and attribute)."""


class GraphError(TasoEnvError, ValueError):
    """The graph structure is invalid: bad tensor reference, duplicate name, ..."""


class BuilderUsedError(GraphError):
    """A GraphBuilder was used after it built its graph."""


class CycleError(GraphError):
    """The op dependencies contain a cycle (names ops on it)."""


class UnknownOpError(TasoEnvError, ValueError):
    """An op type the core does not know (ONNX import turns these into opaque ops)."""


class OnnxImportError(TasoEnvError, ValueError):
    """An ONNX model cannot be loaded. `path` and `node` say where."""

    def __init__(self, message: str, path: str | None = None, node: str | None = None):
        where = []
        if path is not None:
            where.append(f"file {path!r}")
        if node is not None:
            where.append(f"node {node!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)
        self.path = path
        self.node = node


class MalformedOnnxError(OnnxImportError):
    """The file is not a valid ONNX model (truncated, garbage, fails the checker)."""


class MissingShapeError(OnnxImportError):
    """A tensor has no shape, even after ONNX shape inference."""


class DynamicShapeError(OnnxImportError):
    """A tensor has a symbolic or unknown dimension; rlflow needs static shapes."""


class OnnxExportError(TasoEnvError):
    """A graph cannot be written as ONNX."""


class ExecutionError(TasoEnvError):
    """The reference executor cannot run a graph (missing feed, unsupported op)."""


class MissingFeedError(ExecutionError, KeyError):
    """An input or weight has no value (names it)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UnsupportedOpError(ExecutionError):
    """The op cannot be executed here (for example an opaque ONNX op)."""


class ConfigError(TasoEnvError, ValueError):
    """A settings object (a config dataclass, a flag) has an invalid value (names it)."""


class TuningError(TasoEnvError, ValueError):
    """A tuning config, space, record file or plan is invalid (names what and why)."""
