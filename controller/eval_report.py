"""Outputs of the evaluation (controller.evaluation): markdown/JSON/CSV tables, each
agent against greedy where greedy ran (vs_greedy.md / .json, controller.versus_greedy), plots
(estimated runtime, speedup per agent, optimisation time, quality vs real environment
steps) and TensorBoard summaries."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict
from pathlib import Path

import numpy as np

from controller import versus_greedy
from taso_env.engine import real_work

LEDGER_COLUMNS = real_work.LEDGER  # env_steps, enumerations, successor_lookups, cost_queries
TRAINING_COLUMNS = tuple(f"training_{c}" for c in LEDGER_COLUMNS)  # the real work behind the training data
COLUMNS = ("graph", "split", "agent", "initial_cost_ms", "final_cost_ms", "speedup", "optimisation_s",
           "model_load_s", "steps", "best_step", *LEDGER_COLUMNS, *TRAINING_COLUMNS, "measured_original_ms",
           "measured_optimised_ms", "measured_speedup")
LEDGER_TABLE = ("graph", "split", "agent", "speedup", "steps", *LEDGER_COLUMNS, *TRAINING_COLUMNS)
"""The columns of `ledger_markdown`: each agent's quality beside the real work it took."""


def markdown(rows, columns: tuple[str, ...] = COLUMNS) -> str:
    """`rows` (Rows, or their dicts as results.json holds them) as a markdown table of
    `columns`."""
    def fmt(v):
        if v is None:
            return "–"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    def value(row, column):
        return row.get(column) if isinstance(row, dict) else getattr(row, column)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(value(r, c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


def ledger_markdown(rows) -> str:
    """Speedup and the real-work ledger per graph and agent (the pipeline prints it)."""
    return markdown(rows, LEDGER_TABLE)


def write_outputs(rows, out_dir: Path, agents: tuple[str, ...], curves: dict[str, list[dict]]) -> None:
    (out_dir / "results.md").write_text(markdown(rows) + "\n")
    if any(r.agent == "greedy" for r in rows):  # each agent against greedy (controller.versus_greedy)
        against = versus_greedy.summary(rows)
        (out_dir / "vs_greedy.md").write_text(versus_greedy.markdown(against) + "\n")
        (out_dir / "vs_greedy.json").write_text(json.dumps(against, indent=2))
    (out_dir / "results.json").write_text(json.dumps([asdict(r) for r in rows], indent=2))
    (out_dir / "learning_curves.json").write_text(json.dumps(curves, indent=2))
    with open(out_dir / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(asdict(r))
    _plots(rows, out_dir, agents)
    _curve_plot(curves, out_dir)
    _tensorboard(rows, curves, out_dir / "tb")


PLOTS = ("runtime.png", "speedup.png", "optimisation_time.png", "quality_vs_real_steps.png")


def _plots(rows, out_dir: Path, order: tuple[str, ...]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    graphs = list(dict.fromkeys(r.graph for r in rows))
    agents = [a for a in order if any(r.agent == a for r in rows)]
    width = 0.8 / max(len(agents), 1)
    x = np.arange(len(graphs))
    labels = [g + ("*" if any(r.graph == g and r.split == "held-out" for r in rows) else "") for g in graphs]
    for metric, fname, ylabel, log in (("final_cost_ms", "runtime.png", "estimated runtime (ms)", False),
                                       ("speedup", "speedup.png", "estimated speedup (x)", False),
                                       ("optimisation_s", "optimisation_time.png", "optimisation time (s)", True)):
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(graphs)), 4))
        for k, agent in enumerate(agents):
            vals = [next((getattr(r, metric) for r in rows if r.graph == g and r.agent == agent), np.nan)
                    for g in graphs]
            ax.bar(x + k * width, vals, width, label=agent)
        if metric == "final_cost_ms":
            base = [next(r.initial_cost_ms for r in rows if r.graph == g) for g in graphs]
            ax.scatter(x + 0.4 - width / 2, base, marker="_", s=400, color="black", label="original")
        if metric == "speedup":
            ax.axhline(1.0, color="black", lw=0.8)
            ax.set_ylim(bottom=0.9)
        ax.set_xticks(x + 0.4 - width / 2, labels, rotation=20)
        ax.set_ylabel(ylabel)
        ax.set_title("* held-out family" if "*" in "".join(labels) else "")
        if log:
            ax.set_yscale("log")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=110)
        plt.close(fig)


def _curve_plot(curves: dict[str, list[dict]], out_dir: Path) -> None:
    """Mean estimated speedup on the training graphs against real env steps used."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for agent, points in curves.items():
        if points:
            ax.plot([p["real_env_steps"] for p in points], [p["mean_speedup"] for p in points], "o-", label=agent)
    ax.set_xscale("symlog")
    ax.set_xlabel("real environment steps used in training")
    ax.set_ylabel("mean estimated speedup (training graphs)")
    if ax.get_legend_handles_labels()[0]:  # no learned agent evaluated: an empty plot, no legend
        ax.legend(fontsize=8)
    else:
        ax.set_title("no learned agent evaluated", fontsize=9)
    fig.tight_layout()
    fig.savefig(out_dir / "quality_vs_real_steps.png", dpi=110)
    plt.close(fig)


def _tensorboard(rows, curves, tb_dir: Path) -> None:
    try:
        import tensorflow as tf
    except ImportError:  # evaluation also runs where TensorFlow is absent (the GPU machine)
        return
    writer = tf.summary.create_file_writer(str(tb_dir))
    with writer.as_default():
        for r in rows:
            tf.summary.scalar(f"eval/speedup/{r.graph}/{r.agent}", r.speedup, step=0)
            tf.summary.scalar(f"eval/optimisation_s/{r.graph}/{r.agent}", r.optimisation_s, step=0)
        for agent, points in curves.items():
            for p in points:
                tf.summary.scalar(f"learning_curve/{agent}", p["mean_speedup"], step=int(p["real_env_steps"]))
        tf.summary.text("eval/results", markdown(rows), step=0)
        for name in PLOTS:
            png = (tb_dir.parent / name).read_bytes()
            tf.summary.image(f"eval/{name[:-4]}", tf.image.decode_png(png)[None], step=0)
    writer.flush()
