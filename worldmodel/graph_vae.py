"""V: a graph variational auto-encoder that compresses an observation into z.

    GraphsTuple (real rows only; worldmodel/graphs_tuple.py)
      nodes [N, NODE_DIM]   edges [E, EDGE_DIM]   globals [B, GLOBAL_DIM] + log sizes
            |  encoder: one MLP per field (GraphIndependent) -> width H
            v
      +-------------------------------------------------------------------+
      | GraphNetwork   edge   <- (edge, sender, receiver, global)         |  x message_passing_steps
      | (residual,     node   <- (node, sum in-edges, sum out-edges, glob) |  (own weights each)
      |  LayerNorm)    global <- (mean|max nodes, mean|max edges, global) |
      +-------------------------------------------------------------------+
            |  global embedding [B, H]
            v
      MLP -> mu [B, Z], log_sigma [B, Z];  z = mu + sigma * eps
            |
            v  decoder MLP
      cost [B, 2]   histogram [B, NUM_OP_TYPES] (softmax)   counts [B, R]   mask_logits [B, R]

R = n_rules + 1 (the last action is stop). The reconstruction targets are documented in
worldmodel/targets.py. The loss is a negative log-likelihood plus beta * KL:

    recon = |cost - cost'|^2 / (2 cost_sigma^2) + histogram_weight * KL(histogram || histogram')
          + |counts - counts'|^2 / (2 count_sigma^2) + sum_r BCE(mask_r, mask_logits_r)

The sigmas set how precisely z must carry each part: with unit sigmas the KL term would
win and z would collapse to the prior (a 1% cost error would be worth 5e-5 nats).
"""

from __future__ import annotations

from typing import NamedTuple

import sonnet as snt
import tensorflow as tf
from graph_nets import blocks, graphs, modules

from taso_env.env.features import NUM_OP_TYPES
from worldmodel.configs import GraphVAEConfig

# Bounds of log sigma: below -7 the KL gradient explodes, above 2 z is noise.
_LOG_SIGMA_MIN, _LOG_SIGMA_MAX = -7.0, 2.0
_EPS = 1e-7


class VAEOutput(NamedTuple):
    """z [B, Z], mu [B, Z], log_sigma [B, Z], recon (decode(z), see GraphVAE.decode)."""

    z: tf.Tensor
    mu: tf.Tensor
    log_sigma: tf.Tensor
    recon: dict


def _mlp(hidden: int, layers: int = 1, layer_norm: bool = True, name: str | None = None):
    """A factory of `layers` ReLU layers of width `hidden` (+ LayerNorm), as graph_nets'
    blocks expect."""

    def make():
        parts = [snt.nets.MLP([hidden] * layers, activate_final=True)]
        if layer_norm:
            parts.append(snt.LayerNorm(axis=-1, create_scale=True, create_offset=True))
        return snt.Sequential(parts, name=name)

    return make


def mean_and_max(data: tf.Tensor, segment_ids: tf.Tensor, num_segments: tf.Tensor) -> tf.Tensor:
    """[num_segments, 2 D]: the mean and the max of each graph's rows (0 for a graph
    without rows). The max tells whether a pattern occurs anywhere in the graph (which
    is what a rule's mask says) even when it occurs once among hundreds of nodes."""
    return tf.concat([tf.math.unsorted_segment_mean(data, segment_ids, num_segments),
                      blocks.unsorted_segment_max_or_zero(data, segment_ids, num_segments)], axis=-1)


class GraphVAE(snt.Module):
    """See the module docstring. Variables are created on the first call."""

    def __init__(self, config: GraphVAEConfig, name: str = "graph_vae"):
        super().__init__(name=name)
        if not isinstance(config, GraphVAEConfig):
            raise TypeError(f"GraphVAE needs a GraphVAEConfig, got {type(config).__name__}")
        self.config = config
        self.n_actions = config.n_rules + 1
        h = config.hidden
        with self.name_scope:
            self._encoder = modules.GraphIndependent(
                edge_model_fn=_mlp(h), node_model_fn=_mlp(h), global_model_fn=_mlp(h), name="encoder")
            self._cores = [
                modules.GraphNetwork(
                    edge_model_fn=_mlp(h), node_model_fn=_mlp(h), global_model_fn=_mlp(h),
                    node_block_opt={"use_sent_edges": True,
                                    "received_edges_reducer": tf.math.unsorted_segment_sum,
                                    "sent_edges_reducer": tf.math.unsorted_segment_sum},
                    global_block_opt={"nodes_reducer": mean_and_max, "edges_reducer": mean_and_max},
                    name=f"core_{i}")
                for i in range(config.message_passing_steps)]
            self._posterior = snt.Sequential([
                snt.nets.MLP([h], activate_final=True), snt.Linear(2 * config.latent_dim)], name="posterior")
            self._decoder = snt.nets.MLP([h, h], activate_final=True, name="decoder")
            self._heads = {
                "cost": snt.Linear(2, name="cost_head"),
                "histogram": snt.Linear(NUM_OP_TYPES, name="histogram_head"),
                "counts": snt.Linear(self.n_actions, name="counts_head"),
                "mask_logits": snt.Linear(self.n_actions, name="mask_head"),
            }

    def embed(self, graphs_tuple: graphs.GraphsTuple) -> tf.Tensor:
        """[B, H] global embedding of each graph (message passing over real rows only)."""
        sizes = tf.cast(tf.stack([graphs_tuple.n_node, graphs_tuple.n_edge], axis=1), tf.float32)
        globals_ = tf.concat([graphs_tuple.globals, tf.math.log1p(sizes) / 8.0], axis=1)
        latent = self._encoder(graphs_tuple.replace(globals=globals_))
        for core in self._cores:
            update = core(latent)
            latent = latent.replace(nodes=latent.nodes + update.nodes, edges=latent.edges + update.edges,
                                    globals=latent.globals + update.globals)
        return latent.globals

    def encode(self, graphs_tuple: graphs.GraphsTuple) -> tuple[tf.Tensor, tf.Tensor]:
        """(mu [B, Z], log_sigma [B, Z]) of the posterior q(z | graph)."""
        stats = self._posterior(self.embed(graphs_tuple))
        mu, log_sigma = tf.split(stats, 2, axis=1)
        return mu, tf.clip_by_value(log_sigma, _LOG_SIGMA_MIN, _LOG_SIGMA_MAX)

    def decode(self, z: tf.Tensor) -> dict[str, tf.Tensor]:
        """Reconstructions from z [B, Z]: {"cost": [B, 2], "histogram": [B, NUM_OP_TYPES]
        (probabilities), "counts": [B, R] (log1p counts), "mask_logits": [B, R]}."""
        hidden = self._decoder(z)
        out = {k: head(hidden) for k, head in self._heads.items()}
        out["histogram"] = tf.nn.softmax(out["histogram"], axis=-1)
        return out

    def __call__(self, graphs_tuple: graphs.GraphsTuple, sample: bool = True) -> VAEOutput:
        """Encodes, draws z (mu itself when `sample` is False) and decodes."""
        mu, log_sigma = self.encode(graphs_tuple)
        z = mu + tf.exp(log_sigma) * tf.random.normal(tf.shape(mu)) if sample else mu
        return VAEOutput(z=z, mu=mu, log_sigma=log_sigma, recon=self.decode(z))

    def reconstruction_terms(self, recon: dict, targets: dict) -> dict[str, tf.Tensor]:
        """Per-graph negative log-likelihood of each target part, each [B]."""
        c = self.config
        hist = targets["histogram"]
        return {
            "cost": tf.reduce_sum(tf.square(recon["cost"] - targets["cost"]), -1) / (2 * c.cost_sigma ** 2),
            "histogram": c.histogram_weight * tf.reduce_sum(
                hist * (tf.math.log(hist + _EPS) - tf.math.log(recon["histogram"] + _EPS)), -1),
            "counts": tf.reduce_sum(tf.square(recon["counts"] - targets["counts"]), -1)
            / (2 * c.count_sigma ** 2),
            "mask": tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
                labels=targets["mask"], logits=recon["mask_logits"]), -1),
        }

    @staticmethod
    def kl_divergence(mu: tf.Tensor, log_sigma: tf.Tensor) -> tf.Tensor:
        """[B] KL(N(mu, sigma^2) || N(0, 1)) summed over the latent dimensions."""
        return 0.5 * tf.reduce_sum(tf.square(mu) + tf.exp(2 * log_sigma) - 1.0 - 2 * log_sigma, -1)

    def loss(self, graphs_tuple: graphs.GraphsTuple, targets: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Batch-mean losses: {"total", "recon", "kl", "cost", "histogram", "counts", "mask"}
        with total = recon + beta * kl (targets: worldmodel/targets.py, as tensors)."""
        out = self(graphs_tuple, sample=True)
        terms = {k: tf.reduce_mean(v) for k, v in self.reconstruction_terms(out.recon, targets).items()}
        recon = tf.add_n(list(terms.values()))
        kl = tf.reduce_mean(self.kl_divergence(out.mu, out.log_sigma))
        return {"total": recon + self.config.beta * kl, "recon": recon, "kl": kl, **terms}
