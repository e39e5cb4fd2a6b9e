"""sb3-contrib's MaskablePPO on rlflow's rewrite environment (no TensorFlow needed).

    pip install ".[env]" torch stable-baselines3 sb3-contrib
    python examples/maskable_ppo.py --graph nasrnn --steps 50000

The env's flat-action form (`FlatCandidateActions`) gives one Discrete action per offered
candidate rewrite, best estimated first, plus stop; `action_masks()` marks the valid
ones and the observation's `candidates` rows say what each action is (docs/env.md).
The script trains, then plays the deterministic policy once and prints its speedup
beside a masked-uniform random policy's and greedy's, as one JSON line.

Best run where TensorFlow is not installed (`.[env]`): with TensorFlow installed,
`import stable_baselines3` imports it too, which with torch's CUDA build has been seen to
crash the process unless torch is imported first (docs/env.md).
"""

from __future__ import annotations

import argparse
import json

import gymnasium
import numpy as np
from sb3_contrib import MaskablePPO

from taso_env.env.rewrite_env import FlatCandidateActions, GraphRewriteEnv


def make_env(graph: str, horizon: int, observation: str = "candidates") -> gymnasium.Env:
    """The flat-action env; observation "candidates" keeps only the per-action rows and
    the graph's globals (a small input for an MLP policy), "full" keeps the graph too."""
    env = FlatCandidateActions(GraphRewriteEnv(graph, horizon=horizon), max_candidates=512)
    if observation == "candidates":
        env = gymnasium.wrappers.FilterObservation(env, ["candidates", "globals"])
    return env


def play(env: gymnasium.Env, act, seed: int) -> tuple[float, int]:
    """Runs one episode with `act(obs, mask) -> action`; returns (initial / final cost,
    number of actions the mask ruled out)."""
    obs, info = env.reset(seed=seed)
    done, invalid = False, 0
    while not done:
        obs, _, terminated, truncated, info = env.step(act(obs, env.get_wrapper_attr("action_masks")()))
        invalid += info["invalid_action"]
        done = terminated or truncated
    return info["initial_cost"] / info["cost"], invalid


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graph", default="nasrnn")
    parser.add_argument("--steps", type=int, default=50_000, help="real env steps of training")
    parser.add_argument("--horizon", type=int, default=80)
    parser.add_argument("--observation", choices=("candidates", "full"), default="candidates")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    env = make_env(args.graph, args.horizon, args.observation)
    model = MaskablePPO("MultiInputPolicy", env, n_steps=512, batch_size=128, learning_rate=3e-4,
                        ent_coef=0.01, seed=args.seed, verbose=0)
    model.learn(total_timesteps=args.steps)

    def trained(obs, mask):
        return int(model.predict(obs, action_masks=mask, deterministic=True)[0])

    rng = np.random.default_rng(args.seed)

    def random_valid(obs, mask):
        return int(rng.choice(np.flatnonzero(mask)))

    def greedy(obs, mask):  # the best-estimated candidate while it improves, then stop
        best = obs["candidates"][0]
        return 0 if mask[0] and best[3] > 0 else len(mask) - 1

    players = {"maskable_ppo": [play(env, trained, seed=0)],
               "random": [play(env, random_valid, seed=s) for s in range(5)],
               "greedy": [play(env, greedy, seed=0)]}
    result = {"graph": args.graph, "train_steps": args.steps, "observation": args.observation,
              **{name: float(np.mean([speedup for speedup, _ in runs])) for name, runs in players.items()},
              "invalid_actions": {name: sum(bad for _, bad in runs) for name, runs in players.items()}}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
