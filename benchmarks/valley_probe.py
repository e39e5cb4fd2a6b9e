"""What a run's dream says about the valley family's valley, beside the real env: at
greedy's optimum of each graph, the valley's entry (enlarge_conv_1x1_to_3x3) at each of
its places.

    python benchmarks/valley_probe.py --run RUN valley_0 valley_100 [--dreams 3]

Per graph:
    M     the improving candidates M predicts after the entry at each place (given its
          real reward), and at place -1 (the rule alone); with carry_candidates, as the
          dream takes them: the optimum's carried over except where M predicts a change
    dream dreams from the optimum: the entry at place 0, then the best predicted
          candidate while one improves (each dream seed a line)
    real  the real candidates after the entry at each place, and the real valley: the
          entry at place 0, then the best improving rewrite other than its undo
Cost model: the run's rollouts' (table:h100_fp32 for benchmarks/valley_learning.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ENTRY, UNDO = "enlarge_conv_1x1_to_3x3", "shrink_enlarged_conv"


def _optimum(env, graph: str):
    from taso_env.env.policies import GreedyPolicy

    obs, info = env.reset(options={"graph": graph})
    greedy, rng = GreedyPolicy(env), np.random.default_rng(0)
    while (action := greedy(obs, info, rng))[0] != env.n_rules:
        obs, _, _, _, info = env.step(action)
    return obs, info


def _improving(top: np.ndarray, names) -> list:
    rows, places = np.where(np.isfinite(top[:-1]) & (top[:-1] > 0.05))
    return [(names[r], int(p), round(float(top[r, p]), 2)) for r, p in zip(rows, places)]


def main(argv=None) -> int:
    import tensorflow as tf

    from taso_env.env.rewrite_env import EnvConfig, GraphRewriteEnv
    from taso_env.env.rollouts import RolloutReader
    from worldmodel import candidate_carry
    from worldmodel.checkpoints import load_mdnrnn, load_vae
    from worldmodel.configs import DreamConfig
    from worldmodel.dream_env import Dream
    from worldmodel.graphs_tuple import batch_observations, to_graphs_tuple
    from worldmodel.moves import move

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", required=True)
    p.add_argument("graphs", nargs="+")
    p.add_argument("--dreams", type=int, default=3)
    a = p.parse_args(argv)
    vae, m = load_vae(a.run), load_mdnrnn(a.run)
    cost_model = json.loads(RolloutReader(os.path.join(a.run, "rollouts.h5")).meta.env_config)["cost_model"]
    env = GraphRewriteEnv(list(a.graphs), config=EnvConfig(cost_model=cost_model, horizon=40))
    names = env.rules.names()
    entry, undo, n_actions, width = names.index(ENTRY), names.index(UNDO), env.n_rules + 1, m.config.top_locations
    print(f"run {a.run}; cost model {cost_model}; M candidate inputs {m.config.candidate_inputs}, "
          f"carry candidates {m.config.carry_candidates}")
    for graph in a.graphs:
        obs, info = _optimum(env, graph)
        top = info["top_rewards"]
        print(f"{graph}: entry rewards at greedy's optimum {[round(float(x), 2) for x in top[entry]]}")
        mu, log_sigma = vae.encode(to_graphs_tuple(batch_observations([obs])))
        for place in [*range(width), -1]:
            if place >= 0 and not np.isfinite(top[entry, place]):
                continue
            taken = tf.constant([float(top[entry, place]) if place >= 0 else 0.0])
            out, _ = m.step(mu, tf.constant(move(entry, place, n_actions)[None]), m.initial_state(1), taken=taken)
            predicted = np.where(tf.sigmoid(out.slot_logits)[0].numpy() > 0.5, out.slot_rewards[0].numpy(), -np.inf)
            if m.config.carry_candidates:
                predicted = candidate_carry.merged(candidate_carry.carried(top, entry, place), predicted,
                                                   out.changed_logits[0].numpy() > 0)
            predicted = _improving(predicted, names)
            print(f"  M     place {place:2d}: improving next {predicted}")
        latents = np.stack([mu.numpy(), log_sigma.numpy()], 1)
        for seed in range(a.dreams):
            dream = Dream(vae, m, latents, top[None].astype(np.float32), DreamConfig(horizon=20), batch_size=1,
                          seed=seed)
            dream.reset()
            action, path, total = entry * width, [], 0.0
            for _ in range(8):
                _, after, reward, terminated, truncated, _ = dream.step(np.array([action]))
                total += float(reward[0])
                path.append(f"{names[action // width]}@{action % width}:{reward[0]:+.2f}")
                if terminated[0] or truncated[0]:
                    break
                t = after[0, :-1]
                best = np.unravel_index(np.argmax(np.where(np.isfinite(t), t, -1e9)), t.shape)
                if not t[best] > 0:
                    break
                action = best[0] * width + best[1]
            print(f"  dream seed {seed}: {total:+.2f} " + " -> ".join(path))
        for place in range(width):
            if not np.isfinite(top[entry, place]):
                continue
            _, start = _optimum(env, graph)
            _, reward, _, _, after = env.step(np.array([entry, start["top_locations"][entry, place]]))
            nxt = _improving(after["top_rewards"], names)
            print(f"  real  place {place:2d}: reward {reward:+.2f}; improving next {nxt}")
        _, start = _optimum(env, graph)
        _, reward, _, _, info = env.step(np.array([entry, start["top_locations"][entry, 0]]))
        path, total = [f"entry {reward:+.2f}"], reward
        for _ in range(8):
            t = info["top_rewards"][:-1].copy()
            t[undo] = -np.inf
            best = np.unravel_index(np.argmax(np.where(np.isfinite(t), t, -1e9)), t.shape)
            if not t[best] > 0:
                break
            _, reward, _, _, info = env.step(np.array([best[0], info["top_locations"][best]]))
            total += reward
            path.append(f"{names[best[0]]}@{best[1]} {reward:+.2f}")
        print(f"  real  valley: {total:+.2f} " + " -> ".join(path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
