"""The parts every training stage shares: a resumable session (Adam with a cosine-decayed
learning rate, a step counter, a CheckpointManager) and the one loop with every-N-steps
gates for logging, evaluation and saving.

    session = open_session(model, build_fn, run_dir, "vae", training, log=print)
    outcome = run_loop(session, training, next_batch, train_step, evaluate, desc="V",
                       rate_name="graphs_per_s", progress=False)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import sonnet as snt
import tensorflow as tf
from tqdm import tqdm

from worldmodel import checkpoints, summaries
from worldmodel.tf_utils import cosine_learning_rate, init_optimizer


@dataclasses.dataclass
class Session:
    """A stage's optimiser state: restored from the latest checkpoint when there is one.

    Attributes:
        optimizer: Adam over the model's trainable variables (slots already built).
        learning_rate: the variable the loop sets from the cosine schedule each step.
        step: optimiser steps taken (checkpointed).
        manager: the stage's CheckpointManager (runs/<name>/<stage>/).
        start: the step training (re)starts from.
    """

    optimizer: snt.Optimizer
    learning_rate: tf.Variable
    step: tf.Variable
    manager: tf.train.CheckpointManager
    start: int


def open_session(model: snt.Module, build: Callable, run_dir: str, stage: str, training, *,
                 log: Callable = print, **extra: tf.Variable) -> Session:
    """Builds the model's variables (`build(model)`) and the optimiser's, then restores
    the latest checkpoint of runs/<name>/<stage>/ if any. `extra` variables are
    checkpointed too."""
    learning_rate = tf.Variable(training.learning_rate, trainable=False, name="learning_rate")
    optimizer = snt.optimizers.Adam(learning_rate)
    build(model)
    init_optimizer(optimizer, model.trainable_variables)
    step = tf.Variable(0, dtype=tf.int64, name="step")
    ckpt = checkpoints.make_checkpoint(model, optimizer, step, **extra)
    manager = checkpoints.checkpoint_manager(ckpt, run_dir, stage)
    if manager.latest_checkpoint:
        checkpoints.restore_checked(ckpt, manager.latest_checkpoint).assert_existing_objects_matched()
        log(f"{stage}: resumed from {manager.latest_checkpoint} at step {int(step.numpy())}")
    return Session(optimizer, learning_rate, step, manager, int(step.numpy()))


def run_loop(session: Session, training, next_batch: Callable, train_step: Callable, evaluate: Callable, *,
             desc: str, rate_name: str, progress: bool) -> dict:
    """Trains from session.start to training.steps inside the default summary writer.

    Args:
        next_batch: () -> (train_step's arguments, items in the batch).
        train_step: (*arguments) -> dict of scalar losses with "total".
        evaluate: (step) -> held-out metrics dict (called every eval_every steps, at the
            last step, and once at session.start when no step is left to train).

    Returns:
        {"losses" (last logged), "history" ([step, total] as logged), "held_out" (last
        evaluation), rate_name (items per second of this call, None if none)}.
    """
    losses, held, history, items, tick = {}, {}, [], 0, time.perf_counter()
    bar = tqdm(total=training.steps, initial=session.start, desc=desc, unit="step", disable=not progress)
    with bar:
        for step in range(session.start + 1, training.steps + 1):
            args, count = next_batch()
            session.learning_rate.assign(cosine_learning_rate(step, training.steps, training.learning_rate))
            out = train_step(*args)
            session.step.assign(step)
            items += count
            bar.update(1)
            if step % training.log_every == 0 or step == training.steps:
                losses = {k: float(v) for k, v in out.items()}
                history.append([step, losses["total"]])
                summaries.write_scalars("loss", losses, step)
                summaries.write_scalars("perf", {"learning_rate": float(session.learning_rate.numpy()),
                                                 rate_name: items / (time.perf_counter() - tick)}, step)
                bar.set_postfix(loss=f"{losses['total']:.4g}")
            if step % training.eval_every == 0 or step == training.steps:
                held = evaluate(step)
            if step % training.save_every == 0 or step == training.steps:
                session.manager.save(checkpoint_number=step)
    seconds = time.perf_counter() - tick
    if session.start >= training.steps:  # nothing left to train: evaluate the restored model
        held = evaluate(session.start)
    return {"losses": losses, "history": history, "held_out": held, rate_name: items / seconds if items else None}
