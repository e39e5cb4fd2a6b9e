"""Cost models: one interface, `CostModel`, estimating the runtime (ms) of each op, and
the registry that builds one from a spec string (`make_cost_model`).

- `analytic[:profile]` — roofline per op from FLOPs and bytes moved against a device
  profile (peak FLOP/s, memory bandwidth, launch overhead). Deterministic; the default
  (H100, strict fp32). Implemented in C++ (`taso_env/csrc/engine/cost_model.cc`).
- `table:<path.h5>`, `table+residency:<path.h5>` and `cuda[:fp32|tf32][:<path.h5>]` —
  measured costs: defined by the GPU layer (`taso_env.gpu.cost_models`), which registers
  them here (`register_cost_model`); the engine never imports the GPU layer.

Which model prices a graph (`resolve_cost_model`): the one passed, else the graph's own
(`Graph.with_cost_model`), else the process default — analytic H100 unless the command
line chose another with `set_cost_model`. Library code passes its model; it never sets
the default.
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import TYPE_CHECKING

from taso_env import _core

if TYPE_CHECKING:
    from taso_env.engine.graph import Graph


class CostModelError(ValueError):
    """An unknown or unavailable cost model was requested."""


class CostModel(abc.ABC):
    """Estimates the runtime of each op of a graph in milliseconds."""

    name: str

    @property
    def core(self) -> _core.CoreCostModel | None:
        """The C++ model that search and candidate enumeration price with (None: this model
        has none, and only `op_costs` / `graph_cost` work)."""
        return None

    @abc.abstractmethod
    def op_costs(self, graph: Graph) -> list[float]:
        """Estimated runtime (ms) of every op, indexed by op id (0 for inputs/weights)."""

    def graph_cost(self, graph: Graph) -> float:
        """Estimated runtime (ms) of the whole graph: the sum of its op costs."""
        return float(sum(self.op_costs(graph)))


class AnalyticCostModel(CostModel):
    """Roofline model on a named device profile (see `device_profiles()`)."""

    def __init__(self, profile: str = "h100"):
        if profile not in _core.list_device_profiles():
            raise CostModelError(
                f"unknown device profile {profile!r}; known: {_core.list_device_profiles()}")
        self._model = _core.AnalyticModel(profile)
        self.name = f"analytic:{profile}"

    @property
    def core(self) -> _core.CoreCostModel:
        return self._model

    @property
    def profile(self) -> dict:
        return self._model.profile

    def op_costs(self, graph: Graph) -> list[float]:
        return self._model.op_costs(graph.core)

    def graph_cost(self, graph: Graph) -> float:
        return self._model.graph_cost(graph.core)


def weight_residency(graph: Graph) -> dict:
    """The GEMV reads of `graph` as the table model's weight-residency term prices them
    (taso/weight_residency.h): {"distinct_bytes": the distinct weights they read,
    "term_ms": the term, "reads": {op id: (its weight's bytes, its share of the term, ms)}}."""
    return _core.weight_residency(graph.core)


def device_profiles() -> list[str]:
    """Names of the analytic model's built-in device profiles."""
    return _core.list_device_profiles()



CostModelFactory = Callable[[str], CostModel]
"""Builds a model from the argument of its spec (what follows "<kind>:"; may be "")."""

_factories: dict[str, CostModelFactory] = {}
_usages: dict[str, str] = {}


def register_cost_model(kind: str, factory: CostModelFactory, usage: str | None = None) -> None:
    """Makes `make_cost_model("<kind>:<argument>")` return `factory(argument)`.

    This is how a layer above the engine plugs its models in: the GPU layer
    (`taso_env.gpu.cost_models`) registers `table`, `table+residency` and `cuda`, and
    `import taso_env` imports it, so every process that uses the engine has them.

    Args:
        kind: the spec's prefix ("table").
        factory: called with the rest of the spec ("" when there is none).
        usage: how the spec is written, for the message of an unknown spec
            ("'table[+residency]:<path.h5>'"); None lists nothing for this kind.
    """
    _factories[kind] = factory
    if usage is not None:
        _usages[kind] = usage


def registered_cost_models() -> tuple[str, ...]:
    """The spec kinds `make_cost_model` knows, in registration order."""
    return tuple(_factories)


def make_cost_model(spec: str | CostModel) -> CostModel:
    """Builds a cost model from a spec string: "analytic[:<profile>]" here, and whatever
    higher layers registered (`register_cost_model`): "table:<path.h5>",
    "table+residency:<path.h5>" (the table with the weight-residency term) and
    "cuda[:fp32|tf32][:<path.h5>]" from the GPU layer. A `CostModel` is returned as is.

    Raises:
        CostModelError: for an unknown spec, or a `cuda` model where there is no GPU.
        CostTableError: a `table` file that is missing, corrupt or has no matching table.
    """
    if isinstance(spec, CostModel):
        return spec
    kind, _, arg = str(spec).partition(":")
    factory = _factories.get(kind)
    if factory is None:
        usages = list(_usages.values())
        listed = f"{', '.join(usages[:-1])} or {usages[-1]}" if len(usages) > 1 else "".join(usages)
        raise CostModelError(f"unknown cost model {spec!r}; use {listed}")
    return factory(arg)


register_cost_model("analytic", lambda profile: AnalyticCostModel(profile or "h100"), "'analytic[:profile]'")

_default: CostModel | None = None


def set_cost_model(spec: str | CostModel) -> CostModel:
    """Sets the process default: the model of graphs that have none of their own when no
    model is passed (`resolve_cost_model`); returns it.

    Only the command line (`rlflow`) and the benchmarks call this, to apply a flag; library
    code passes its model instead (tests/test_cost_model_passing.py checks that)."""
    global _default
    _default = make_cost_model(spec)
    return _default


def get_cost_model() -> CostModel:
    """The process default: analytic H100 (strict fp32) unless `set_cost_model` chose
    another."""
    global _default
    if _default is None:
        _default = AnalyticCostModel("h100")
    return _default


def resolve_cost_model(model: str | CostModel | None = None, graph: Graph | None = None) -> CostModel:
    """The model to price `graph` with: `model` where one is passed, else the graph's own
    (`Graph.with_cost_model`, carried through rewrites and search), else the process
    default (`get_cost_model`: analytic H100 unless the command line set another)."""
    if model is not None:
        return make_cost_model(model)
    own = getattr(graph, "cost_model", None)
    return own if own is not None else get_cost_model()
