"""Extraction of a graph from the e-graph under the active cost model.

The e-graph (a `Snapshot`) has tensor classes (nodes `Out(n, i)`, free) and op classes
(nodes: ops, costed by the cost model for their input types, and leaves). A selection
picks one node per class; the graph it describes is the DAG reachable from the output
classes, and its cost is the sum of the op costs of the distinct op classes reached
(a shared op, e.g. a merged convolution feeding several splits, counts once), as the
cost model charges a real graph.

- `greedy`: bottom-up tree-cost extraction in Knuth's generalised Dijkstra order: a
  node becomes eligible only once all its children are settled, so the choice is
  acyclic whatever cycles the e-graph holds.
- `improve`: DAG-aware local search from a selection (the greedy one, or one read from
  a concrete graph such as the input or a search result): switch one class to another
  node, adopting the other outputs of a newly used multi-output op in every class that
  has them; keep a move when the exact DAG cost falls and no cycle results.
- `optimal`: branch and bound over all selections of small e-graphs (exact DAG cost);
  gives up after a step budget and says so.

Ops whose inputs are all constant (weights and ops on them) cost nothing, as in the cost
models; in a constant class only constant nodes are chosen, so this stays true of the
extracted graph.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass

from taso_env import _core
from taso_env.engine.eqsat_encoding import Encoding, Snapshot


@dataclass
class Selection:
    t: dict  # T class -> (N class, output index)
    n: dict  # N class -> index into snap.n_nodes[class]


class Costs:
    """Per-node costs and constant flags of a snapshot under a C++ cost model."""

    def __init__(self, enc: Encoding, snap: Snapshot, core_model, cache: dict):
        self.enc, self.snap, self.model, self.cache = enc, snap, core_model, cache
        self.t_const, self.n_const = self._constants()
        self.node_cost: dict = {}
        for n, nodes in snap.n_nodes.items():
            for j, (k, ins) in enumerate(nodes):
                self.node_cost[(n, j)] = self._cost(k, ins)

    def _node_const(self, k: int, ins: tuple, t_const: set) -> bool:
        if k < 0:
            return self.enc.leaves[-1 - k].type == "Weight"
        if self.enc.keys[k].type == "Constant":
            return True
        return bool(ins) and all(c in t_const for c in ins)

    def _constants(self) -> tuple[set, set]:
        snap = self.snap
        t_const: set = set()
        n_const: set = set()
        changed = True
        while changed:
            changed = False
            for n, nodes in snap.n_nodes.items():
                if n not in n_const and any(self._node_const(k, ins, t_const) for k, ins in nodes):
                    n_const.add(n)
                    changed = True
            for c, outs in snap.t_nodes.items():
                if c not in t_const and any(n in n_const for n, _ in outs):
                    t_const.add(c)
                    changed = True
        return t_const, n_const

    def allowed_n(self, n: int) -> list[int]:
        nodes = self.snap.n_nodes[n]
        if n in self.n_const:
            return [j for j, (k, ins) in enumerate(nodes) if self._node_const(k, ins, self.t_const)]
        return list(range(len(nodes)))

    def allowed_t(self, c: int) -> list[tuple]:
        outs = self.snap.t_nodes[c]
        if c in self.t_const:
            return [o for o in outs if o[0] in self.n_const]
        return list(outs)

    def _cost(self, k: int, ins: tuple) -> float:
        if k < 0 or (ins and all(c in self.t_const for c in ins)) or self.enc.keys[k].type == "Constant":
            return 0.0
        types = tuple(self.snap.tensor_type(self.enc, c) for c in ins)
        consts = tuple(c in self.t_const for c in ins)
        key = (k, types, consts)
        if key not in self.cache:
            self.cache[key] = self._measure(k, types, consts)
        return self.cache[key]

    def _measure(self, k: int, types: tuple, consts: tuple) -> float:
        op = self.enc.keys[k]
        core = _core.CoreGraph()
        refs = [(core.add_op("Weight" if c else "Input", f"i{j}", [], {}, [(list(s), d)]), 0)
                for j, ((s, d), c) in enumerate(zip(types, consts, strict=True))]
        declared = [(list(s), d) for s, d in op.outputs] if op.type == "Opaque" else ()
        i = core.add_op(op.type, self.enc.key_names[k], refs, op.attrs(), declared)
        return float(self.model.op_costs(core)[i])


def greedy(snap: Snapshot, costs: Costs) -> Selection:
    """Bottom-up tree-cost extraction; every class with an acyclic derivation is chosen."""
    t_best: dict = {}
    n_best: dict = {}
    parents: dict = {}  # T class -> [(N class, node index)]
    waiting: dict = {}
    heap: list = []
    for n, nodes in snap.n_nodes.items():
        for j in costs.allowed_n(n):
            ins = set(nodes[j][1])
            waiting[(n, j)] = len(ins)
            for c in ins:
                parents.setdefault(c, []).append((n, j))
            if not ins:
                heapq.heappush(heap, (costs.node_cost[(n, j)], 1, n, j))
    t_parents: dict = {}  # N class -> [(T class, out node)]
    for c in snap.t_nodes:
        for n, i in costs.allowed_t(c):
            t_parents.setdefault(n, []).append((c, (n, i)))
    while heap:
        cost, kind, cls, node = heapq.heappop(heap)
        if kind == 1:
            if cls in n_best:
                continue
            n_best[cls] = (cost, node)
            for c, out in t_parents.get(cls, ()):
                if c not in t_best:
                    heapq.heappush(heap, (cost, 0, c, out))
        else:
            if cls in t_best:
                continue
            t_best[cls] = (cost, node)
            for n, j in parents.get(cls, ()):
                waiting[(n, j)] -= 1
                if waiting[(n, j)] == 0 and n not in n_best:
                    total = costs.node_cost[(n, j)] + sum(t_best[c][0] for c in set(snap.n_nodes[n][j][1]))
                    heapq.heappush(heap, (total, 1, n, j))
    return Selection({c: v[1] for c, v in t_best.items()}, {n: v[1] for n, v in n_best.items()})


def dag_cost(snap: Snapshot, costs: Costs, sel: Selection, roots: list[int]) -> float | None:
    """Cost of the DAG the selection describes from `roots`; None if it has a cycle or
    an unselected class."""
    state: dict = {}  # N class -> 1 visiting, 2 done
    total = 0.0
    for root in roots:
        if root not in sel.t:
            return None
        stack = [(sel.t[root][0], False)]
        while stack:
            n, leaving = stack.pop()
            if leaving:
                state[n] = 2
                continue
            s = state.get(n)
            if s == 2:
                continue
            if s == 1:
                return None
            j = sel.n.get(n)
            if j is None:
                return None
            state[n] = 1
            total += costs.node_cost[(n, j)]
            stack.append((n, True))
            for c in snap.n_nodes[n][j][1]:
                out = sel.t.get(c)
                if out is None:
                    return None
                if state.get(out[0]) == 1:
                    return None
                if state.get(out[0]) != 2:
                    stack.append((out[0], False))
    return total


def reachable(snap: Snapshot, sel: Selection, roots: list[int]) -> tuple[set, set]:
    ts, ns = set(), set()
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in ts:
            continue
        ts.add(c)
        n = sel.t[c][0]
        if n in ns:
            continue
        ns.add(n)
        stack.extend(snap.n_nodes[n][sel.n[n]][1])
    return ts, ns


def improve(snap: Snapshot, costs: Costs, sel: Selection, roots: list[int], deadline: float,
            fallback: Selection | None = None) -> tuple[Selection, float]:
    """DAG-aware local search from `sel` (classes it lacks take `fallback`'s choice)."""
    if fallback is not None:
        sel = Selection({**fallback.t, **sel.t}, {**fallback.n, **sel.n})
    best = dag_cost(snap, costs, sel, roots)
    if best is None:
        raise ValueError("the starting selection is not a DAG")
    siblings: dict = {}  # N class -> T classes that have an Out node of it
    for c, outs in snap.t_nodes.items():
        for n, i in outs:
            siblings.setdefault(n, []).append((c, i))
    improved = True
    while improved and time.perf_counter() < deadline:
        improved = False
        ts, ns = reachable(snap, sel, roots)
        moves = []
        for c in sorted(ts):
            for out in costs.allowed_t(c):
                if out != sel.t[c] and out[0] in sel.n:
                    n = out[0]
                    moves.append((costs.node_cost[(n, sel.n[n])] if n not in ns else 0.0, 0, c, out))
        for n in sorted(ns):
            for j in costs.allowed_n(n):
                if j != sel.n[n] and all(c in sel.t for c in snap.n_nodes[n][j][1]):
                    moves.append((costs.node_cost[(n, j)] - costs.node_cost[(n, sel.n[n])], 1, n, j))
        moves.sort()
        for _, kind, cls, choice in moves:
            if time.perf_counter() >= deadline:
                break
            if kind == 0:
                if sel.t[cls] == choice:
                    continue
                n = choice[0]
                old = {cls: sel.t[cls]}
                sel.t[cls] = choice
                for c, i in siblings.get(n, ()):
                    if c != cls and c in ts and (n, i) in costs.allowed_t(c) and sel.t[c] != (n, i):
                        old.setdefault(c, sel.t[c])  # a class can hold two outputs of n
                        sel.t[c] = (n, i)
                cost = dag_cost(snap, costs, sel, roots)
                if cost is not None and cost < best - 1e-9:
                    best, improved = cost, True
                else:
                    sel.t.update(old)
            else:
                if sel.n[cls] == choice:
                    continue
                old_j, sel.n[cls] = sel.n[cls], choice
                cost = dag_cost(snap, costs, sel, roots)
                if cost is not None and cost < best - 1e-9:
                    best, improved = cost, True
                else:
                    sel.n[cls] = old_j
    return sel, best


def optimal(snap: Snapshot, costs: Costs, roots: list[int], bound: float, max_steps: int = 200_000
            ) -> tuple[Selection | None, float, bool]:
    """Branch and bound over every selection reachable from `roots`: the cheapest
    acyclic one if cheaper than `bound`; (selection or None, cost, proved optimal)."""
    best = [bound, None]
    steps = [0]
    sel = Selection({}, {})

    def rec(todo: list, cost: float) -> None:
        steps[0] += 1
        if steps[0] > max_steps or cost >= best[0] - 1e-12:
            return
        while todo and (todo[-1][1] in (sel.t if todo[-1][0] == 0 else sel.n)):
            todo = todo[:-1]
        if not todo:
            total = dag_cost(snap, costs, sel, roots)
            if total is not None and total < best[0] - 1e-12:
                best[0], best[1] = total, Selection(dict(sel.t), dict(sel.n))
            return
        kind, cls = todo[-1]
        rest = todo[:-1]
        if kind == 0:
            for out in costs.allowed_t(cls):
                sel.t[cls] = out
                rec(rest + ([(1, out[0])] if out[0] not in sel.n else []), cost)
            del sel.t[cls]
        else:
            options = sorted(costs.allowed_n(cls), key=lambda j: costs.node_cost[(cls, j)])
            for j in options:
                sel.n[cls] = j
                ins = [(0, c) for c in dict.fromkeys(snap.n_nodes[cls][j][1]) if c not in sel.t]
                rec(rest + ins, cost + costs.node_cost[(cls, j)])
            del sel.n[cls]

    rec([(0, r) for r in reversed(list(dict.fromkeys(roots)))], 0.0)
    return best[1], best[0], steps[0] <= max_steps


def reachable_size(snap: Snapshot, roots: list[int]) -> int:
    """Nodes reachable from `roots` through any node (the e-graph optimal search covers)."""
    seen_t, seen_n = set(), set()
    stack = list(roots)
    count = 0
    while stack:
        c = stack.pop()
        if c in seen_t:
            continue
        seen_t.add(c)
        for n, _ in snap.t_nodes.get(c, ()):
            if n in seen_n:
                continue
            seen_n.add(n)
            for _, ins in snap.n_nodes[n]:
                count += 1
                stack.extend(ins)
    return count
