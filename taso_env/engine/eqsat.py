"""Equality saturation over the verified rules (Tensat's idea) on egglog's e-graph.

    result = te.search(g, method="eqsat", node_limit=20000, time_limit=10.0)
    result.details      # iterations, e-nodes, stop reason, extraction, rules skipped, ...

1. The input graph becomes egglog terms (`eqsat_encoding`); so does the seed (by default
   the real engine's greedy result, unioned with the input's outputs), so the e-graph
   always holds a graph at least that good.
2. Saturation: each iteration runs every rule's egglog query once, then adds the target
   of every new valid match (`eqsat_rules`: validity and targets from the C++ engine),
   until nothing changes (saturated), or the node, time or iteration limit is reached.
3. Extraction under the active cost model (`eqsat_extract`): greedy tree-cost extraction,
   the input's and the seed's own selections, DAG-aware local search from the best of
   them, and exact branch and bound when the e-graph is small.
4. The extracted graph is rebuilt as a real Graph (shape inference checks every op),
   polished by the engine's greedy pass (`eqsat_improve`), and compared with the seed:
   the cheaper one is returned and `details["source"]` says which.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from taso_env import _core
from taso_env.engine import eqsat_extract as ex
from taso_env.engine.eqsat_encoding import Encoding, Snapshot, op_key, snapshot
from taso_env.engine.graph import Graph
from taso_env.errors import TasoEnvError

SEEDS = (None, "none", "greedy", "backtracking")
log = logging.getLogger(__name__)


class EqsatArgumentError(TasoEnvError, ValueError):
    """A bad argument to the eqsat search (names it and the accepted values)."""


class EqsatUnavailableError(TasoEnvError, ImportError):
    """egglog (the e-graph library) is not installed."""


def _check_args(node_limit, time_limit, iter_limit, seed, optimal_limit) -> None:
    def positive_int(name, v):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise EqsatArgumentError(f"eqsat: {name} must be a positive integer, got {v!r}")

    positive_int("node_limit", node_limit)
    positive_int("iter_limit", iter_limit)
    if isinstance(optimal_limit, bool) or not isinstance(optimal_limit, int) or optimal_limit < 0:
        raise EqsatArgumentError(f"eqsat: optimal_limit must be an integer >= 0, got {optimal_limit!r}")
    if isinstance(time_limit, bool) or not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise EqsatArgumentError(f"eqsat: time_limit must be a positive number of seconds, got {time_limit!r}")
    if seed not in SEEDS:
        raise EqsatArgumentError(f"eqsat: seed must be one of {SEEDS}, got {seed!r}")


def _selection_of(enc: Encoding, snap: Snapshot, graph: Graph, refs: dict) -> ex.Selection | None:
    """The selection that describes `graph` (added with refs `refs`); first writer wins
    where two of its tensors share a class, so the selection stays acyclic."""
    sel = ex.Selection({}, {})
    core = graph.core
    for i in range(core.num_ops):
        record = core.op_record(i)
        outs = record[6]
        c0 = snap.ref_class[refs[(i, 0)]]
        if record[0] in ("Input", "Weight"):
            want = (-1 - enc.leaf_ids[(record[0], record[1])], ())
        else:
            want = (enc.key_ids[op_key(record)], tuple(snap.ref_class[refs[tuple(t)]] for t in record[2]))
        found = None
        for n, idx in snap.t_nodes.get(c0, ()):
            if idx == 0 and n not in sel.n:
                nodes = snap.n_nodes[n]
                if want in nodes:
                    found = (n, nodes.index(want))
                    break
            elif idx == 0 and snap.n_nodes[n][sel.n[n]] == want:
                found = (n, sel.n[n])
                break
        if found is None:
            return None
        n, j = found
        sel.n.setdefault(n, j)
        for k in range(len(outs)):
            sel.t.setdefault(snap.ref_class[refs[(i, k)]], (n, k))
    return sel


def _rebuild(enc: Encoding, snap: Snapshot, sel: ex.Selection, graph: Graph, roots: list[int]) -> Graph:
    """The real graph a selection describes (inputs in the source's order, same output
    names); the core re-infers every shape."""
    core = _core.CoreGraph()
    n_op: dict = {}
    used = set()

    def unique(name: str) -> str:
        base, k = name, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        used.add(name)
        return name

    for o in graph.inputs:
        leaf = enc.leaf_ids[("Input", o.name)]
        s, d = enc.leaves[leaf].output
        n_op[("leaf", leaf)] = core.add_op("Input", unique(o.name), [], {}, [(list(s), d)])

    def emit(n: int) -> int:
        # iterative post-order over N classes
        stack = [(n, False)]
        while stack:
            cls, ready = stack.pop()
            if cls in n_op:
                continue
            k, ins = snap.n_nodes[cls][sel.n[cls]]
            if k < 0:
                leaf = enc.leaves[-1 - k]
                key = ("leaf", -1 - k)
                if key not in n_op:
                    s, d = leaf.output
                    n_op[key] = core.add_op(leaf.type, unique(leaf.name), [], {}, [(list(s), d)])
                n_op[cls] = n_op[key]
                continue
            if not ready:
                stack.append((cls, True))
                stack.extend((sel.t[c][0], False) for c in ins if sel.t[c][0] not in n_op)
                continue
            key = enc.keys[k]
            refs = [(n_op[sel.t[c][0]], sel.t[c][1]) for c in ins]
            declared = [(list(s), d) for s, d in key.outputs] if key.type == "Opaque" else ()
            n_op[cls] = core.add_op(key.type, unique(enc.key_names[k]), refs, key.attrs(), declared)
        return n_op[n]

    for c, name in zip(roots, graph.output_names, strict=True):
        n, i = sel.t[c]
        core.add_output((emit(n), i), name)
    return Graph(core, graph.weights, graph.name, graph.metadata, graph.cost_model)


def eqsat_search(graph: Graph, *, node_limit: int = 20000, time_limit: float = 10.0, iter_limit: int = 30,
                 seed: str | None = "greedy", budget: int = 1000, alpha: float = 1.05,
                 optimal_limit: int = 400, multi_iters: int = 2, match_limit: int = 50_000,
                 polish: bool = True, rules=None, model=None):
    """Equality saturation; returns a `SearchResult` (method "eqsat") with `details`.

    Args:
        node_limit: stop adding e-nodes beyond this many (the e-graph's size).
        time_limit: seconds for saturation (after rule translation and the seed search,
            reported as seconds_setup); extraction gets at most half as much again.
        iter_limit: saturation iterations at most.
        seed: the real engine's search whose result is put into the e-graph and is the
            fallback ("greedy", "backtracking" with `budget`/`alpha`, or None).
        optimal_limit: exact branch-and-bound extraction when the nodes reachable from
            the outputs are at most this many (0: never).
        multi_iters: iterations in which multi-root rules (parallel merges, whose matches
            grow combinatorially and which can merge merged ops again) run, as in Tensat.
        polish: run the engine's greedy pass on the extracted graph.

    Raises:
        EqsatArgumentError: a bad limit or seed.
        EqsatUnavailableError: egglog is not installed.
    """
    from taso_env.engine import eqsat_improve
    from taso_env.engine.eqsat_rules import RuleTranslator
    from taso_env.engine.search import SearchResult, core_cost_model, resolve_rules, rewritten, search

    _check_args(node_limit, time_limit, iter_limit, seed, optimal_limit)
    for name, v in (("multi_iters", multi_iters), ("match_limit", match_limit)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise EqsatArgumentError(f"eqsat: {name} must be an integer >= 0, got {v!r}")
    try:
        import egglog  # noqa: F401
    except ImportError as e:
        raise EqsatUnavailableError("eqsat needs egglog: pip install egglog==13.2.0") from e
    rule_set = resolve_rules(rules)
    core_model = core_cost_model(model, graph)
    start = time.perf_counter()
    initial_cost = core_model.graph_cost(graph.core)

    enc = Encoding()
    enc.run("(ruleset rebuild)")
    translator = RuleTranslator(rule_set, enc, core_model)
    refs = enc.add_graph(graph)
    out_refs = [refs[tuple(o)] for o in graph.outputs]
    seed_result = seed_refs = None
    if seed not in (None, "none"):
        seed_result = search(graph, seed, budget=budget, alpha=alpha, rules=rule_set, model=model)
        seed_refs = enc.add_graph(seed_result.graph)
        for a, o in zip(out_refs, seed_result.graph.outputs, strict=True):
            enc.union(a, seed_refs[tuple(o)])
    enc.flush()

    setup_done = time.perf_counter()  # rule translation, encoding, seed search
    deadline = setup_done + time_limit
    iterations, stop, applied_total = 0, "iteration limit", 0
    last_size = None
    snap = snapshot(enc)
    skipped_queries: Counter = Counter()
    while iterations < iter_limit:
        if time.perf_counter() >= deadline:
            stop = "time limit"
            break
        if iterations < multi_iters:
            snap = snapshot(enc)  # fresh reader counts for the match estimates
        for rel in translator.run_queries(snap, multi_root=iterations < multi_iters, match_limit=match_limit,
                                          deadline=deadline):
            skipped_queries[rel] += 1
        snap = snapshot(enc, translator.relations)
        if time.perf_counter() >= deadline:  # the queries may have been cut short
            stop = "time limit"
            break
        size = (snap.num_enodes, len(snap.t_nodes), len(snap.n_nodes))
        if size == last_size:  # the last iteration changed nothing (under the schedule)
            stop = "saturated"
            break
        last_size = size
        if snap.num_enodes >= node_limit:
            stop = "node limit"
            break
        iterations += 1
        applied, added, complete = translator.apply_matches(snap, node_limit - snap.num_enodes, deadline)
        applied_total += applied
        enc.flush()
        log.info("eqsat iteration %d: %d e-nodes, %d matches applied, %d e-nodes added, %.1f s",
                 iterations, snap.num_enodes, applied, added, time.perf_counter() - start)
        if not complete:
            stop = "time limit" if time.perf_counter() >= deadline else "node limit"
            break
    seconds_saturation = time.perf_counter() - setup_done
    enc.run("(run rebuild 1)")
    snap = snapshot(enc)

    # -- extraction ----------------------------------------------------------------------
    t0 = time.perf_counter()
    extract_deadline = t0 + max(1.0, time_limit / 2)
    costs = ex.Costs(enc, snap, core_model, {})
    roots = [snap.ref_class[r] for r in out_refs]
    starts = {"greedy": ex.greedy(snap, costs), "input": _selection_of(enc, snap, graph, refs)}
    if seed_result is not None:
        starts["seed"] = _selection_of(enc, snap, seed_result.graph, seed_refs)
    scored = {name: ex.dag_cost(snap, costs, s, roots) for name, s in starts.items() if s is not None}
    scored = {name: c for name, c in scored.items() if c is not None}
    start_name = min(scored, key=lambda n: (scored[n], n != "greedy"))
    sel, dag = ex.improve(snap, costs, starts[start_name], roots, extract_deadline, fallback=starts["greedy"])
    extraction = f"{start_name}+local"
    reach = ex.reachable_size(snap, roots)
    proved = False
    if optimal_limit and reach <= optimal_limit:
        best_sel, best_cost, proved = ex.optimal(snap, costs, roots, dag + 1e-9)
        if best_sel is not None and best_cost < dag - 1e-12:
            sel, dag = best_sel, best_cost
        extraction = "optimal" if proved else extraction + "+bnb(partial)"
    log.info("eqsat extraction: starts %s, local search -> %.5f (%.1f s)", scored, dag, time.perf_counter() - t0)
    extracted = _rebuild(enc, snap, sel, graph, roots)
    seconds_extract = time.perf_counter() - t0
    extracted_cost = core_model.graph_cost(extracted.core)

    best, best_cost, source = extracted, extracted_cost, "extracted"
    polish_fires: Counter = Counter()
    if polish:
        polished, pres = eqsat_improve.polish(extracted, rule_set, model)
        if pres.final_cost < best_cost - 1e-12:
            best, best_cost, source = polished, pres.final_cost, "extracted+polish"
            polish_fires = pres.rule_fires
    if seed_result is not None and seed_result.final_cost < best_cost - 1e-12:
        best, best_cost, source = seed_result.graph, seed_result.final_cost, f"seed ({seed})"
    if best_cost > initial_cost:  # never worse than the input
        best, best_cost, source = graph, initial_cost, "input"
    seconds = time.perf_counter() - start
    names = rule_set.names()
    fires = Counter({names[r]: k for r, k in translator.fires.items()})
    details = {
        "iterations": iterations, "stop": stop, "enodes": snap.num_enodes,
        "tensor_classes": len(snap.t_nodes), "op_classes": len(snap.n_nodes),
        "matches_applied": applied_total, "rules_translated": translator.rules_translated,
        "rules_skipped": dict(translator.skipped), "extraction": extraction, "optimal": proved,
        "reachable_enodes": reach, "extracted_cost": extracted_cost, "dag_cost": dag,
        "start_costs": scored, "seed_cost": None if seed_result is None else seed_result.final_cost,
        "source": source, "seconds_setup": setup_done - start,
        "seconds_saturation": seconds_saturation, "seconds_extraction": seconds_extract,
        "polish_fires": dict(polish_fires), "queries_skipped": dict(skipped_queries),
    }
    return SearchResult(graph=rewritten(best, best.core), method="eqsat", initial_cost=initial_cost,
                        final_cost=best_cost, seconds=seconds, expansions=iterations,
                        graphs_seen=snap.num_enodes, applied=[], complete=stop == "saturated",
                        rule_fires=fires, details=details)
