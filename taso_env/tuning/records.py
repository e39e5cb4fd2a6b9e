"""Tuning records in HDF5 and their replay.

A record file holds, for one graph on one device in one math mode:
- the tuning space (JSON attribute `space`);
- every measured part: rows (task = knob index, option index, ms) in `records/` — each
  knob's own options measured exhaustively on the GPU;
- the untuned ops' measured times (`fixed/`), whose sum is `fixed_ms`;
- whole-graph measurements of sampled joint configs (`samples/`) and of the default
  plan (`default/`), for checking the replay;
- device, driver and library versions as attributes.

A joint config replays as `fixed_ms + sum of its active parts` (an epilogue op's launch
costs nothing while its convolution folds it), so every tuner is compared on the same
measured ground truth on any machine, without a GPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from taso_env.errors import TuningError
from taso_env.tuning.space import TuningSpace

FORMAT = 1


@dataclass
class Samples:
    """Whole-graph measurements of joint configs: configs (N, genes), measured ms, and a
    kind per sample ("uniform" random or "local" = a few genes changed from default)."""

    configs: np.ndarray
    measured_ms: np.ndarray
    kinds: list[str]


@dataclass
class TuningRecords:
    space: TuningSpace
    tasks: np.ndarray  # per record: knob index
    options: np.ndarray  # per record: option index
    ms: np.ndarray  # per record: measured ms
    fixed_ops: list[tuple[int, str, float]] = field(default_factory=list)  # (op id, op type, ms)
    meta: dict = field(default_factory=dict)
    samples: Samples | None = None
    default_measured_ms: float = float("nan")

    def __post_init__(self) -> None:
        self.tasks = np.asarray(self.tasks, dtype=np.int32)
        self.options = np.asarray(self.options, dtype=np.int32)
        self.ms = np.asarray(self.ms, dtype=np.float64)
        card = self.space.cardinalities
        table = [np.full(c, np.nan) for c in card]
        for t, o, m in zip(self.tasks, self.options, self.ms):
            if not (0 <= t < len(card) and 0 <= o < card[t]):
                raise TuningError(f"record (task {t}, option {o}) outside the space of {self.space.graph!r}")
            table[t][o] = m if np.isnan(table[t][o]) else min(table[t][o], m)
        for i, row in enumerate(table):
            if np.isnan(row).any():
                raise TuningError(f"knob {i} ({self.space.knobs[i].name}) has unmeasured options "
                                  f"{np.flatnonzero(np.isnan(row)).tolist()}")
        self.table = table
        self._absorbed = np.array([k.absorbed_by for k in self.space.knobs])
        self._fuse = [np.array([k.option(j).get("fuse", -1) == 1 for j in range(k.size)]) for k in self.space.knobs]

    @property
    def fixed_ms(self) -> float:
        return float(sum(m for _, _, m in self.fixed_ops))

    @property
    def graph(self) -> str:
        return self.space.graph

    # -- replay ----------------------------------------------------------------------
    def replay(self, config: Sequence[int]) -> float:
        """Replayed time (ms) of a joint config: fixed ops + its active measured parts."""
        cfg = self.space.validate(config)
        total = self.fixed_ms
        for i, g in enumerate(cfg):
            a = self._absorbed[i]
            if a >= 0 and self._fuse[a][cfg[a]]:
                continue
            total += self.table[i][g]
        return float(total)

    def replay_many(self, configs: np.ndarray) -> np.ndarray:
        return np.array([self.replay(c) for c in np.asarray(configs)])

    def best_config(self) -> tuple[tuple[int, ...], float]:
        """The best joint config by replay (exact: per conv knob the cheapest of its fused
        options vs its unfused options plus its epilogue ops' cheapest launches)."""
        cfg = list(self.space.default_config())
        absorbed_into: dict[int, list[int]] = {}
        for i, a in enumerate(self._absorbed):
            if a >= 0:
                absorbed_into.setdefault(int(a), []).append(i)
        for i, row in enumerate(self.table):
            if self._absorbed[i] < 0:
                cfg[i] = int(np.argmin(row))
        for c, deps in absorbed_into.items():
            for i in deps:
                cfg[i] = int(np.argmin(self.table[i]))
            extra = sum(float(np.min(self.table[i])) for i in deps)
            fuse = self._fuse[c]
            cost = self.table[c] + np.where(fuse, 0.0, extra)
            cfg[c] = int(np.argmin(cost))
        best = tuple(cfg)
        return best, self.replay(best)

    def default_ms(self) -> float:
        return self.replay(self.space.default_config())

    # -- HDF5 ------------------------------------------------------------------------
    def save(self, path: str) -> None:
        import h5py

        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = path + ".tmp"
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["space"] = self.space.to_json()
            f.attrs["meta"] = json.dumps(self.meta)
            f.attrs["default_measured_ms"] = self.default_measured_ms
            r = f.create_group("records")
            r.create_dataset("task", data=self.tasks, compression="gzip")
            r.create_dataset("option", data=self.options, compression="gzip")
            r.create_dataset("ms", data=self.ms, compression="gzip")
            fx = f.create_group("fixed")
            fx.create_dataset("op_id", data=np.array([o for o, _, _ in self.fixed_ops], dtype=np.int32))
            fx.create_dataset("ms", data=np.array([m for _, _, m in self.fixed_ops], dtype=np.float64))
            fx.attrs["op_types"] = json.dumps([t for _, t, _ in self.fixed_ops])
            if self.samples is not None:
                s = f.create_group("samples")
                s.create_dataset("configs", data=np.asarray(self.samples.configs, dtype=np.int16), compression="gzip")
                s.create_dataset("measured_ms", data=np.asarray(self.samples.measured_ms, dtype=np.float64))
                s.attrs["kinds"] = json.dumps(self.samples.kinds)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str) -> TuningRecords:
        import h5py

        if not os.path.exists(path):
            raise TuningError(f"no tuning records at {path}")
        try:
            with h5py.File(path, "r") as f:
                if int(f.attrs.get("format", -1)) != FORMAT:
                    raise TuningError(f"{path}: record format {f.attrs.get('format')} (expected {FORMAT})")
                space = TuningSpace.from_json(f.attrs["space"])
                fixed = list(zip(f["fixed/op_id"][()].tolist(), json.loads(f["fixed"].attrs["op_types"]),
                                 f["fixed/ms"][()].tolist()))
                samples = None
                if "samples" in f:
                    samples = Samples(f["samples/configs"][()].astype(np.int64), f["samples/measured_ms"][()],
                                      json.loads(f["samples"].attrs["kinds"]))
                return cls(space, f["records/task"][()], f["records/option"][()], f["records/ms"][()], fixed,
                           json.loads(f.attrs["meta"]), samples, float(f.attrs["default_measured_ms"]))
        except (OSError, KeyError) as err:
            raise TuningError(f"{path}: not a tuning record file ({err})") from err


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties)."""
    def ranks(x):
        x = np.asarray(x, dtype=np.float64)
        r = np.empty(len(x))
        r[np.argsort(x, kind="mergesort")] = np.arange(len(x))
        _, inv, counts = np.unique(x, return_inverse=True, return_counts=True)
        return (np.bincount(inv, weights=r) / counts)[inv]

    ra, rb = ranks(a), ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def replay_check(rec: TuningRecords) -> dict:
    """How well the replayed sum ranks the sampled configs against their whole-graph
    measurement: Spearman overall and per sample kind, and the mean ratio."""
    if rec.samples is None or len(rec.samples.measured_ms) < 3:
        raise TuningError(f"records of {rec.graph!r} hold no whole-graph samples")
    rep = rec.replay_many(rec.samples.configs)
    meas = np.asarray(rec.samples.measured_ms)
    out = {"n": int(len(meas)), "spearman": spearman(rep, meas), "replay_over_measured": float(np.mean(rep / meas))}
    kinds = np.array(rec.samples.kinds)
    for kind in sorted(set(rec.samples.kinds)):
        m = kinds == kind
        if m.sum() >= 3:
            out[f"spearman_{kind}"] = spearman(rep[m], meas[m])
            out[f"n_{kind}"] = int(m.sum())
    return out
