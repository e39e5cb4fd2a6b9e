"""Does learning let the dream-trained controller cross a valley greedy stops in front of?
The valley family's training members give the rollouts; V and M are trained once; the
controller and its ablations are trained in the dream with several seeds, then every
row is evaluated on the held-out members (taso_env/graphs/valley_family.py).

    python benchmarks/valley_learning.py --out runs/valley [--seeds 0 1 2 3 4]

Steps, each an `rlflow` command (rerunning resumes where it stopped):
    collect   valley_0..7, --policy explore_optima (greedy's optimum, then affordable
              losing rewrites and random improving ones), table:h100_fp32
    V, M      on those rollouts (OUT/world); M with --candidate-inputs (it reads the move
              and the taken candidate's reward) and --carry-candidates --changed-weight 30
              (the dream keeps the candidates a step does not change)
    per seed  OUT/seed_<s>: the world's V, M and rollouts (linked), the controller
              trained with that seed and the requested variants (untrained_world,
              myopic_world), each with the dream's "best_so_far" reward (a rewrite earns
              what takes the graph below the episode's best so far, as the evaluation
              keeps the best graph); `rlflow evaluate` of every row on the held-out members
A row *takes the valley* on a graph when it ends more than 0.3% below greedy's cost
(controller.versus_greedy.MARGIN): on these graphs only a losing rewrite that pays back
later gets there. Per row: the share of (held-out member, seed) pairs where it does,
and its mean gain over greedy (speedup / greedy's - 1).

Prints one JSON line, then the markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from common import emit  # noqa: E402

from controller.versus_greedy import MARGIN  # noqa: E402
from rlflow.pipeline import run_stage  # noqa: E402
from taso_env.graphs import valley_family  # noqa: E402

COST_MODEL = "table:h100_fp32"
ROWS = {"controller": None, "controller_random_init": None, "controller_untrained_world": "untrained_world",
        "controller_myopic_world": "myopic_world", "greedy_random_detours": None}
SHARED = ("config.json", "rollouts.h5", "rollouts.h5.episodes", "vae", "mdnrnn")


def rlflow(command: str, *args: str) -> None:
    """`rlflow <command> <args>` in a child process (rlflow.pipeline.run_stage), from the
    working folder; paths in `args` are absolute (main makes --out so)."""
    print(f"+ rlflow {command} " + " ".join(args), file=sys.stderr, flush=True)
    run_stage(command, args, cwd=os.getcwd())


def world(out: str, a) -> str:
    """OUT/world: the rollouts, V and M (each step resumes)."""
    run = os.path.join(out, "world")
    train = [f"valley_{s}" for s in valley_family.TRAIN_SEEDS]
    rlflow("collect", "--graphs", *train, "--episodes", str(a.episodes), "--policy", "explore_optima",
           "--workers", str(a.workers), "--horizon", str(a.horizon), "--cost-model", COST_MODEL,
           "--out", os.path.join(run, "rollouts.h5"))
    rlflow("train-vae", "--run", run, "--steps", str(a.vae_steps), "--seed", "0")
    rlflow("train-mdnrnn", "--run", run, "--steps", str(a.mdnrnn_steps), "--seed", "0", "--candidate-inputs",
           "--carry-candidates", "--changed-weight", "30", "--slot-reward-loss", a.slot_reward_loss)
    return run


def seed_run(world_run: str, out: str, seed: int) -> str:
    """OUT/seed_<s> sharing the world's rollouts, V and M (linked, not copied)."""
    run = os.path.join(out, f"seed_{seed}")
    os.makedirs(run, exist_ok=True)
    for name in SHARED:
        target, link = os.path.abspath(os.path.join(world_run, name)), os.path.join(run, name)
        if name == "config.json":
            if not os.path.exists(link):
                shutil.copyfile(target, link)  # the run's own stages are added to it
        elif not os.path.lexists(link):
            os.symlink(target, link)
    return run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder of the world and the per-seed runs")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    p.add_argument("--variants", nargs="*", default=["untrained_world"],
                   help="controller variants trained per seed beside the controller (untrained_world, myopic_world)")
    p.add_argument("--episodes", type=int, default=8000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--horizon", type=int, default=20)
    p.add_argument("--vae-steps", type=int, default=600)
    p.add_argument("--mdnrnn-steps", type=int, default=1500)
    p.add_argument("--updates", type=int, default=200)
    p.add_argument("--num-dreams", type=int, default=32)
    p.add_argument("--rollout-steps", type=int, default=16)
    p.add_argument("--learning-rate", type=float, default=3e-4,
                   help="C's (the default 1e-3 learns to stop everywhere within 10 updates on this family)")
    p.add_argument("--entropy-coef", type=float, default=0.1)
    p.add_argument("--slot-reward-loss", default="squared", choices=("squared", "asinh"))
    a = p.parse_args(argv)
    a.out = os.path.abspath(a.out)
    world_run = world(a.out, a)
    held_out = valley_family.members("held_out")
    rows = [r for r, v in ROWS.items() if v is None or v in a.variants]
    results = []
    for seed in a.seeds:
        run = seed_run(world_run, a.out, seed)
        ppo = ["--updates", str(a.updates), "--horizon", str(a.horizon), "--num-dreams", str(a.num_dreams),
               "--rollout-steps", str(a.rollout_steps), "--seed", str(seed), "--learning-rate", str(a.learning_rate),
               "--entropy-coef", str(a.entropy_coef), "--reward", "best_so_far"]
        rlflow("train-controller", "--run", run, *ppo)
        for variant in a.variants:
            rlflow("train-controller", "--run", run, "--variant", variant, *ppo)
        evaluation = os.path.join(run, "eval_held_out")
        if not os.path.exists(os.path.join(evaluation, "results.json")):
            rlflow("evaluate", "--run", run, "--out", evaluation, "--cost-model", COST_MODEL, "--seed", str(seed),
                   "--agents", *rows, "greedy", "backtracking", "--graphs", *held_out)
        with open(os.path.join(evaluation, "results.json")) as f:
            results += [{**r, "seed": seed} for r in json.load(f)]
    greedy = {(r["seed"], r["graph"]): r["speedup"] for r in results if r["agent"] == "greedy"}
    table = []
    for agent in [*ROWS, "greedy", "backtracking"]:  # every row some seed's evaluation holds
        mine = [r for r in results if r["agent"] == agent]
        if not mine:
            continue
        ratios = [r["speedup"] / greedy[(r["seed"], r["graph"])] - 1.0 for r in mine]
        table.append({"agent": agent, "pairs": len(mine),
                      "valley_taken": round(sum(x > MARGIN for x in ratios) / len(mine), 4),
                      "mean_gain_over_greedy_pct": round(100 * sum(ratios) / len(mine), 4),
                      "env_steps": round(sum(r["env_steps"] for r in mine) / len(mine), 2)})
    emit("valley_learning", table, ["agent", "pairs", "valley_taken", "mean_gain_over_greedy_pct", "env_steps"],
         seeds=a.seeds, graphs=held_out, cost_model=COST_MODEL,
         settings={k: v for k, v in vars(a).items() if k != "out"},
         per_graph=[{k: r[k] for k in ("seed", "graph", "agent", "speedup", "env_steps")} for r in results])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
