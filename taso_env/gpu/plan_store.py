"""Tuned plans kept between processes: one JSON file beside the convolution algorithm
cache (`~/.cache/rlflow/tuned_plans.json`, or the file RLFLOW_TUNED_PLANS names; an
empty value turns it off), keyed by graph key, device, library versions and math mode.

`cuda_backend.Executor(plan="auto")` (the default) runs the stored plan of its graph.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from taso_env.engine.graph import Graph

ENV = "RLFLOW_TUNED_PLANS"


def default_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".cache", "rlflow", "tuned_plans.json")


def path() -> str | None:
    """The store's file (None when RLFLOW_TUNED_PLANS is set empty)."""
    p = os.environ.get(ENV)
    if p is None:
        return default_path()
    return p or None


def graph_key(graph: Graph) -> str:
    """Structural hash plus a digest of the op order and names: plans name op ids, so a
    plan applies only to the same graph in the same op order."""
    h = hashlib.sha1()
    for op in graph.ops:
        h.update(f"{op.type}|{op.name}|{[tuple(r) for r in op.inputs]};".encode())
    return f"{graph.hash() & ((1 << 64) - 1):016x}-{h.hexdigest()[:16]}"


def device_key() -> str:
    from taso_env.gpu import cuda_backend

    d = cuda_backend.device_info()
    return f"{d['name']}|cuda{d['cuda_runtime']}|cudnn{d['cudnn']}|cublas{d['cublas']}"


def store_key(graph: Graph, math: str, device: str | None = None) -> str:
    return f"{graph_key(graph)}|{device or device_key()}|{math}"


def _read(p: str) -> dict:
    try:
        with open(p) as f:
            data = json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def lookup(graph: Graph, math: str, device: str | None = None) -> dict[int, dict[str, int]] | None:
    """The stored plan for `graph` on this device in `math` mode, or None."""
    p = path()
    if not p:
        return None
    entry = _read(p).get(store_key(graph, math, device))
    if not entry:
        return None
    return {int(k): dict(v) for k, v in entry["plan"].items()}


def entry(graph: Graph, math: str, device: str | None = None) -> dict | None:
    """The whole stored entry (plan, measured times, tuner) or None."""
    p = path()
    return _read(p).get(store_key(graph, math, device)) if p else None


def save(graph: Graph, math: str, plan: dict[int, dict[str, int]], *, tuned_ms: float, default_ms: float,
         tuner: str, trials: int, device: str | None = None) -> str | None:
    """Stores `plan` for `graph` (replacing an older one only if it was slower). Returns
    the file written, or None when the store is off."""
    p = path()
    if not p:
        return None
    os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
    data = _read(p)
    key = store_key(graph, math, device)
    old = data.get(key)
    if old and old.get("tuned_ms", float("inf")) <= tuned_ms:
        return p
    data[key] = {"plan": {str(k): v for k, v in plan.items()}, "tuned_ms": tuned_ms, "default_ms": default_ms,
                 "tuner": tuner, "trials": trials}
    tmp = p + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, p)
    return p
