"""Cost models: one interface, `CostModel`, estimating the runtime (ms) of each op.

- `analytic[:profile]` — roofline per op from FLOPs and bytes moved against a device
  profile (peak FLOP/s, memory bandwidth, launch overhead). Deterministic; the default
  (H100, strict fp32). Implemented in C++ (`taso_env/csrc/src/cost_model.cc`).
- `table:<path.h5>` and `cuda` — measured costs; provided by the CUDA backend.

`set_cost_model(spec)` chooses the model that `Graph.cost()` uses when none is passed.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING

from taso_env import _core

if TYPE_CHECKING:
    from taso_env.graph import Graph


class CostModelError(ValueError):
    """An unknown or unavailable cost model was requested."""


class CostModel(abc.ABC):
    """Estimates the runtime of each op of a graph in milliseconds."""

    name: str

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
    def profile(self) -> dict:
        return self._model.profile

    def op_costs(self, graph: Graph) -> list[float]:
        return self._model.op_costs(graph._core)

    def graph_cost(self, graph: Graph) -> float:
        return self._model.graph_cost(graph._core)


def device_profiles() -> list[str]:
    """Names of the analytic model's built-in device profiles."""
    return _core.list_device_profiles()


def make_cost_model(spec: str | CostModel) -> CostModel:
    """Builds a cost model from a spec string: "analytic", "analytic:<profile>", ...

    Raises:
        CostModelError: for an unknown spec, or a measured model that is not available.
    """
    if isinstance(spec, CostModel):
        return spec
    kind, _, arg = str(spec).partition(":")
    if kind == "analytic":
        return AnalyticCostModel(arg or "h100")
    if kind in ("table", "cuda"):
        raise CostModelError(
            f"cost model {spec!r} needs the measured-cost backend (CUDA backend issue), "
            "which this build does not include; use 'analytic[:profile]'")
    raise CostModelError(f"unknown cost model {spec!r}; use 'analytic[:profile]', "
                         "'table:<path.h5>' or 'cuda'")


_active: CostModel | None = None


def set_cost_model(spec: str | CostModel) -> CostModel:
    """Sets the cost model used by `Graph.cost()` when no model is passed; returns it."""
    global _active
    _active = make_cost_model(spec)
    return _active


def get_cost_model() -> CostModel:
    """The active cost model (analytic H100 unless `set_cost_model` chose another)."""
    global _active
    if _active is None:
        _active = AnalyticCostModel("h100")
    return _active
