"""Measured cost tables: op costs (ms) keyed by op signature, device and math mode,
stored in HDF5.

An op signature is the canonical string the C++ core builds for an op configuration
(op type, attributes, input and output types; `taso_env._core.op_signatures`), e.g.
``Relu||float32[1,64,56,56]|float32[1,64,56,56]``. A GPU run fills a table
(`scripts/measure_costs.py`); any machine replays it through the `table` cost model.

File layout (one file may hold tables of several devices / math modes)::

    /                attrs: format = "rlflow-cost-table", version = 1
    /tables/<key>/   attrs: device, math, created, notes
        signature    variable-length UTF-8 strings
        ms           float64, measured GPU time
        analytic_ms  float64, the analytic estimate of the same op (0: unknown)

    t = cost_table.load("data/costs/h100_fp32.h5")
    t.merge(other); cost_table.save(t, "out.h5")
"""

from __future__ import annotations

import itertools
import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator

import numpy as np

from taso_env import _core
from taso_env.errors import TasoEnvError

FORMAT = "rlflow-cost-table"
VERSION = 1


class CostTableError(TasoEnvError, ValueError):
    """A cost table cannot be used (names the file and what is wrong)."""


class CorruptCostTableError(CostTableError):
    """The file is not a readable cost table: truncated, not HDF5, wrong layout or
    invalid values."""


class MissingTableError(CostTableError, KeyError):
    """The file holds no table for the requested device / math mode."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _key(device: str, math_mode: str) -> str:
    return f"{device}@{math_mode}".replace("/", "_").replace(".", "_")


class CostTable:
    """Op costs of one device and math mode: signature -> (ms, analytic ms). Signatures
    are kept canonical (`taso_env._core.canonical_signature`): those of older tables are
    rewritten on reading, and where two of them name one configuration the mean is kept."""

    def __init__(self, device: str, math_mode: str = "fp32", entries: dict[str, tuple[float, float]] | None = None,
                 notes: str = ""):
        self.device = str(device)
        self.math = str(math_mode)
        self.notes = notes
        self._entries: dict[str, tuple[float, float]] = {}
        for sig, (ms, analytic) in (entries or {}).items():
            self.set(sig, ms, analytic)

    def set(self, signature: str, ms: float, analytic_ms: float = 0.0) -> str:
        """Adds or replaces one entry; returns the (canonical) signature it is kept under.

        Raises:
            CostTableError: a malformed signature or a negative / non-finite cost.
        """
        if "|" not in signature:
            raise CostTableError(f"malformed op signature {signature!r}")
        if not (math.isfinite(ms) and ms >= 0):
            raise CostTableError(f"invalid cost {ms!r} ms for {signature!r}")
        key = _core.canonical_signature(signature)
        self._entries[key] = (float(ms), float(analytic_ms))
        return key

    def get(self, signature: str) -> float:
        return self._entries[_core.canonical_signature(signature)][0]

    def __contains__(self, signature: object) -> bool:
        return isinstance(signature, str) and _core.canonical_signature(signature) in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def items(self) -> list[tuple[str, float, float]]:
        """(signature, ms, analytic ms), sorted by signature."""
        return [(s, *self._entries[s]) for s in sorted(self._entries)]

    def op_types(self) -> dict[str, int]:
        """Entries per op type."""
        counts: dict[str, int] = {}
        for s in self._entries:
            t = s.split("|", 1)[0]
            counts[t] = counts.get(t, 0) + 1
        return dict(sorted(counts.items()))

    def merge(self, other: CostTable, *, overwrite: bool = True) -> CostTable:
        """Adds `other`'s entries (replacing equal signatures when `overwrite`); returns self.

        Raises:
            CostTableError: the tables are of different devices or math modes.
        """
        if (other.device, other.math) != (self.device, self.math):
            raise CostTableError(f"cannot merge a table of {other.device!r}/{other.math} into one of "
                                 f"{self.device!r}/{self.math}")
        for sig, value in other._entries.items():
            if overwrite or sig not in self._entries:
                self._entries[sig] = value
        return self

    def __repr__(self) -> str:
        return f"CostTable({self.device!r}, {self.math!r}, entries={len(self)})"


def _read_table(path: str, group) -> CostTable:
    where = f"cost table {path!r}, group {group.name!r}"
    try:
        device = group.attrs["device"]
        math_mode = group.attrs["math"]
        sigs = group["signature"][()]
        ms = np.asarray(group["ms"][()], dtype=np.float64)
        analytic = np.asarray(group["analytic_ms"][()], dtype=np.float64)
    except (KeyError, OSError, ValueError, TypeError) as err:
        raise CorruptCostTableError(f"{where}: unreadable ({err})") from err
    if not (len(sigs) == len(ms) == len(analytic)):
        raise CorruptCostTableError(f"{where}: datasets have different lengths "
                                    f"({len(sigs)} signatures, {len(ms)} ms, {len(analytic)} analytic)")
    device = device.decode() if isinstance(device, bytes) else str(device)
    math_mode = math_mode.decode() if isinstance(math_mode, bytes) else str(math_mode)
    notes = group.attrs.get("notes", "")
    table = CostTable(device, math_mode, notes=notes.decode() if isinstance(notes, bytes) else str(notes))
    same: dict[str, list[tuple[float, float]]] = {}  # canonical signature -> its entries
    for s, m, a in zip(sigs, ms, analytic):
        try:
            key = table.set(s.decode() if isinstance(s, bytes) else str(s), float(m), float(a))
        except CostTableError as err:
            raise CorruptCostTableError(f"{where}: {err}") from err
        same.setdefault(key, []).append((float(m), float(a)))
    for sig, values in same.items():
        if len(values) > 1:  # an older table's several names of one configuration
            table.set(sig, sum(v[0] for v in values) / len(values), sum(v[1] for v in values) / len(values))
    return table


def load_all(path: str | os.PathLike) -> list[CostTable]:
    """Every table in the file.

    Raises:
        CostTableError: the file does not exist.
        CorruptCostTableError: truncated, not HDF5, not a cost table, or bad values.
    """
    import h5py

    path = os.fspath(path)
    if not os.path.exists(path):
        raise CostTableError(f"cost table {path!r} does not exist")
    try:
        f = h5py.File(path, "r")
    except OSError as err:
        raise CorruptCostTableError(f"cost table {path!r} is not a readable HDF5 file ({err})") from err
    with f:
        fmt = f.attrs.get("format")
        fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
        if fmt != FORMAT or "tables" not in f:
            raise CorruptCostTableError(f"{path!r} is not an rlflow cost table (format attribute {fmt!r})")
        version = int(f.attrs.get("version", -1))
        if version > VERSION:
            raise CorruptCostTableError(f"cost table {path!r} has version {version}; this reader knows {VERSION}")
        try:
            groups = [f["tables"][k] for k in sorted(f["tables"])]
        except (KeyError, OSError) as err:
            raise CorruptCostTableError(f"cost table {path!r}: unreadable ({err})") from err
        return [_read_table(path, g) for g in groups]


def load(path: str | os.PathLike, device: str | None = None, math_mode: str | None = None) -> CostTable:
    """The table of `device` and `math_mode` (each optional when the file has one match).

    Raises:
        MissingTableError: no table (or several) match.
        CostTableError / CorruptCostTableError: as for `load_all`.
    """
    tables = load_all(path)
    match = [t for t in tables if (device is None or t.device == device) and
             (math_mode is None or t.math == math_mode)]
    if len(match) != 1:
        have = ", ".join(f"{t.device}/{t.math}" for t in tables) or "none"
        what = "no table" if not match else "several tables"
        raise MissingTableError(f"cost table {os.fspath(path)!r}: {what} for device {device!r}, math "
                                f"{math_mode!r} (file has: {have})")
    return match[0]


def save(tables: CostTable | Iterable[CostTable], path: str | os.PathLike, *, merge: bool = True) -> None:
    """Writes tables to `path` atomically (temporary file, then rename). With `merge`,
    tables already in the file are kept and equal (device, math) tables merged, the
    new entries winning.

    Raises:
        CorruptCostTableError: `merge` and the existing file is unreadable.
    """
    import h5py

    path = os.fspath(path)
    new = [tables] if isinstance(tables, CostTable) else list(tables)
    by_key: dict[str, CostTable] = {}
    if merge and os.path.exists(path):
        for t in load_all(path):
            by_key[_key(t.device, t.math)] = t
    for t in new:
        key = _key(t.device, t.math)
        by_key[key] = by_key[key].merge(t) if key in by_key else t
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".h5", dir=folder)
    os.close(fd)
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format"] = FORMAT
            f.attrs["version"] = VERSION
            root = f.create_group("tables")
            str_type = h5py.string_dtype("utf-8")
            for key, t in sorted(by_key.items()):
                g = root.create_group(key)
                g.attrs["device"] = t.device
                g.attrs["math"] = t.math
                g.attrs["created"] = time.strftime("%Y-%m-%dT%H:%M:%S")
                g.attrs["notes"] = t.notes
                rows = t.items()
                g.create_dataset("signature", data=[r[0] for r in rows], dtype=str_type, compression="gzip")
                g.create_dataset("ms", data=np.array([r[1] for r in rows], dtype=np.float64))
                g.create_dataset("analytic_ms", data=np.array([r[2] for r in rows], dtype=np.float64))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# ------------------------------------------------------------------ what to measure
#: Kinds of op configuration `signature_is` knows besides op types: the convolutions the
#: CUDA executor may run on its own paths beside cuDNN's algorithms (docs/gpu.md).
SIGNATURE_KINDS = {
    "pointwise-conv": "Conv2D with a 1x1 kernel, stride 1, no padding and one group (the cuBLASLt GEMM path)",
    "depthwise-conv": "Conv2D with one group per channel and one filter each (the executor's depthwise kernel)",
}


def signature_is(signature: str, kind: str) -> bool:
    """Whether the op configuration `signature` names is of `kind`: an op type ("Conv2D",
    "MatMul", ...) or one of SIGNATURE_KINDS.

    Raises:
        ValueError: a malformed signature.
    """
    op = _core.parse_op_signature(signature)
    if kind not in SIGNATURE_KINDS:
        return op["type"] == kind
    if op["type"] != "Conv2D":
        return False
    ints = op["ints"]
    group = ints.get("group", [1])[0]
    x, w = op["inputs"][0][1], op["inputs"][1][1]
    if kind == "pointwise-conv":
        return (tuple(w[2:]) == (1, 1) and group == 1 and list(ints.get("strides", [1, 1])) == [1, 1]
                and not any(ints.get("pads", [0, 0, 0, 0])))
    return group > 1 and group == x[1] == w[0] and w[1] == 1


def op_configs(graph) -> list[tuple[int, str, str, float]]:
    """(op id, op type, signature, analytic ms) of every op a cost model charges
    (computing, not constant-folded)."""
    from taso_env import _core

    return _core.op_signatures(graph.core, _core.AnalyticModel("h100"))


def random_rewrites(graph, count: int, *, max_steps: int = 30, seed: int = 0, rules=None) -> list:
    """`count` distinct graphs, each reached from `graph` by 1..max_steps random rewrites
    (the original excluded): the candidate graphs search and rollouts visit."""
    import random

    rng = random.Random(seed)
    seen, out = {graph.hash()}, []
    attempts = 0
    while len(out) < count and attempts < 20 * count:
        attempts += 1
        g = graph
        for _ in range(rng.randint(1, max_steps)):
            cands = g.candidates(rules=rules)
            if not cands:
                break
            g = g.apply(rng.choice(cands), rules=rules)
        if g.hash() not in seen:
            seen.add(g.hash())
            out.append(g)
    return out


def greedy_descent(graph, *, model=None, rules=None, candidates=None):
    """The graphs of greedy descent from `graph` (excluded), one per improving rewrite: the
    cheapest candidate (the first of equals, as the engine's greedy search) until none
    saves anything. `candidates(g)` lists a graph's candidates (default: g.candidates
    under `model`)."""
    g = graph
    while True:
        cands = candidates(g) if candidates else g.candidates(rules=rules, model=model)
        best = min(cands, key=lambda c: c.cost_delta, default=None)
        if best is None or best.cost_delta >= 0:
            return
        g = g.apply(best, rules=rules)
        yield g


def greedy_path(graph, count: int, *, model=None, rules=None) -> list:
    """Up to `count` graphs along greedy descent from `graph` under `model` (the original
    excluded), evenly spaced over the path: the graphs whose ranking decides what search
    keeps, from the original's runtime down to the local optimum's."""
    path = list(greedy_descent(graph, model=model, rules=rules))
    if len(path) <= count:
        return path
    return [path[round(i * (len(path) - 1) / (count - 1))] for i in range(count)] if count > 1 else path[-1:]


def explore(graph, *, greedy_steps: int = 5, random_walks: int = 0, walk_length: int = 10,
            max_candidates: int = 64, seed: int = 0, rules=None) -> list:
    """Graphs whose op configurations search reaches from `graph`: the graph itself and,
    at each step of a greedy descent and of `random_walks` random walks, up to
    `max_candidates` of the current graph's candidate graphs (all materialised)."""
    import random

    rng = random.Random(seed)
    found: dict[int, object] = {graph.hash(): graph}

    def expand(g):
        cands = g.candidates(rules=rules)
        picked = cands if len(cands) <= max_candidates else rng.sample(cands, max_candidates)
        for c in picked:
            child = g.apply(c, rules=rules)
            found.setdefault(child.hash(), child)
        return cands

    for _ in itertools.islice(greedy_descent(graph, rules=rules, candidates=expand), greedy_steps):
        pass
    for _ in range(random_walks):
        g = graph
        for _ in range(walk_length):
            cands = expand(g)
            if not cands:
                break
            g = g.apply(rng.choice(cands), rules=rules)
            found.setdefault(g.hash(), g)
    return list(found.values())


def missing_configs(graphs, table: CostTable | None = None) -> dict[str, tuple]:
    """Signature -> (graph, op id, analytic ms) of every op configuration of `graphs`
    that `table` lacks (one representative each)."""
    out: dict[str, tuple] = {}
    for g in graphs:
        for op_id, _, sig, analytic in op_configs(g):
            if sig not in out and (table is None or sig not in table):
                out[sig] = (g, op_id, analytic)
    return out
