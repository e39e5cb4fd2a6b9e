"""The tuning driver behind `rlflow tune` / scripts/tune.py (docs/tuning.md):

- `record`: measure each graph's tuning space on this GPU into `records_dir`.
- `tune`: tune each graph live on the GPU (`live: true`; the best plan goes into the
  plan store, where new processes pick it up) or from its records (replayed).
- `benchmark`: every tuner on every graph's records, each seed, budget max(budgets);
  best time after each budget, trials to reach `target_pct` of the best recorded
  config; a markdown table, a JSON file and a plot of best-found time vs trials.
- `experiment`: GA-DQN variants (DQN crossover only, mutation only, both, and
  hyper-parameters) on the same records and seeds.

Every run logs scalars to TensorBoard under out_dir/tensorboard/; results are written
per (mode, graph, tuner, seed) as they finish, and a rerun skips what is done (resume).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import time
from collections.abc import Callable

import numpy as np

from taso_env.errors import TuningError
from taso_env.gpu.conv_algorithm_search import child_python
from taso_env.tuning.config import TuneConfig, graph_name, resolve_graph
from taso_env.tuning.records import TuningRecords, replay_check
from taso_env.tuning.tuners import import_registering_modules, make_tuner, registering_modules, run_tuner

Log = Callable[[str], None]


class Scalars:
    """TensorBoard scalars written with the tensorboard package's own event writer: no
    TensorFlow and no torch in the process (the GPU machine has no TensorFlow, and
    importing torch there first would swap the cuDNN the executor loads)."""

    def __init__(self, logdir: str):
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        os.makedirs(logdir, exist_ok=True)
        self._w = EventFileWriter(logdir)

    def scalar(self, tag: str, value: float, step: int) -> None:
        if not np.isfinite(value):
            return
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._w.add_event(Event(wall_time=time.time(), step=int(step),
                                summary=Summary(value=[Summary.Value(tag=tag, simple_value=float(value))])))

    def close(self) -> None:
        self._w.close()


def _jsonl_done(path: str) -> dict[str, dict]:
    done = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    row = json.loads(line)
                    done[row["key"]] = row
    return done


def _append(path: str, row: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def load_records(cfg: TuneConfig, graph: str) -> TuningRecords:
    return TuningRecords.load(cfg.records_path(graph))


# -- record -----------------------------------------------------------------------------
def record(cfg: TuneConfig, log: Log = print) -> dict:
    from taso_env.graphs import load as load_graph
    from taso_env.tuning.measurer import record_graph

    out = {}
    for spec in cfg.graphs:
        name = graph_name(spec)
        path = cfg.records_path(spec)
        if os.path.exists(path):
            log(f"{name}: records exist at {path} (kept; delete the file to re-record)")
            rec = TuningRecords.load(path)
        else:
            rec = record_graph(load_graph(resolve_graph(spec)), name, cfg.math, log=log,
                               samples_uniform=int(cfg.record["samples_uniform"]),
                               samples_local=int(cfg.record["samples_local"]))
            rec.save(path)
        out[name] = summarize_records(rec, path)
        log(json.dumps({"records": name, **out[name]}))
    return out


def summarize_records(rec: TuningRecords, path: str | None = None) -> dict:
    best, best_ms = rec.best_config()
    kinds = {}
    for k in rec.space.knobs:
        kinds[k.kind] = kinds.get(k.kind, 0) + 1
    s = {"knobs": len(rec.space), "knob_kinds": kinds, "log10_configs": round(rec.space.log10_size(), 1),
         "part_records": int(len(rec.ms)), "fixed_ops": len(rec.fixed_ops), "fixed_ms": rec.fixed_ms,
         "default_replayed_ms": rec.default_ms(), "best_replayed_ms": best_ms,
         "default_measured_ms": rec.default_measured_ms, "device": rec.meta.get("device"),
         "math": rec.space.math}
    if path:
        s["bytes"] = os.path.getsize(path)
    if rec.samples is not None and len(rec.samples.measured_ms) >= 3:
        s.update(replay_check(rec))
    return s


# -- tune -------------------------------------------------------------------------------
def tune(cfg: TuneConfig, log: Log = print) -> dict:
    results = {}
    for spec in cfg.graphs:
        rec = load_records(cfg, spec)
        results[graph_name(spec)] = tune_live(cfg, spec, rec, log) if cfg.live else tune_replay(cfg, spec, rec, log)
    return results


def tune_replay(cfg: TuneConfig, spec: str, rec: TuningRecords, log: Log) -> dict:
    name, seed = graph_name(spec), cfg.seeds[0]
    tuner = make_tuner(cfg.live_tuner, rec.space, seed, **cfg.tuner_params.get(cfg.live_tuner, {}))
    tb = Scalars(os.path.join(cfg.out_dir, "tensorboard", "tune", name, f"{cfg.live_tuner}_seed{seed}"))
    curve = run_tuner(tuner, lambda cs: [rec.replay(c) for c in cs], cfg.max_budget, cfg.batch,
                      on_batch=lambda n, b: tb.scalar("best_ms", b, n))
    tb.close()
    plan = rec.space.to_plan(tuner.best_config)
    out = {"mode": "replay", "tuner": cfg.live_tuner, "trials": len(curve), "best_ms": tuner.best_cost,
           "default_ms": rec.default_ms(), "best_recorded_ms": rec.best_config()[1], "plan_ops": len(plan)}
    path = os.path.join(cfg.out_dir, f"plan_{name}_{cfg.math}.json")
    os.makedirs(cfg.out_dir, exist_ok=True)
    with open(path, "w") as f:
        json.dump({"graph": name, "math": cfg.math, "device": rec.meta.get("device"), **out,
                   "plan": {str(k): v for k, v in plan.items()}}, f, indent=1)
    log(json.dumps({"tuned": name, **out, "plan_file": path}))
    return out


def tune_live(cfg: TuneConfig, spec: str, rec: TuningRecords, log: Log) -> dict:
    """Live tuning on this GPU, starting from the executor's default plan and the best
    plan of the graph's records (the first population is these two and mutants of them);
    the best plan and the default are then re-measured alternately (7 each) and the plan
    is stored if its median is faster."""
    from taso_env.gpu import plan_store
    from taso_env.graphs import load as load_graph
    from taso_env.tuning.measurer import LiveMeasurer, host_fed_ops, measure_plan

    name, seed = graph_name(spec), cfg.seeds[0]
    graph = load_graph(resolve_graph(spec))
    host_fed = host_fed_ops(graph)
    space = rec.space
    params = dict(cfg.tuner_params.get(cfg.live_tuner, {}))
    if cfg.live_tuner in ("ga", "gadqn"):  # start at the default and at the records' best plan
        params.setdefault("init", [space.default_config(), rec.best_config()[0]])
    tuner = make_tuner(cfg.live_tuner, space, seed, **params)
    measure = LiveMeasurer(graph, space, cfg.math, host_fed)
    tb = Scalars(os.path.join(cfg.out_dir, "tensorboard", "tune_live", name))
    t0 = time.time()
    run_tuner(tuner, measure, cfg.live_trials, cfg.batch, on_batch=lambda n, b: tb.scalar("best_ms", b, n))
    best_plan = space.to_plan(tuner.best_config)
    tuned, default = [], []
    for _ in range(7):  # alternate, so drift affects both alike
        default.append(measure_plan(graph, {}, cfg.math, host_fed, repeats=50))
        tuned.append(measure_plan(graph, best_plan, cfg.math, host_fed, repeats=50))
    tuned_ms, default_ms = float(np.median(tuned)), float(np.median(default))
    tb.scalar("final/tuned_ms", tuned_ms, cfg.live_trials)
    tb.scalar("final/default_ms", default_ms, cfg.live_trials)
    tb.close()
    stored = None
    if tuned_ms < default_ms:
        stored = plan_store.save(graph, cfg.math, best_plan, tuned_ms=tuned_ms, default_ms=default_ms,
                                 tuner=cfg.live_tuner, trials=measure.trials)
    out = {"mode": "live", "tuner": cfg.live_tuner, "trials": measure.trials, "seconds": round(time.time() - t0, 1),
           "tuned_ms": tuned_ms, "default_ms": default_ms, "gain_pct": 100 * (default_ms - tuned_ms) / default_ms,
           "tuned_samples": tuned, "default_samples": default, "plan_ops": len(best_plan), "stored": stored}
    log(json.dumps({"tuned_live": name, **out}))
    return out


def check_reuse(cfg: TuneConfig, spec: str) -> dict:
    """In a new process: does `cuda_backend.Executor` pick the stored plan up, and what
    do the stored plan and the default measure there (alternating, 7 each)?"""
    code = (
        "import json, sys, numpy as np, taso_env as te\n"
        "from taso_env.gpu import cuda_backend as cb\n"
        "g = te.graphs.load(sys.argv[1]); t, d = [], []\n"
        "for _ in range(7):\n"
        "    with cb.Executor(g, math=sys.argv[2], opaque='host') as ex:\n"
        "        plan = ex.plan; t.append(ex.measure().median_ms)\n"
        "    with cb.Executor(g, math=sys.argv[2], opaque='host', plan=None) as ex: d.append(ex.measure().median_ms)\n"
        "print(json.dumps({'plan_ops': len(plan), 'cudnn': cb.device_info()['cudnn'],"
        " 'auto_ms': float(np.median(t)), 'default_ms': float(np.median(d)),"
        " 'auto_samples': t, 'default_samples': d}))\n")
    res = subprocess.run([*child_python(), "-c", code, resolve_graph(spec), cfg.math], capture_output=True, text=True)
    if res.returncode != 0:
        raise TuningError(f"reuse check of {spec} failed: {res.stderr[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


# -- benchmark / experiment -------------------------------------------------------------
def _trials_to_target(curve: list[float], target: float) -> int | None:
    for i, c in enumerate(curve):
        if c <= target:
            return i + 1
    return None


def _run_one(cfg: TuneConfig, rec: TuningRecords, tuner_name: str, params: dict, seed: int, tag: str) -> dict:
    """One tuner run on replayed records. start "default": the default plan is the first
    trial (GA / GA-DQN: their first population is it and mutants of it)."""
    params = dict(params)
    default = rec.space.default_config()
    if cfg.start == "default" and tuner_name in ("ga", "gadqn"):
        params.setdefault("init", [default])
    tuner = make_tuner(tuner_name, rec.space, seed, **params)
    prefix: list[float] = []
    if cfg.start == "default" and tuner_name not in ("ga", "gadqn"):
        tuner.visited.add(default)
        tuner.update([default], [rec.replay(default)])
        prefix = [rec.replay(default)]
    tb = Scalars(os.path.join(cfg.out_dir, "tensorboard", tag))
    t0 = time.time()
    curve = prefix + run_tuner(tuner, lambda cs: [rec.replay(c) for c in cs], cfg.max_budget - len(prefix),
                               cfg.batch, on_batch=lambda n, b: tb.scalar("best_ms", b, n))
    curve = list(np.minimum.accumulate(curve)) if curve else curve
    tb.close()
    best_ms = rec.best_config()[1]
    target = best_ms * (1 + cfg.target_pct / 100)
    return {"curve": curve, "best_at": {str(b): curve[min(b, len(curve)) - 1] for b in cfg.budgets},
            "trials_to_target": _trials_to_target(curve, target), "seconds": round(time.time() - t0, 2)}


def _run_job(cfg: TuneConfig, spec: str, tuner_name: str, params: dict, seed: int, tag: str) -> dict:
    """_run_one in a worker process (loads the records itself)."""
    return _run_one(cfg, load_records(cfg, spec), tuner_name, params, seed, tag)


def benchmark(cfg: TuneConfig, log: Log = print, variants: dict[str, tuple[str, dict]] | None = None,
              mode: str = "benchmark") -> dict:
    from tqdm import tqdm

    os.makedirs(cfg.out_dir, exist_ok=True)
    results_path = os.path.join(cfg.out_dir, f"{mode}_results.jsonl")
    done = _jsonl_done(results_path)
    if variants is None:
        variants = {t: (t, cfg.tuner_params.get(t, {})) for t in cfg.tuners}
    specs = {graph_name(g): g for g in cfg.graphs}
    recs = {name: load_records(cfg, g) for name, g in specs.items()}
    jobs = [(f"{g}|{v}|{s}|{cfg.max_budget}|{cfg.batch}", g, v, s)
            for g, v, s in itertools.product(recs, variants, cfg.seeds)]
    todo = [job for job in jobs if job[0] not in done]
    bar = tqdm(total=len(jobs), initial=len(jobs) - len(todo), desc=mode, mininterval=2.0)

    def finish(key, g, v, s, result):
        row = {"key": key, "graph": g, "variant": v, "seed": s, **result}
        _append(results_path, row)  # only this process writes: a killed run resumes after its last row
        done[key] = row
        bar.update(1)

    if cfg.workers > 1 and len(todo) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        # spawned workers import what registered this process's learned tuners (GA-DQN)
        with ProcessPoolExecutor(cfg.workers, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=import_registering_modules, initargs=(registering_modules(),)) as pool:
            futures = {pool.submit(_run_job, cfg, specs[g], *variants[v], s, f"{mode}/{g}/{v}/seed{s}"):
                       (key, g, v, s) for key, g, v, s in todo}
            for fut in as_completed(futures):
                finish(*futures[fut], fut.result())
    else:
        for key, g, v, s in todo:
            finish(key, g, v, s, _run_one(cfg, recs[g], *variants[v], s, f"{mode}/{g}/{v}/seed{s}"))
    bar.close()
    summary = summarize(cfg, recs, variants, done)
    with open(os.path.join(cfg.out_dir, f"{mode}_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    table = markdown_table(cfg, summary)
    with open(os.path.join(cfg.out_dir, f"{mode}_table.md"), "w") as f:
        f.write(table + "\n")
    plot(cfg, summary, os.path.join(cfg.out_dir, f"{mode}_curves.png"))
    log(table)
    return summary


def summarize(cfg: TuneConfig, recs: dict[str, TuningRecords], variants: dict, done: dict) -> dict:
    out = {"target_pct": cfg.target_pct, "budgets": cfg.budgets, "seeds": cfg.seeds, "graphs": {}}
    for g, rec in recs.items():
        best_ms = rec.best_config()[1]
        gs = {"default_ms": rec.default_ms(), "best_recorded_ms": best_ms,
              "default_measured_ms": rec.default_measured_ms, "variants": {}}
        for v in variants:
            rows = [done[k] for k in done if done[k]["graph"] == g and done[k]["variant"] == v
                    and done[k]["seed"] in cfg.seeds]
            if not rows:
                continue
            curves = np.array([r["curve"] for r in rows if len(r["curve"]) == cfg.max_budget])
            ttt = [r["trials_to_target"] for r in rows]
            reached = [t for t in ttt if t is not None]
            gs["variants"][v] = {
                "best_at": {str(b): float(np.mean([r["best_at"][str(b)] for r in rows])) for b in cfg.budgets},
                "reached": f"{len(reached)}/{len(rows)}",
                "trials_to_target_median": float(np.median([t if t is not None else np.inf for t in ttt])),
                "mean_curve": curves.mean(axis=0).tolist() if len(curves) else []}
        out["graphs"][g] = gs
    return out


def markdown_table(cfg: TuneConfig, summary: dict) -> str:
    b = cfg.budgets
    lines = [f"| graph | tuner | {' | '.join(f'best @{x}' for x in b)} | reached {cfg.target_pct:g}% "
             f"| median trials to {cfg.target_pct:g}% |", "|---" * (len(b) + 4) + "|"]
    for g, gs in summary["graphs"].items():
        dflt = " | ".join(f"{gs['default_ms']:.4f}" for _ in b)
        best = " | ".join(f"{gs['best_recorded_ms']:.4f}" for _ in b)
        lines.append(f"| {g} | default plan | {dflt} | | |")
        lines.append(f"| {g} | best recorded | {best} | | |")
        for v, vs in gs["variants"].items():
            med = vs["trials_to_target_median"]
            cells = " | ".join(f"{vs['best_at'][str(x)]:.4f}" for x in b)
            trials = f">{cfg.max_budget}" if not np.isfinite(med) else str(int(med))
            lines.append(f"| {g} | {v} | {cells} | {vs['reached']} | {trials} |")
    return "\n".join(lines)


def plot(cfg: TuneConfig, summary: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(summary["graphs"])
    fig, axes = plt.subplots(1, len(graphs), figsize=(4.5 * len(graphs), 3.6), squeeze=False)
    for ax, g in zip(axes[0], graphs):
        gs = summary["graphs"][g]
        for v, vs in gs["variants"].items():
            if vs["mean_curve"]:
                ax.plot(np.arange(1, len(vs["mean_curve"]) + 1), vs["mean_curve"], label=v)
        ax.axhline(gs["default_ms"], color="k", ls="--", lw=0.8, label="default plan")
        ax.axhline(gs["best_recorded_ms"] * (1 + cfg.target_pct / 100), color="grey", ls=":", lw=0.8,
                   label=f"best +{cfg.target_pct:g}%")
        ax.set_xscale("log")
        ax.set_title(g)
        ax.set_xlabel("trials")
        ax.set_ylabel("best replayed ms (mean over seeds)")
        lo = gs["best_recorded_ms"]
        ends = [vs["mean_curve"][-1] for vs in gs["variants"].values() if vs["mean_curve"]]
        hi = max(ends + [gs["default_ms"]])
        ax.set_ylim(lo - 0.1 * (hi - lo) - 1e-4, hi + 0.6 * (hi - lo) + 1e-4)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def experiment(cfg: TuneConfig, log: Log = print) -> dict:
    tuner = cfg.experiment.get("tuner", "gadqn")
    base = cfg.tuner_params.get(tuner, {})
    variants = {name: (tuner, {**base, **params}) for name, params in cfg.experiment["variants"].items()}
    if "ga" in cfg.tuners:
        variants["ga_baseline"] = ("ga", cfg.tuner_params.get("ga", {}))
    return benchmark(cfg, log, variants, mode="experiment")
