"""The model-free baseline (after X-RLflow): a graph neural network over the current
graph scores every candidate rewrite, trained with PPO on the REAL environment.

    observation (taso_env/env/features.py) --graph_nets GraphNetwork x P--> graph embedding g
    candidate c = (rule r, location l), cost delta d_c (% of the start cost)
        logit(c)    = MLP([g, embed(r), d_c, log1p|d_c|])
        logit(stop) = Linear(g)                value = MLP(g)

The action is one of the current graph's candidates (every rule, every location the env
offers) or stop; the reward is the env's (% of the start runtime saved). Every training
step is a real environment step, counted (`real_env_steps` in metrics.json, checked
against the real-work ledger); periodically the deterministic policy is played once on
each training graph to draw the learning curve (quality against real training steps;
those evaluation episodes are counted apart, as `eval_env_steps`).

    train_model_free(run_dir, ModelFreeConfig(graphs=("squeezenet", "nasrnn")))   # model_free_training
    agent = load_model_free_agent(run_dir, env)      # a policy for run_episode

Artefacts under runs/<name>/model_free/: checkpoints, config.json, metrics.json,
curve.json; TensorBoard under runs/<name>/tb/model_free.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import sonnet as snt
import tensorflow as tf
from graph_nets import modules

from controller.configs import ModelFreeConfig
from taso_env.env.rewrite_env import GraphRewriteEnv
from taso_env.run_folder import RunFolder
from worldmodel.graph_vae import _mlp, mean_and_max
from worldmodel.graphs_tuple import batch_observations, placeholder_observation, to_graphs_tuple

MODEL_FREE_DIR = "model_free"
NEG_INF = -1e9


class CandidateScorer(snt.Module):
    """GNN policy and value over (graph, candidates); see the module docstring."""

    def __init__(self, n_rules: int, hidden: int = 64, message_passing_steps: int = 2, name: str = "model_free"):
        super().__init__(name=name)
        self.n_rules = n_rules
        with self.name_scope:
            self._encoder = modules.GraphIndependent(edge_model_fn=_mlp(hidden), node_model_fn=_mlp(hidden),
                                                     global_model_fn=_mlp(hidden), name="encoder")
            self._cores = [modules.GraphNetwork(
                edge_model_fn=_mlp(hidden), node_model_fn=_mlp(hidden), global_model_fn=_mlp(hidden),
                global_block_opt={"nodes_reducer": mean_and_max, "edges_reducer": mean_and_max},
                name=f"core_{i}") for i in range(message_passing_steps)]
            self._rule = snt.Embed(n_rules, 16, name="rule_embedding")
            self._score = snt.nets.MLP([hidden, 1], name="candidate_score")
            self._stop = snt.Linear(1, name="stop")
            self._value = snt.nets.MLP([hidden, 1], name="value")

    def embed(self, graphs_tuple) -> tf.Tensor:
        sizes = tf.cast(tf.stack([graphs_tuple.n_node, graphs_tuple.n_edge], axis=1), tf.float32)
        latent = self._encoder(graphs_tuple.replace(globals=tf.concat(
            [graphs_tuple.globals, tf.math.log1p(sizes) / 8.0], axis=1)))
        for core in self._cores:
            update = core(latent)
            latent = latent.replace(nodes=latent.nodes + update.nodes, edges=latent.edges + update.edges,
                                    globals=latent.globals + update.globals)
        return latent.globals

    def __call__(self, graphs_tuple, rules: tf.Tensor, deltas: tf.Tensor, valid: tf.Tensor):
        """rules/deltas/valid [B, K] (padded candidates) -> logits [B, 1 + K] (0 = stop), value [B]."""
        g = self.embed(graphs_tuple)
        k = tf.shape(rules)[1]
        feats = tf.concat([tf.repeat(g[:, None], k, axis=1), self._rule(rules), deltas[..., None],
                           tf.math.log1p(tf.abs(deltas))[..., None]], axis=-1)
        cand = tf.where(valid, tf.squeeze(snt.BatchApply(self._score)(feats), -1), NEG_INF)
        logits = tf.concat([self._stop(g), cand], axis=1)
        return logits, tf.squeeze(self._value(g), -1)


def candidate_table(env: GraphRewriteEnv, info: dict, max_candidates: int):
    """[(rule, location)], rule ids [K], cost deltas in % of the start cost [K]."""
    actions, rules, deltas = [], [], []
    for xfer in np.flatnonzero(info["xfer_mask"][:-1]):
        for loc, c in enumerate(env.candidates(int(xfer))):
            actions.append((int(xfer), loc))
            rules.append(int(xfer))
            deltas.append(100.0 * c.cost_delta / info["initial_cost"])
    return actions[:max_candidates], np.array(rules[:max_candidates], np.int32), \
        np.array(deltas[:max_candidates], np.float32)


def _pad(rows: list[np.ndarray], dtype) -> tuple[np.ndarray, np.ndarray]:
    k = max(1, max(len(r) for r in rows))
    out = np.zeros((len(rows), k), dtype)
    valid = np.zeros((len(rows), k), bool)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
        valid[i, :len(r)] = True
    return out, valid


class ModelFreeAgent:
    """The trained scorer as a policy (obs, info, rng) -> (xfer, location) on a real env."""

    def __init__(self, net: CandidateScorer, env, max_candidates: int = 512, sample: bool = False):
        self.net, self.env, self.max_candidates, self.sample = net, env.unwrapped, max_candidates, sample
        self.last = None  # (rules, deltas, index, log_prob, value) of the last action

    def __call__(self, obs: dict, info: dict, rng: np.random.Generator) -> np.ndarray:
        actions, rules, deltas = candidate_table(self.env, info, self.max_candidates)
        gt = to_graphs_tuple(batch_observations([obs]))
        padded_rules, valid = _pad([rules], np.int32)
        logits, value = self.net(gt, tf.constant(padded_rules), tf.constant(_pad([deltas], np.float32)[0]),
                                 tf.constant(valid))
        logits = logits.numpy()[0]
        if self.sample:
            p = np.exp(logits - logits.max())
            idx = int(rng.choice(len(p), p=p / p.sum()))
        else:
            idx = int(np.argmax(logits))
        log_prob = float(logits[idx] - (logits.max() + np.log(np.exp(logits - logits.max()).sum())))
        self.last = (rules, deltas, idx, log_prob, float(value.numpy()[0]))
        return np.array(actions[idx - 1]) if idx > 0 else np.array([len(info["xfer_mask"]) - 1, 0])


def _net(n_rules: int, config: ModelFreeConfig) -> CandidateScorer:
    net = CandidateScorer(n_rules, config.hidden, config.message_passing_steps)
    gt = to_graphs_tuple(batch_observations([placeholder_observation()]))
    net(gt, tf.zeros([1, 1], tf.int32), tf.zeros([1, 1]), tf.ones([1, 1], tf.bool))  # build variables
    return net


def load_model_free_agent(run_dir: str | Path, env) -> ModelFreeAgent:
    """The run's trained model-free agent acting on `env` (deterministic)."""
    from worldmodel.checkpoints import CheckpointNotFoundError, restore_checked

    folder = Path(run_dir) / MODEL_FREE_DIR
    saved = RunFolder(run_dir).stage_config(MODEL_FREE_DIR)
    latest = tf.train.latest_checkpoint(str(folder))
    if saved is None or latest is None:
        raise CheckpointNotFoundError(f"no trained model-free agent in {folder} (run `rlflow train-model-free`)")
    config = ModelFreeConfig(**{**saved["train"], "graphs": tuple(saved["train"]["graphs"])})
    net = _net(int(saved["n_rules"]), config)
    restore_checked(tf.train.Checkpoint(net=net), latest).expect_partial()
    return ModelFreeAgent(net, env, config.max_candidates)


__all__ = ["CandidateScorer", "ModelFreeAgent", "ModelFreeConfig", "candidate_table", "load_model_free_agent"]
