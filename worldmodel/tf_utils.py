"""tf.function and optimizer plumbing shared by the training stages."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import sonnet as snt
import tensorflow as tf


class TracedFunction:
    """A tf.function with a fixed input signature that counts its traces.

    `traces` grows each time TensorFlow traces the Python function (a new concrete
    graph); with a signature of None dimensions it stays at 1 whatever the batch size.
    AutoGraph is off: the wrapped code has no data-dependent Python control flow, and
    converting graph_nets and Sonnet costs seconds per trace.
    """

    def __init__(self, fn: Callable, input_signature: Sequence):
        self.traces = 0

        def counted(*args):
            self.traces += 1
            return fn(*args)

        self._function = tf.function(counted, input_signature=list(input_signature), autograph=False)

    def __call__(self, *args):
        return self._function(*args)


def init_optimizer(optimizer: snt.Optimizer, variables: Sequence[tf.Variable]) -> None:
    """Creates the optimizer's slots eagerly (a zero update), so that a checkpoint
    restores them at once and the train step traces once, not twice."""
    optimizer.apply([tf.zeros_like(v) for v in variables], variables)


def train_step_fn(loss_fn: Callable, variables_fn: Callable, optimizer: snt.Optimizer,
                  max_grad_norm: float) -> Callable:
    """`step(*inputs) -> losses` minimising losses["total"] with clipped gradients."""

    def step(*inputs):
        variables = variables_fn()
        with tf.GradientTape() as tape:
            losses = loss_fn(*inputs)
        grads = tape.gradient(losses["total"], variables)
        grads, norm = tf.clip_by_global_norm(grads, max_grad_norm)
        optimizer.apply(grads, variables)
        return {**losses, "grad_norm": norm}

    return step


def cosine_learning_rate(step: int, total_steps: int, base: float, final_fraction: float = 0.05) -> float:
    """Cosine decay from `base` at step 0 to `base * final_fraction` at `total_steps`
    (late steps small enough that output biases stop wandering)."""
    progress = min(max(step / max(total_steps, 1), 0.0), 1.0)
    return base * (final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress)))
