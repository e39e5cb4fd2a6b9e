"""Evaluation on Ray: every (graph, agent) pair is one Ray task (`rlflow evaluate --ray`).

    rows = evaluate_on_ray(config, run_dir, out_dir, address="local")

A task runs the local evaluation (controller.evaluation.evaluate) on its one graph and
one agent in a private temporary folder and returns its row and the ONNX files of its
graphs as bytes; it writes nothing shared. The driver (this process) writes every ONNX
file atomically under out_dir/graphs/, orders the rows as the local evaluation does
(graphs, then agents, in the config's order) and writes the same outputs
(controller.eval_report.write_outputs). Only the timings (optimisation_s, model_load_s)
differ from a local run; costs, speedups, steps and the ONNX files are equal. A
greedy_random_detours job whose graph has a controller job starts when that job is done,
capped by its steps (as the local evaluation caps it).

A worker that dies has its job re-run (TASK_RETRIES); a job that raises (an optimised
graph that does not match its original in onnxruntime, a missing checkpoint) stops the
evaluation with that error. The learned agents (the controller rows, model_free) read the run
folder on the worker: on a cluster of several machines the run folder must be at the
same path on every node (a shared filesystem), and every node needs rlflow installed.
Workers import the rlflow the driver imports, also where the driver runs in a source
checkout, and a job runs in the driver's working folder, so that relative graph and
cost-table paths mean what they mean to the driver (taso_env.ray_cluster).
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

from taso_env.errors import TasoEnvError

TASK_RETRIES = 3


class RayEvaluationError(TasoEnvError, RuntimeError):
    """A (graph, agent) job failed on a Ray worker; the message carries its traceback."""


def rlflow_evaluate_job(config, run_dir: str | None, spec: str, agent: str, driver_folder: str | None = None,
                        matched_steps: int | None = None) -> tuple[list, dict[str, bytes]]:
    """The Ray task: evaluates `agent` on graph `spec` in a temporary folder, working in
    `driver_folder` (the driver's working folder); returns its rows and {file name:
    bytes} of the graphs/ folder it wrote. `matched_steps`: the controller's steps on
    the graph, greedy_random_detours' cap.

    The job's own summaries are thrown away, so a job whose agent needs no TensorFlow
    (the search baselines, random) keeps TensorFlow out of the worker: the evaluation
    then skips its TensorBoard summary, as it does wherever TensorFlow is absent."""
    from controller.evaluation import LEARNED, evaluate
    from taso_env.ray_cluster import working_folder

    job = replace(config, graphs=(spec,), agents=(agent,))
    block_tf = agent not in LEARNED and "tensorflow" not in sys.modules
    if block_tf:
        sys.modules["tensorflow"] = None  # `import tensorflow` raises ImportError
    try:
        with working_folder(driver_folder), tempfile.TemporaryDirectory(prefix="rlflow_eval_") as tmp:
            rows = evaluate(job, run_dir, tmp, None if matched_steps is None else {spec: matched_steps})
            folder = Path(tmp) / "graphs"
            files = {p.name: p.read_bytes() for p in sorted(folder.glob("*.onnx"))}
    finally:
        if block_tf:
            del sys.modules["tensorflow"]
    return rows, files


def evaluate_on_ray(config, run_dir: str | Path | None, out_dir: str | Path, address: str,
                    progress: bool | None = None) -> list:
    """Evaluates every agent on every graph as Ray tasks on the cluster `address`
    (taso_env.ray_cluster: "local" is a private loopback-only Ray); writes the outputs
    of controller.evaluation.evaluate to `out_dir` and returns the rows.

    Raises:
        RayUnavailableError / RayClusterError: Ray is missing or its cluster cannot be
            started or reached.
        RayEvaluationError: a job failed (its traceback in the message).
    """
    from tqdm import tqdm

    from controller.eval_report import write_outputs
    from controller.evaluation import AGENTS, LEARNED, MATCHED_TO, WORK_MATCHED
    from controller.learned_agents import curves
    from taso_env.ray_cluster import import_ray, ray_cluster

    out_dir = Path(out_dir)
    (out_dir / "graphs").mkdir(parents=True, exist_ok=True)
    for agent in LEARNED:
        if agent in config.agents and run_dir is None:
            raise ValueError(f"the {agent} agent needs --run (a trained run folder)")
    jobs = [(spec, agent) for spec in config.graphs for agent in config.agents]
    waits = WORK_MATCHED in config.agents and MATCHED_TO in config.agents  # for the controller's steps
    run = str(Path(run_dir).resolve()) if run_dir else None
    results: dict[tuple[str, str], list] = {}
    with ray_cluster(address) as _:
        ray = import_ray()
        task = ray.remote(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False)(rlflow_evaluate_job)
        config_ref = ray.put(config)
        folder = os.getcwd()

        def submit(spec, agent, matched=None):
            return task.remote(config_ref, run, spec, agent, folder, matched)

        pending = {submit(spec, agent): (spec, agent) for spec, agent in jobs if not (waits and agent == WORK_MATCHED)}
        bar = tqdm(total=len(jobs), unit="job", disable=not (sys.stderr.isatty() if progress is None else progress))
        try:
            with bar:
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                    for ref in ready:
                        job = pending.pop(ref)
                        rows, files = _fetch(ray, ref, job)
                        for name, data in files.items():
                            _write_atomic(out_dir / "graphs" / name, data)
                        results[job] = rows
                        if waits and job[1] == MATCHED_TO:
                            pending[submit(job[0], WORK_MATCHED, rows[0].steps)] = (job[0], WORK_MATCHED)
                        bar.update(1)
        finally:
            for ref in pending:
                ray.cancel(ref)
    rows = [row for job in jobs for row in results[job]]
    # the outputs evaluate() writes, from all the rows (its last line)
    write_outputs(rows, out_dir, AGENTS, curves(Path(run_dir) if run_dir else None, rows, config.agents))
    return rows


def _fetch(ray, ref, job: tuple[str, str]):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as err:
        raise RayEvaluationError(f"{job[1]} on {job[0]} failed on a Ray worker:\n{err}") from None
    except ray.exceptions.RayError as err:
        raise RayEvaluationError(f"{job[1]} on {job[0]} was lost {TASK_RETRIES + 1} times: {err}") from None


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
