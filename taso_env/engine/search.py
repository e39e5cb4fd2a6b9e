"""Candidates, rule application and the search baselines (C++ engine underneath).

    cands = g.candidates()              # [Candidate(rule_id, location, cost_delta)]
    g2 = g.apply(cands[0])              # g is unchanged
    result = te.search(g, method="backtracking", alpha=1.05, budget=1000)
    best = te.optimize(g, method="greedy")
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from taso_env import _core
from taso_env import rules as rules_module
from taso_env.engine import real_work
from taso_env.engine.cost_model import CostModel, CostModelError, resolve_cost_model
from taso_env.engine.graph import Graph

METHODS = ("greedy", "backtracking", "exhaustive", "eqsat")


class Candidate(NamedTuple):
    """A rule applicable at a location: `location` lists the graph op ids matched by the
    rule's source pattern ops, in pattern order. `cost_delta` is the estimated change
    of the graph cost (ms) if applied: negative is faster. (A named tuple: an env step
    makes hundreds.)"""

    rule_id: int
    location: tuple[int, ...]
    cost_delta: float

    @property
    def rule_name(self) -> str:
        return rules_module.default().specs[self.rule_id]["name"]


def core_cost_model(model: str | CostModel | None, graph: Graph | None = None) -> _core.CoreCostModel:
    """The C++ model that prices `graph` in search: `model`'s, else the graph's own
    model's, else the process default's (`resolve_cost_model`).

    Raises:
        CostModelError: the model has no C++ implementation (analytic, table and cuda have).
    """
    m = resolve_cost_model(model, graph)
    core = m.core
    if not isinstance(core, _core.CoreCostModel):
        raise CostModelError(f"cost model {m.name!r} has no C++ implementation for search")
    return core


def resolve_rules(rule_set):
    """The RuleSet to search with: `rule_set` itself, a rule-set name of
    taso_env.rules.sets ("hand", "all", ...) or None (every shipped rule)."""
    if rule_set is None:
        return rules_module.default()
    if isinstance(rule_set, str):
        from taso_env.rules.sets import rule_set as named_rule_set

        return named_rule_set(rule_set)
    return rule_set


def rewritten(graph: Graph, core: _core.CoreGraph) -> Graph:
    """The Graph of `core`, a rewrite of `graph`: the same name, metadata, weight data and
    own cost model. Rewrites never rename weights, so the data mapping carries over as is
    (entries of weights a rewrite removed are never read)."""
    return Graph(core, graph.weights, graph.name, graph.metadata, graph.cost_model)


def candidates(graph: Graph, rule_id: int | None = None, *, rules=None,
               model: str | CostModel | None = None) -> list[Candidate]:
    """Every valid (rule, location) of `graph`, without materialising any graph: a priced
    candidate list outside an Enumeration, which the rule set's core counts on the
    real-work ledger as a cost query (taso_env.rules.LedgeredCoreRuleSet)."""
    return resolve_rules(rules).core.candidates(graph.core, core_cost_model(model, graph),
                                                -1 if rule_id is None else rule_id, as_type=Candidate)


@dataclass(frozen=True)
class Successor:
    """What a candidate leads to: the successor graph's hash and the best cost delta (ms)
    among the successor's candidates (None if it has none)."""

    child_hash: int
    best_delta: float | None


def successors(enum: Enumeration, which) -> list[Successor]:
    """Looks one rewrite ahead of each of the candidates `which` (indices into
    `enum.candidates`): each successor is built, but only its matches holding an op the
    rewrite changed are enumerated; the rest are the enumeration's candidates carried
    over, priced again only where the rewrite changed an op their cost delta was computed
    from (their footprint; see taso_env/csrc/engine/successor.cc for what that can miss).

    Raises:
        TypeError: `enum` is not an Enumeration (`enumeration(graph)` or a `step`'s).
        IndexError: an index is not one of `enum.candidates`.
    """
    if not isinstance(enum, Enumeration):
        raise TypeError(f"successors() looks ahead of an Enumeration (search.enumeration(graph) or a step's), "
                        f"not a {type(enum).__name__}")
    which = [int(k) for k in which]
    real_work.record("successors", len(which))
    raw = enum._rules.core.successors(enum.graph.core, enum._model, enum._core, which)
    return [Successor(h, d) for h, d in raw]


class Enumeration:
    """The candidates a full enumeration of a graph finds, sorted by rule and location, in
    a form that can follow the graph through a rewrite without enumerating it whole
    (`step`).

    Attributes:
        graph: the graph enumerated.
        candidates: its candidates.
    """

    def __init__(self, graph: Graph, core, rules, model):
        self.graph = graph
        self.candidates = core.candidates(as_type=Candidate)
        self._core, self._rules, self._model = core, rules, model

    def op_costs(self) -> np.ndarray:
        """Estimated runtime (ms) of every op of `graph` under the cost model it was
        enumerated with: `graph.op_costs(model)`, read from what the enumeration already
        priced where it can."""
        return np.asarray(self._core.op_costs(), dtype=np.float64)

    def cycle_rejected(self) -> list[tuple[int, tuple[int, ...]]]:
        """(rule, location) of the bindings the enumeration rejected only because their
        rewrite would close a cycle (a later rewrite elsewhere can open it)."""
        return self._core.cycle_rejected()


def enumeration(graph: Graph, *, rules=None, model: str | CostModel | None = None) -> Enumeration:
    """Every valid (rule, location) of `graph`, sorted by rule and location, as an
    `Enumeration` that `step` can carry through a rewrite."""
    real_work.record("enumeration")
    rule_set, core_model = resolve_rules(rules), core_cost_model(model, graph)
    return Enumeration(graph, rule_set.core.enumeration(graph.core, core_model), rule_set, core_model)


def step(enum: Enumeration, which: int) -> Enumeration:
    """The enumeration of the graph that `enum.candidates[which]` leads to (its `graph`),
    equal to a full enumeration of it but found by enumerating only the matches holding an
    op the rewrite changed (taso_env/csrc/engine/enumeration.cc).

    Raises:
        IndexError: `which` is not one of `enum.candidates`.
    """
    real_work.record("step")
    core_graph, core = enum._rules.core.step(enum.graph.core, enum._model, enum._core, int(which))
    return Enumeration(rewritten(enum.graph, core_graph), core, enum._rules, enum._model)


def apply(graph: Graph, candidate: Candidate, *, rules=None) -> Graph:
    """The graph with `candidate` applied (a new Graph; weight data carried over).

    Raises:
        ValueError: the candidate does not apply to this graph (e.g. it came from another).
    """
    real_work.record("apply")
    return rewritten(graph, resolve_rules(rules).core.apply(graph.core, candidate.rule_id, candidate.location))


@dataclass
class SearchResult:
    graph: Graph
    method: str
    initial_cost: float
    final_cost: float
    seconds: float
    expansions: int
    graphs_seen: int
    applied: list[int]
    complete: bool
    graphs_built: int = 0
    peak_graphs_stored: int = 0
    rule_fires: Counter = field(default_factory=Counter)
    details: dict = field(default_factory=dict)  # method-specific figures (eqsat: e-graph size, stop, ...)

    @property
    def speedup(self) -> float:
        return self.initial_cost / self.final_cost if self.final_cost > 0 else float("inf")


def search(graph: Graph, method: str = "backtracking", *, alpha: float = 1.05, budget: int = 1000,
           max_steps: int = 10000, max_ops: int = 40, max_states: int = 20000, rules=None,
           model: str | CostModel | None = None, incremental: bool = True,
           store_ops: int = 150000, **eqsat_options) -> SearchResult:
    """Optimises `graph` with a search baseline.

    Args:
        method: "greedy" (best improving rewrite until none), "backtracking" (TASO's
            cost-ordered search keeping graphs under alpha * best cost, `budget`
            expansions) or "exhaustive" (every reachable graph; refuses graphs with more
            than `max_ops` computing ops or more than `max_states` reachable graphs) or
            "eqsat" (equality saturation on egglog; `eqsat_options` such as node_limit,
            time_limit, seed: see taso_env.engine.eqsat.eqsat_search).
        incremental: backtracking scores children from their candidates (exact cost
            delta and child hash, no graph built) and builds a graph only when it is
            expanded; False builds every child (the slow reference it must equal).
        model: the cost model to search under (a spec or a `CostModel`); None: the
            graph's own (`Graph.with_cost_model`), else the process default. The result's
            graph carries the graph's own model on.
        store_ops: incremental backtracking keeps at most this many ops' worth of
            expanded graphs (at least 4 graphs) and rebuilds evicted ones by replaying
            rewrites, so memory stays bounded whatever the budget.

    Raises:
        ValueError: unknown method, bad alpha/budget, or an exhaustive-search limit.
    """
    if method not in METHODS:
        raise ValueError(f"unknown search method {method!r}; use one of {METHODS}")
    real_work.record("search")
    if method == "eqsat":
        from taso_env.engine.eqsat import eqsat_search

        return eqsat_search(graph, alpha=alpha, budget=budget, rules=rules, model=model, **eqsat_options)
    if eqsat_options:
        raise ValueError(f"options {sorted(eqsat_options)} are for method 'eqsat' only")
    rule_set = resolve_rules(rules)
    start = time.perf_counter()
    core, stats = rule_set.core.search(method, graph.core, core_cost_model(model, graph), alpha=alpha, budget=budget,
                                       max_steps=max_steps, max_ops=max_ops, max_states=max_states,
                                       incremental=incremental, store_ops=store_ops)
    seconds = time.perf_counter() - start
    names = rule_set.names()
    return SearchResult(
        graph=rewritten(graph, core), method=method, initial_cost=stats["initial_cost"],
        final_cost=stats["final_cost"], seconds=seconds, expansions=stats["expansions"],
        graphs_seen=stats["graphs_seen"], applied=stats["applied"], complete=stats["complete"],
        graphs_built=stats["graphs_built"], peak_graphs_stored=stats["peak_graphs_stored"],
        rule_fires=Counter(names[i] for i in stats["applied"]))


def optimize(graph: Graph, method: str = "backtracking", **kwargs) -> Graph:
    """The best graph `search` finds (same arguments)."""
    return search(graph, method, **kwargs).graph
