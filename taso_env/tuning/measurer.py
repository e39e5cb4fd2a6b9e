"""Measuring tuning spaces on the GPU (no TensorFlow): `record_graph` builds a graph's
space and measures every knob's options exhaustively, the untuned ops, the default plan
and sampled joint configs; `LiveMeasurer` measures configs whole-graph for live tuning.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from taso_env.gpu import cuda_backend as cb
from taso_env.tuning.records import Samples, TuningRecords
from taso_env.tuning.space import (
    CONV_KEYS,
    DEFAULT_LAUNCH,
    LAUNCH_CHOICES,
    LAUNCH_OP_TYPES,
    Knob,
    TuningSpace,
    make_option,
)

_VIEWS = frozenset({"Reshape", "Flatten", "Identity"})
_SOURCES = frozenset({"Input", "Weight"})


def _needed(graph, host_fed: Sequence[int]) -> set[int]:
    """Ops the outputs need; a host-fed op's inputs are not computed (executor.cc)."""
    fed = set(host_fed)
    seen, stack = set(), [r.op for r in graph.outputs]
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            if i not in fed:
                stack.extend(r.op for r in graph.ops[i].inputs)
    return seen


def _constant(graph) -> list[bool]:
    const = [False] * len(graph.ops)
    for op in graph.ops:  # ops are in topological order
        if op.type in ("Weight", "Constant"):
            const[op.id] = True
        elif op.type not in ("Input", "Opaque") and op.inputs:
            const[op.id] = all(const[r.op] for r in op.inputs)
    return const


def host_fed_ops(graph, opaque: str = "host") -> list[int]:
    return cb._opaque_ops(graph) if opaque == "host" else []


def measure_plan(graph, plan: dict, math: str, host_fed: Sequence[int] = (), warmup: int = 5,
                 repeats: int = 20) -> float:
    """Whole-graph median ms of `graph` run with `plan` (CUDA-graph replay; device-side
    random data, no weight upload)."""
    ex = cb.require().GpuExecutor(graph.core, math, list(host_fed), 0, plan)
    try:
        return float(ex.measure(warmup, repeats, 0)["median_ms"])
    finally:
        ex.close()


def _progress(it, desc: str, enabled: bool):
    if not enabled:
        return it
    from tqdm import tqdm

    return tqdm(it, desc=desc, mininterval=2.0)


def record_graph(graph, name: str, math: str = "tf32", *, opaque: str = "host", samples_uniform: int = 30,
                 samples_local: int = 30, seed: int = 0, progress: bool = True,
                 log: Callable[[str], None] = print) -> TuningRecords:
    """Builds and measures the tuning space of `graph` (see the module docstring)."""
    t0 = time.time()
    host_fed = host_fed_ops(graph, opaque)
    needed, const = _needed(graph, host_fed), _constant(graph)
    sites = {s["conv"]: s for s in cb.fusion_sites(graph, host_fed)}
    absorbed_conv = {}
    for s in sites.values():
        absorbed_conv[s["last"]] = s["conv"]
        if s["mid"] >= 0:
            absorbed_conv[s["mid"]] = s["conv"]
    knobs: list[Knob] = []
    rows: list[tuple[int, int, float]] = []
    fixed: list[tuple[int, str, float]] = []
    conv_knob: dict[int, int] = {}
    conv_cache: dict[tuple, list[dict]] = {}
    ex = cb.require().GpuExecutor(graph.core, math, host_fed, 0, {})
    defaults = ex.conv_choices()
    ex.close()
    unmatched = 0

    def cands(op, fused: bool) -> list[dict]:
        s = sites.get(op.id)
        key = (tuple(graph.tensor(r).shape for r in op.inputs), repr(sorted(op.attrs.items())), fused,
               (s["residual"], s["activation"]) if fused and s else None)
        if key not in conv_cache:
            conv_cache[key] = cb.conv_choice_space(graph, op.id, fused, host_fed, math)
        return conv_cache[key]

    ops = [op for op in graph.ops if op.id in needed and not const[op.id] and op.type not in _SOURCES
           and op.type not in _VIEWS and op.id not in host_fed]
    for op in _progress(ops, f"record {name}", progress):
        if op.type == "Conv2D":
            options, times = [], []
            variants = [(1, True), (0, False)] if op.id in sites else [(-1, False)]
            for fuse, fused in variants:
                for c in cands(op, fused):
                    options.append(make_option(fuse=fuse, conv_algo=c["conv_algo"], conv_math=c["conv_math"],
                                               conv_fused_call=c["conv_fused_call"]))
                    times.append(c["ms"])
            d = defaults.get(op.id, {})
            want = {k: d.get(k, -2) for k in CONV_KEYS}
            if op.id not in sites:
                want["fuse"] = -1
            default = next((j for j, o in enumerate(options) if dict(o) == want), None)
            if default is None:  # the executor's cached pick was not among this search's candidates
                unmatched += 1
                default = int(np.argmin(times))
            conv_knob[op.id] = len(knobs)
            for j, t in enumerate(times):
                rows.append((len(knobs), j, float(t)))
            knobs.append(Knob("conv", op.id, f"conv:{op.name}", tuple(options), default))
        elif op.type in LAUNCH_OP_TYPES:
            idx = len(knobs)
            for j, (t, i) in enumerate(LAUNCH_CHOICES):
                rows.append((idx, j, cb.measure_op_launch(graph, op.id, t, i, math)))
            absorbed = conv_knob.get(absorbed_conv.get(op.id, -1), -1)
            knobs.append(Knob("launch", op.id, f"launch:{op.name}",
                              tuple(make_option(threads=t, items_per_thread=i) for t, i in LAUNCH_CHOICES),
                              LAUNCH_CHOICES.index(DEFAULT_LAUNCH), absorbed))
        else:
            fixed.append((op.id, op.type, float(cb.measure_op(graph, op.id, math))))
    space = TuningSpace(name, math, knobs)
    info = cb.device_info()
    meta = {"graph": name, "device": info["name"], "cuda_runtime": info["cuda_runtime"],
            "cuda_driver": info["cuda_driver"], "cudnn": info["cudnn"], "cublas": info["cublas"],
            "compute_capability": info["compute_capability"], "math": math,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "default_unmatched": unmatched,
            "host_fed_ops": len(host_fed), "launch_choices": [list(c) for c in LAUNCH_CHOICES]}
    try:
        from taso_env.gpu.plan_store import graph_key

        meta["graph_key"] = graph_key(graph)
    except Exception:  # noqa: BLE001 - the key is informative only
        pass
    default_ms = measure_plan(graph, {}, math, host_fed, repeats=50)
    rec = TuningRecords(space, [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows], fixed, meta,
                        None, default_ms)
    log(f"{name}: {len(knobs)} knobs (log10 size {space.log10_size():.1f}), {len(rows)} part records, "
        f"{len(fixed)} fixed ops {rec.fixed_ms:.3f} ms, default measured {default_ms:.3f} ms, "
        f"replayed {rec.default_ms():.3f} ms, best replayed {rec.best_config()[1]:.3f} ms "
        f"({time.time() - t0:.0f} s)")
    rec.samples = sample_configs(graph, rec, math, host_fed, samples_uniform, samples_local, seed, progress)
    rec.meta["record_seconds"] = round(time.time() - t0, 1)
    return rec


def sample_configs(graph, rec: TuningRecords, math: str, host_fed: Sequence[int], n_uniform: int, n_local: int,
                   seed: int = 0, progress: bool = True) -> Samples:
    """Whole-graph measurements of random joint configs: `n_uniform` uniform, `n_local`
    with a few genes changed from the default (the region tuners search)."""
    rng = np.random.default_rng(seed)
    space = rec.space
    configs, kinds = [], []
    for _ in range(n_uniform):
        configs.append(space.random_config(rng))
        kinds.append("uniform")
    default = np.array(space.default_config())
    for _ in range(n_local):
        c = default.copy()
        k = int(rng.integers(1, max(2, len(space) // 8) + 1))
        for i in rng.choice(len(space), size=min(k, len(space)), replace=False):
            c[i] = rng.integers(space.knobs[i].size)
        configs.append(tuple(int(x) for x in c))
        kinds.append("local")
    measured, kept, kept_kinds = [], [], []
    for c, kind in zip(_progress(configs, f"samples {space.graph}", progress), kinds):
        try:
            measured.append(measure_plan(graph, space.to_plan(c), math, host_fed))
        except cb.CudaBackendError:
            continue
        kept.append(c)
        kept_kinds.append(kind)
    return Samples(np.array(kept, dtype=np.int64), np.array(measured), kept_kinds)


class LiveMeasurer:
    """Measures configs of `space` on the GPU, whole graph (ms; inf for a config the GPU
    refused). Counts trials."""

    def __init__(self, graph, space: TuningSpace, math: str, host_fed: Sequence[int] = (), repeats: int = 20):
        self.graph, self.space, self.math, self.host_fed, self.repeats = graph, space, math, list(host_fed), repeats
        self.trials = 0

    def __call__(self, configs: Sequence[Sequence[int]]) -> list[float]:
        out = []
        for c in configs:
            self.trials += 1
            try:
                out.append(measure_plan(self.graph, self.space.to_plan(c), self.math, self.host_fed,
                                        repeats=self.repeats))
            except cb.CudaBackendError:
                out.append(float("inf"))
        return out
