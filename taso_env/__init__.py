"""taso_env: the substitution engine of rlflow.

    import taso_env as te
    g = te.load_onnx("model.onnx")        # or te.graphs.build("bert_base")
    g.num_ops, g.cost()                   # estimated ms under the active cost model
    g.export_onnx("out.onnx")
    te.set_cost_model("analytic:h100")
"""

from taso_env import errors, graphs, rules
from taso_env.builder import GraphBuilder, Tensor
from taso_env.cost_model import (
    AnalyticCostModel,
    CostModel,
    device_profiles,
    get_cost_model,
    set_cost_model,
)
from taso_env.graph import Graph, OpInfo, TensorInfo, TensorRef
from taso_env.onnx_import import load_onnx
from taso_env.search import Candidate, SearchResult, optimize, search

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
