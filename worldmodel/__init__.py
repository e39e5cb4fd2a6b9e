"""worldmodel: the learned model of the substitution environment (World Models' V and M).

    from worldmodel import GraphVAE, GraphVAEConfig, MDNRNN, MDNRNNConfig
    vae = load_vae("runs/demo")           # the latest checkpoint of runs/demo/vae/
    mu, log_sigma = vae.encode(to_graphs_tuple(batch_observations([obs])))

The names below are imported on first use, so that importing a TensorFlow-free part
(`worldmodel.configs`, `worldmodel.dataset`) does not import TensorFlow.
"""

from __future__ import annotations

import importlib

_HOMES = {
    "GraphVAE": "worldmodel.graph_vae",
    "VAEOutput": "worldmodel.graph_vae",
    "MDNRNN": "worldmodel.mdnrnn",
    "MDNOutput": "worldmodel.mdnrnn",
    "GraphVAEConfig": "worldmodel.configs",
    "MDNRNNConfig": "worldmodel.configs",
    "batch_observations": "worldmodel.graphs_tuple",
    "graphs_tuple_signature": "worldmodel.graphs_tuple",
    "to_graphs_tuple": "worldmodel.graphs_tuple",
    "load_mdnrnn": "worldmodel.checkpoints",
    "load_vae": "worldmodel.checkpoints",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'worldmodel' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name]), name)
    globals()[name] = value
    return value
