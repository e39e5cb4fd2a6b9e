#!/usr/bin/env python
"""Training throughput of the world model on this machine: graphs/s of V's train step
and of its encoder (inference), sequences/s of M's train step.

    python benchmarks/bench_worldmodel.py [--graphs squeezenet resnet50 inception_v3 bert_base]
        [--vae-hidden 128 64] [--batch-size 32] [--horizon 30] [--repeats 10]

V rows time one optimiser step (`worldmodel.vae_training.make_train_step`, traced once)
on batches of real observations from random-policy episodes of `--graphs` (so graph
sizes are those of the issue's rollouts), batch assembly from the in-memory dataset
included; encode rows time V's encoder on 256 graphs. M rows time one optimiser step on
`--batch-size` whole episodes of `--horizon` steps (drawn from the same episodes, with
V's posteriors replaced by random ones). Prints one JSON line (with the load
average: other processes skew these timings) and a markdown table.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import sonnet as snt  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import emit, median_seconds  # noqa: E402

from taso_env.env.episode import run_episode  # noqa: E402
from taso_env.env.policies import RandomPolicy  # noqa: E402
from taso_env.env.rewrite_env import GraphRewriteEnv  # noqa: E402
from taso_env.env.rollouts import RolloutMeta, pack_episode  # noqa: E402
from worldmodel.checkpoints import build_mdnrnn, build_vae  # noqa: E402
from worldmodel.dataset import EncodedEpisodes, EpisodeSet  # noqa: E402
from worldmodel.graph_vae import GraphVAE, GraphVAEConfig  # noqa: E402
from worldmodel.graphs_tuple import to_graphs_tuple  # noqa: E402
from worldmodel.mdnrnn import MDNRNN, MDNRNNConfig  # noqa: E402
from worldmodel.mdnrnn_training import SEQUENCE_FIELDS  # noqa: E402
from worldmodel.mdnrnn_training import make_train_step as make_mdnrnn_step  # noqa: E402
from worldmodel.tf_utils import init_optimizer  # noqa: E402
from worldmodel.vae_training import make_encode_decode, make_train_step  # noqa: E402


def episode_set(graphs: list[str], episodes: int, horizon: int) -> EpisodeSet:
    """Random-policy episodes of each graph, in memory (as a rollout file would hold them)."""
    env = GraphRewriteEnv(graphs, horizon=horizon)
    meta = RolloutMeta.from_env(env)
    packed = []
    for i in range(episodes * len(graphs)):
        ep = run_episode(env, RandomPolicy(), seed=i, options={"graph": graphs[i % len(graphs)]})
        packed.append((i, pack_episode(ep, episode_id=i, seed=i, meta=meta)["arrays"]))
    return EpisodeSet.from_episodes(packed)


def vae_rows(data: EpisodeSet, hidden: int, batch_size: int, repeats: int) -> list[dict]:
    vae = GraphVAE(GraphVAEConfig(n_rules=data.n_actions - 1, hidden=hidden))
    optimizer = snt.optimizers.Adam(1e-3)
    build_vae(vae)
    init_optimizer(optimizer, vae.trainable_variables)
    step = make_train_step(vae, optimizer, 100.0)
    batches = data.vae_batches(batch_size, np.random.default_rng(0))

    def train() -> None:
        graphs, targets = next(batches)
        step(to_graphs_tuple(graphs), {k: tf.constant(v) for k, v in targets.items()})

    seconds = median_seconds(train, repeats, warmup=2)
    encode = make_encode_decode(vae)
    chosen = np.random.default_rng(1).choice(data.num_observations, 256)
    enc_seconds = median_seconds(lambda: encode(data.graphs(chosen)), max(repeats // 2, 2), warmup=1)
    nodes = float(np.mean(data.n_node))
    config = f"H={hidden}, 3 steps, Z=32"
    return [{"model": "V train step", "config": config, "batch": batch_size, "mean_nodes": nodes,
             "ms_per_batch": 1e3 * seconds, "throughput": batch_size / seconds, "unit": "graphs/s"},
            {"model": "V encode", "config": config, "batch": 256, "mean_nodes": nodes,
             "ms_per_batch": 1e3 * enc_seconds, "throughput": 256 / enc_seconds, "unit": "graphs/s"}]


def mdnrnn_row(data: EpisodeSet, batch_size: int, repeats: int) -> dict:
    model = MDNRNN(MDNRNNConfig(n_rules=data.n_actions - 1))
    optimizer = snt.optimizers.Adam(1e-3)
    build_mdnrnn(model)
    init_optimizer(optimizer, model.trainable_variables)
    step = make_mdnrnn_step(model, optimizer, 10.0)
    rng = np.random.default_rng(0)
    shape = (data.num_observations, 32)  # V is not trained here: any posteriors will do
    encoded = EncodedEpisodes(data, rng.normal(size=shape).astype(np.float32), np.full(shape, -1.0, np.float32))
    z = encoded.sample_z(rng)

    def train() -> None:
        batch = encoded.batch(rng.integers(0, encoded.num_episodes, batch_size), z)
        step(*(tf.constant(batch[f]) for f in SEQUENCE_FIELDS))

    seconds = median_seconds(train, repeats, warmup=2)
    return {"model": "M train step", "config": "LSTM 256, K=5, Z=32", "batch": batch_size,
            "mean_nodes": float("nan"), "ms_per_batch": 1e3 * seconds, "throughput": batch_size / seconds,
            "unit": f"sequences/s (T={encoded.actions.shape[1]})"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", default=["squeezenet", "resnet50", "inception_v3", "bert_base"])
    parser.add_argument("--episodes", type=int, default=2, help="random-policy episodes per graph")
    parser.add_argument("--horizon", type=int, default=30, help="also M's sequence length T")
    parser.add_argument("--vae-hidden", nargs="+", type=int, default=[128, 64])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()

    data = episode_set(args.graphs, args.episodes, args.horizon)
    rows = []
    for hidden in args.vae_hidden:
        rows += vae_rows(data, hidden, args.batch_size, args.repeats)
        print(f"V H={hidden}: {rows[-2]['throughput']:.0f} graphs/s", file=sys.stderr)
    rows.append(mdnrnn_row(data, args.batch_size, args.repeats))
    print(f"M: {rows[-1]['throughput']:.0f} sequences/s", file=sys.stderr)
    emit("worldmodel_training_throughput", rows,
         ["model", "config", "batch", "mean_nodes", "ms_per_batch", "throughput", "unit"],
         graphs=args.graphs, observations=data.num_observations, load_average=os.getloadavg())


if __name__ == "__main__":
    main()
