"""Builders of the standard benchmark networks (batch 1, sizes as in the literature).

    te.graphs.names()            # ["bert_base", "inception_v3", ...]
    g = te.graphs.build("resnet50")
    g = te.graphs.load("model.onnx" | "resnet50" | "squeezenet1_1")   # any graph spec
"""

from __future__ import annotations

import os
from collections.abc import Callable

from taso_env.engine.graph import Graph
from taso_env.errors import ConfigError, TasoEnvError


class UnknownGraphError(TasoEnvError, ValueError):
    """A graph spec names no file, built-in network or shipped model."""


class GraphFileNotFoundError(TasoEnvError, FileNotFoundError):
    """A graph spec is a path to a file that does not exist."""

_BUILDERS: dict[str, Callable[..., Graph]] = {}


def register(name: str):
    """Decorator registering a builder function under `name`."""

    def wrap(fn: Callable[..., Graph]) -> Callable[..., Graph]:
        _BUILDERS[name] = fn
        return fn

    return wrap


def names() -> list[str]:
    """Names of all built-in networks."""
    _load_all()
    return sorted(_BUILDERS)


def build(name: str, **kwargs) -> Graph:
    """Builds a network by name; keyword arguments go to its builder (e.g. batch size).

    Raises:
        UnknownGraphError: for an unknown name (the message lists the known ones).
    """
    _load_all()
    if name not in _BUILDERS:
        raise UnknownGraphError(f"unknown graph {name!r}; known: {', '.join(sorted(_BUILDERS))}")
    return _BUILDERS[name](**kwargs)


def parse_dims(items, where: str) -> dict[str, int]:
    """{name: size} of "NAME=SIZE" items; ConfigError naming `where` and the bad item."""
    dims = {}
    for item in filter(None, (str(part).strip() for part in items)):
        name, sep, size = item.rpartition("=")
        if not sep or not name.strip() or not size.strip().isdigit() or int(size) < 1:
            raise ConfigError(f"{where}: expected NAME=SIZE with a positive integer size, got {item!r}")
        dims[name.strip()] = int(size)
    return dims


def split_dims(text: str) -> tuple[str, dict[str, int]]:
    """("model.onnx", {"batch": 1, "sequence": 128}) of "model.onnx[batch=1,sequence=128]";
    (text, {}) without a bracket. ConfigError for a malformed bracket."""
    if not text.endswith("]") or "[" not in text:
        return text, {}
    base, _, inside = text[:-1].rpartition("[")
    return base, parse_dims(inside.split(","), f"graph {text!r}")


def load(spec: str | os.PathLike | Graph, dims: dict[str, int] | None = None, **kwargs) -> Graph:
    """Any graph spec: a Graph (as is), an ONNX file, a built-in network name (built
    without weight data unless `seed` is given) or the name of a shipped ONNX model
    (`taso_env.shipped_data`, e.g. "squeezenet1_1" or "data/models/bert_base.onnx" run
    from outside the checkout) or a member of the valley family ("valley_3" or "valley:3",
    taso_env.graphs.valley_family).

    Raises:
        GraphFileNotFoundError: `spec` is a path (has a folder or ends in .onnx) to no file.
        UnknownGraphError: `spec` names nothing known (the message lists what is).
        OnnxImportError: the file is not a loadable ONNX model (taso_env.onnx.importer).
    """
    if isinstance(spec, Graph):
        return spec
    from taso_env import shipped_data
    from taso_env.onnx.importer import load_onnx

    text = os.fspath(spec)
    if not os.path.isfile(text):
        text, in_spec = split_dims(text)
        dims = {**in_spec, **(dims or {})}
    stem = os.path.basename(text)[:-5] if text.endswith(".onnx") else text
    if os.path.isfile(text):
        return load_onnx(text, dims=dims)
    from taso_env.graphs import valley_family

    if valley_family.seed_of(text) is not None:  # "valley_<n>" / "valley:<n>": a generated member
        if dims:
            raise ConfigError(f"dims {dims} given for the generated graph {text!r}")
        return valley_family.load(text, **{"seed": None, **kwargs})
    _load_all()
    if text in _BUILDERS:
        if dims:
            raise ConfigError(f"dims {dims} given for the built-in network {text!r}: dims fix an ONNX export's "
                              "symbolic input dimensions")
        return build(text, **{"seed": None, **kwargs})
    shipped = shipped_data.models()
    if stem in shipped and (text == stem or text.endswith(f"models/{stem}.onnx") or text == f"{stem}.onnx"):
        return load_onnx(shipped[stem], dims=dims)
    if text.endswith(".onnx") or os.sep in text or os.path.exists(text):
        reason = "is a folder, not an ONNX file" if os.path.isdir(text) else "no such file"
        raise GraphFileNotFoundError(f"{text}: {reason}")
    raise UnknownGraphError(f"unknown graph {text!r}: not a file, a built-in network ({', '.join(sorted(_BUILDERS))}) "
                            f"or a shipped model ({', '.join(shipped) or 'none'})")


def _load_all() -> None:
    # Importing a module registers its builders.
    from taso_env.graphs import (  # noqa: F401
        bert,
        inception,
        nasbench,
        nasnet,
        nasrnn,
        resnet,
        resnext,
        squeezenet,
        vit,
    )
