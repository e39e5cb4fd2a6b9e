"""Builders of the standard benchmark networks (batch 1, sizes as in the literature).

    te.graphs.names()            # ["bert_base", "inception_v3", ...]
    g = te.graphs.build("resnet50")
"""

from __future__ import annotations

from collections.abc import Callable

from taso_env.engine.graph import Graph

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
        ValueError: for an unknown name (the message lists the known ones).
    """
    _load_all()
    if name not in _BUILDERS:
        raise ValueError(f"unknown graph {name!r}; known: {', '.join(sorted(_BUILDERS))}")
    return _BUILDERS[name](**kwargs)


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
