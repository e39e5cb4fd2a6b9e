"""worldmodel: the learned model of the substitution environment (World Models' V and M).

    from worldmodel import GraphVAE, GraphVAEConfig, MDNRNN, MDNRNNConfig
    vae = load_vae("runs/demo")           # the latest checkpoint of runs/demo/vae/
    mu, log_sigma = vae.encode(to_graphs_tuple(batch_observations([obs])))
"""

from worldmodel.checkpoints import load_mdnrnn, load_vae
from worldmodel.graph_vae import GraphVAE, GraphVAEConfig, VAEOutput
from worldmodel.graphs_tuple import batch_observations, graphs_tuple_signature, to_graphs_tuple
from worldmodel.mdnrnn import MDNRNN, MDNOutput, MDNRNNConfig

__all__ = [
    "GraphVAE",
    "GraphVAEConfig",
    "MDNOutput",
    "MDNRNN",
    "MDNRNNConfig",
    "VAEOutput",
    "batch_observations",
    "graphs_tuple_signature",
    "load_mdnrnn",
    "load_vae",
    "to_graphs_tuple",
]
