"""TensorBoard helpers shared by the training stages: namespaced scalars, the
hyper-parameter table, and predicted-vs-true scatter plots rendered with numpy (no
plotting dependency)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import numpy as np
import tensorflow as tf

_BACKGROUND, _AXES, _DIAGONAL, _POINT = (255, 255, 255), (0, 0, 0), (190, 190, 190), (31, 119, 180)


def write_scalars(prefix: str, values: Mapping[str, float], step: int) -> None:
    """`prefix/name` scalars into the default summary writer."""
    for name, value in values.items():
        if value is not None and np.isfinite(value):
            tf.summary.scalar(f"{prefix}/{name}", float(value), step=step)


def hparams_markdown(**configs) -> str:
    """Frozen dataclass configs as one markdown table (section | field | value)."""
    rows = ["| section | field | value |", "|---|---|---|"]
    for section, cfg in configs.items():
        for name, value in dataclasses.asdict(cfg).items():
            rows.append(f"| {section} | {name} | {json.dumps(value, default=str)} |")
    return "\n".join(rows)


def scatter_image(x: np.ndarray, y: np.ndarray, size: int = 256, margin: int = 12) -> np.ndarray:
    """A square scatter plot of y against x with the diagonal y = x, as uint8 [size, size, 3].

    Both axes span the same range (the min/max of x and y together), so points on the
    grey diagonal are perfect predictions.

    Raises:
        ValueError: x and y differ in length.
    """
    x, y = np.asarray(x, np.float64).ravel(), np.asarray(y, np.float64).ravel()
    if x.shape != y.shape:
        raise ValueError(f"x has {x.size} values, y has {y.size}")
    image = np.empty((size, size, 3), np.uint8)
    image[:] = _BACKGROUND
    inner = size - 2 * margin
    finite = np.isfinite(x) & np.isfinite(y)
    x, y = x[finite], y[finite]
    lo, hi = (float(min(x.min(), y.min())), float(max(x.max(), y.max()))) if x.size else (0.0, 1.0)
    span = hi - lo if hi > lo else 1.0

    def pixel(v: np.ndarray) -> np.ndarray:
        return np.clip(np.round((v - lo) / span * (inner - 1)).astype(np.int64), 0, inner - 1)

    diag = np.arange(inner)
    image[margin + inner - 1 - diag, margin + diag] = _DIAGONAL
    image[margin:margin + inner, margin - 1] = _AXES
    image[margin + inner, margin - 1:margin + inner] = _AXES
    px, py = pixel(x), pixel(y)
    for dy in (-1, 0, 1):  # 3x3 dots
        for dx in (-1, 0, 1):
            rows = np.clip(margin + inner - 1 - py + dy, 0, size - 1)
            cols = np.clip(margin + px + dx, 0, size - 1)
            image[rows, cols] = _POINT
    return image


def write_scatter(name: str, predicted: np.ndarray, true: np.ndarray, step: int, max_points: int = 4000) -> None:
    """A predicted (y) vs true (x) scatter image summary; the value range goes into the
    description because the image carries no text."""
    predicted, true = np.asarray(predicted).ravel(), np.asarray(true).ravel()
    if predicted.size > max_points:
        keep = np.random.default_rng(0).choice(predicted.size, max_points, replace=False)
        predicted, true = predicted[keep], true[keep]
    both = np.concatenate([predicted, true]) if predicted.size else np.zeros(1)
    tf.summary.image(name, scatter_image(true, predicted)[None], step=step,
                     description=f"x: true, y: predicted, both axes [{both.min():.4g}, {both.max():.4g}]; "
                                 "grey: y = x")
