"""taso_env: the substitution engine of rlflow.

    import taso_env as te
    g = te.load_onnx("model.onnx")        # or te.graphs.build("bert_base")
    g.num_ops, g.cost()                   # estimated ms: the graph's own model or the default
    g.cost("table:h100_fp32")             # under a model passed
    g.export_onnx("out.onnx")

This module is the public face and sits above every layer of the package (lowest
first: errors, dtypes < shipped_data < engine and rules < onnx < graphs < gpu < tuning <
run_folder, ray_cluster < env; pyproject.toml's import-linter contracts and
tests/test_layers.py keep the order). Importing it plugs the higher layers into the
engine's registries: the ONNX exporter behind `Graph.export_onnx` and the `table` and
`cuda` cost models behind `make_cost_model`.
"""

try:
    from taso_env import _core  # noqa: F401  (the compiled engine, built by pip install)
except ImportError as _err:
    import os as _os
    from importlib.machinery import EXTENSION_SUFFIXES as _SUFFIXES

    _here = _os.path.dirname(_os.path.abspath(__file__))
    if any(_os.path.isfile(_os.path.join(_here, "_core" + s)) for s in _SUFFIXES):  # built, but does not load
        raise
    raise ImportError(
        f"taso_env was imported from {_here}, a source checkout whose compiled engine (_core) is not built. "
        "`python -m` and `python -c` put the working folder first on the module path, ahead of an installed "
        "rlflow: use the `rlflow` command (or `python -P -m rlflow`, Python 3.11+), run from another folder, "
        "or build the checkout in place with `pip install -e .`") from _err

from taso_env import errors, graphs, rules  # noqa: E402  (after the engine's check)
from taso_env.engine.builder import GraphBuilder, Tensor
from taso_env.engine.cost_model import (
    AnalyticCostModel,
    CostModel,
    device_profiles,
    get_cost_model,
    set_cost_model,
)
from taso_env.engine.graph import Graph, OpInfo, TensorInfo, TensorRef
from taso_env.engine.search import Candidate, SearchResult, optimize, search
from taso_env.gpu import cost_models as _measured_cost_models  # noqa: F401  (registers "table:" and "cuda:")
from taso_env.onnx import exporter as _onnx_exporter  # noqa: F401  (registers Graph.export_onnx's exporter)
from taso_env.onnx.importer import load_onnx

__all__ = [
    "AnalyticCostModel",
    "Candidate",
    "SearchResult",
    "optimize",
    "rules",
    "search",
    "CostModel",
    "Graph",
    "GraphBuilder",
    "OpInfo",
    "Tensor",
    "TensorInfo",
    "TensorRef",
    "device_profiles",
    "errors",
    "get_cost_model",
    "graphs",
    "load_onnx",
    "set_cost_model",
]

# The environment needs gymnasium; the engine does not (the GPU machine has none), so
# the env is registered when gymnasium is importable and loaded on first use.
try:
    import gymnasium as _gymnasium
except ImportError:  # pragma: no cover - engine-only installs
    _gymnasium = None
if _gymnasium is not None and "taso_env/GraphRewrite-v0" not in _gymnasium.registry:
    _gymnasium.register(id="taso_env/GraphRewrite-v0", entry_point="taso_env.env.rewrite_env:GraphRewriteEnv")

_ENV_NAMES = ("GraphRewriteEnv", "EnvConfig", "FlatCandidateActions", "InvalidActionError")


def __getattr__(name):
    if name in _ENV_NAMES:
        from taso_env.env import rewrite_env as env

        return getattr(env, name)
    raise AttributeError(f"module 'taso_env' has no attribute {name!r}")
