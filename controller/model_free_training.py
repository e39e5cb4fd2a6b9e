"""PPO training of the model-free agent (controller.model_free) on the REAL environment,
with checkpoints, resume, a learning curve and TensorBoard.

    train_model_free(run_dir, ModelFreeConfig(...)) -> metrics dict
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import sonnet as snt
import tensorflow as tf
from tqdm import tqdm

from controller.model_free import MODEL_FREE_DIR, ModelFreeAgent, ModelFreeConfig, _net, _pad
from controller.ppo import advantages
from taso_env.engine import real_work
from taso_env.env.episode import run_episode
from taso_env.env.rewrite_env import GraphRewriteEnv
from taso_env.run_folder import RunFolder, read_json, write_json
from worldmodel.checkpoints import restore_checked
from worldmodel.graphs_tuple import batch_observations, to_graphs_tuple


def _update(net, optimizer, config: ModelFreeConfig, batch: dict) -> dict:
    gt = to_graphs_tuple(batch_observations(batch["obs"]))
    rules, valid = _pad(batch["rules"], np.int32)
    deltas, _ = _pad(batch["deltas"], np.float32)
    act = tf.constant(batch["act"], tf.int32)
    with tf.GradientTape() as tape:
        logits, value = net(gt, tf.constant(rules), tf.constant(deltas), tf.constant(valid))
        logp_all = tf.nn.log_softmax(logits, -1)
        logp = tf.gather(logp_all, act, batch_dims=1)
        ratio = tf.exp(logp - batch["logp"])
        adv = tf.constant(batch["adv"], tf.float32)
        adv = (adv - tf.reduce_mean(adv)) / (tf.math.reduce_std(adv) + 1e-8)
        policy_loss = -tf.reduce_mean(tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1 - config.clip,
                                                                                1 + config.clip) * adv))
        probs = tf.exp(logp_all)
        entropy = -tf.reduce_mean(tf.reduce_sum(tf.where(probs > 0, probs * logp_all, 0.0), -1))
        value_loss = tf.reduce_mean(tf.square(value - batch["ret"]))
        loss = policy_loss + config.value_coef * value_loss - config.entropy_coef * entropy
    grads = tape.gradient(loss, net.trainable_variables)
    grads, _ = tf.clip_by_global_norm(grads, 0.5)
    optimizer.apply(grads, net.trainable_variables)
    return {"ppo/policy_loss": float(policy_loss), "ppo/value_loss": float(value_loss),
            "ppo/entropy": float(entropy)}


def evaluate_on_graphs(net, config: ModelFreeConfig, graphs) -> float:
    """Mean speedup (best graph visited) of the deterministic policy, one episode per graph."""
    speedups = []
    for g in graphs:
        env = GraphRewriteEnv(g, horizon=config.horizon, cost_model=config.cost_model)
        agent = ModelFreeAgent(net, env, config.max_candidates)
        costs = []

        def recording(obs, info, rng, agent=agent, costs=costs):
            costs.append(info["cost"])
            return agent(obs, info, rng)

        ep = run_episode(env, recording, config.seed, record=False)
        costs.append(ep.metrics["final_cost"])
        speedups.append(ep.metrics["initial_cost"] / min(costs))
    return float(np.mean(speedups))


def train_model_free(run_dir: str | Path, config: ModelFreeConfig, restart: bool = False) -> dict:
    """Trains (or resumes) the run's model-free agent with PPO on the real environment."""
    run = RunFolder(run_dir)
    folder = run.stage_dir(MODEL_FREE_DIR)
    env = GraphRewriteEnv(list(config.graphs), horizon=config.horizon, cost_model=config.cost_model)
    run.prepare_stage(MODEL_FREE_DIR, {"train": config, "n_rules": env.n_rules}, restart=restart,
                      resumable=("train.real_steps",))
    net = _net(env.n_rules, config)
    optimizer = snt.optimizers.Adam(config.learning_rate)
    counters = tf.Variable([0, 0, 0], dtype=tf.int64)  # updates, real training steps, eval steps
    ckpt = tf.train.Checkpoint(net=net, optimizer=optimizer, counters=counters)
    manager = tf.train.CheckpointManager(ckpt, str(folder), max_to_keep=2)
    if manager.latest_checkpoint:
        restore_checked(ckpt, manager.latest_checkpoint)
    curve_path = folder / "curve.json"
    curve = read_json(curve_path) if curve_path.exists() and manager.latest_checkpoint else []
    writer = tf.summary.create_file_writer(str(run.tensorboard_dir(MODEL_FREE_DIR)))
    update, steps, eval_steps = (int(v) for v in counters.numpy())
    rng = np.random.default_rng([config.seed, update])
    agent = ModelFreeAgent(net, env, config.max_candidates, sample=True)
    obs, info = env.reset(seed=config.seed + update)
    start = time.perf_counter()
    ledger = real_work.counts()
    bar = tqdm(total=config.real_steps, initial=steps, desc="model-free (PPO on the real env)",
               disable=not sys.stderr.isatty())
    episode_return, returns = 0.0, []
    if not curve:
        before = real_work.counts()["env_step"]
        curve.append({"real_env_steps": 0, "mean_speedup": evaluate_on_graphs(net, config, config.graphs)})
        eval_steps += real_work.counts()["env_step"] - before
    while steps < config.real_steps:
        batch = {k: [] for k in ("obs", "rules", "deltas", "act", "logp", "value", "rew", "done")}
        n = min(config.steps_per_update, config.real_steps - steps)
        for _ in range(n):
            action = agent(obs, info, rng)
            rules, deltas, idx, logp, value = agent.last
            next_obs, reward, terminated, truncated, info = env.step(action)
            for key, v in zip(batch, (obs, rules, deltas, idx, logp, value, reward, terminated or truncated)):
                batch[key].append(v)
            episode_return += reward
            obs = next_obs
            if terminated or truncated:
                returns.append(episode_return)
                episode_return = 0.0
                obs, info = env.reset(seed=int(rng.integers(2**31)))
        steps += n
        bar.update(n)
        _, last_value = _value_of(net, agent, obs, info)
        adv, ret = advantages(np.array(batch["rew"])[:, None], np.array(batch["value"])[:, None],
                              np.array(batch["done"], np.float32)[:, None], np.array([last_value]),
                              config.gamma, config.gae_lambda)
        data = {**batch, "adv": adv[:, 0], "ret": ret[:, 0].astype(np.float32),
                "logp": np.array(batch["logp"], np.float32), "act": np.array(batch["act"])}
        metrics: dict[str, list] = {}
        for _ in range(config.epochs):
            order = rng.permutation(n)
            for part in np.array_split(order, min(config.minibatches, n)):
                sub = {k: ([data[k][i] for i in part] if isinstance(data[k], list) else data[k][part])
                       for k in ("obs", "rules", "deltas", "act", "logp", "adv", "ret")}
                for key, v in _update(net, optimizer, config, sub).items():
                    metrics.setdefault(key, []).append(v)
        update += 1
        with writer.as_default():
            for key, v in metrics.items():
                tf.summary.scalar(key, float(np.mean(v)), step=steps)
            if returns:
                tf.summary.scalar("real/episode_return", float(np.mean(returns[-10:])), step=steps)
        if update % config.eval_every == 0 or steps >= config.real_steps:
            before = real_work.counts()["env_step"]
            quality = evaluate_on_graphs(net, config, config.graphs)
            eval_steps += real_work.counts()["env_step"] - before
            curve.append({"real_env_steps": steps, "mean_speedup": quality})
            with writer.as_default():
                tf.summary.scalar("learning_curve/mean_speedup", quality, step=steps)
            counters.assign([update, steps, eval_steps])
            manager.save(checkpoint_number=update)
            write_json(curve_path, curve)
    bar.close()
    writer.flush()
    counters.assign([update, steps, eval_steps])
    manager.save(checkpoint_number=update)
    write_json(curve_path, curve)
    spent = real_work.since(ledger)
    result = {"real_env_steps": steps, "eval_env_steps": eval_steps, "updates": update,
              "seconds": time.perf_counter() - start, "final_mean_speedup": curve[-1]["mean_speedup"],
              "real_work_this_process": spent, "graphs": list(config.graphs)}
    write_json(folder / "metrics.json", result)
    return result


def _value_of(net, agent: ModelFreeAgent, obs, info):
    from controller.model_free import candidate_table

    _, rules, deltas = candidate_table(agent.env, info, agent.max_candidates)
    r, valid = _pad([rules], np.int32)
    d, _ = _pad([deltas], np.float32)
    logits, value = net(to_graphs_tuple(batch_observations([obs])), tf.constant(r), tf.constant(d),
                        tf.constant(valid))
    return logits, float(value.numpy()[0])


__all__ = ["evaluate_on_graphs", "train_model_free"]
