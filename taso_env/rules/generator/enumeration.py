"""Enumeration of a domain's operator graphs and fingerprinting on random inputs.

Graphs are built bottom-up by size (number of operators, shared subgraphs counted
once): a new graph applies a template to graphs already built, so every graph up to
`max_size` operators is reached. Each graph is evaluated with the numpy reference
operators (`reference.execute_op`) on the fingerprint draw; an evaluation that fails
(shapes that do not fit) means the graph is not well typed. Graphs with equal outputs
(shape and values, rounded) fall into one *class*; the first graph of a class is its
representative, and only representatives are extended (a graph that contains a
non-representative is the representative's graph with one subgraph replaced by an
equal one: every rule it yields is a rule on a smaller graph in context, which TASO's
common-subgraph pruning drops anyway).

Candidates pair graphs of one class (single-output substitutions) and pairs of
representatives with the outputs of one Split graph (two-output substitutions, the
parallel merges).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from taso_env.engine.reference import execute_op
from taso_env.rules.generator import terms as T
from taso_env.rules.generator.vocabulary import Domain


def random_values(domain: Domain, draw: dict, seed: int) -> dict[str, np.ndarray]:
    """Values of the variables for one draw: magnitudes in [0.5, 1.5], random signs (no
    value near zero, so divisions are well conditioned)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(domain.variables):
        shape = domain.shape(name, draw)
        mag = rng.uniform(0.5, 1.5, size=shape)
        out[name] = mag * rng.choice([-1.0, 1.0], size=shape)
    return out


class Evaluator:
    """Evaluates terms of a domain on one draw (memoised)."""

    def __init__(self, domain: Domain, draw: dict, seed: int = 0):
        self.domain = domain
        self.draw = draw
        self.values = random_values(domain, draw, seed)
        self.memo: dict = {}
        self.attrs = {t.name: t.concrete_attrs(draw) for t in domain.templates}
        self.templates = {t.name: t for t in domain.templates}

    def __call__(self, t: T.Term):
        """The outputs of `t` (a list of arrays), or None if it is not well typed."""
        if t in self.memo:
            return self.memo[t]
        if T.is_var(t):
            out = [self.values[t[1]]]
        elif T.is_get(t):
            inner = self(t[1])
            out = None if inner is None else [inner[t[2]]]
        else:
            args = [self(c) for c in t[1:]]
            out = None
            if all(a is not None for a in args):
                tmpl = self.templates[t[0]]
                try:
                    with np.errstate(all="ignore"):
                        out = execute_op(tmpl.op, self.attrs[t[0]], [a[0] for a in args])
                    if any(not np.all(np.isfinite(o)) for o in out):
                        out = None
                except Exception:  # noqa: BLE001 - any failure means "not well typed"
                    out = None
        self.memo[t] = out
        return out


def fingerprint(arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        h.update(repr(a.shape).encode())
        h.update((np.round(np.asarray(a, dtype=np.float64), 6) + 0.0).tobytes())
    return h.hexdigest()[:20]


@dataclass
class Enumeration:
    domain: str
    #: fingerprint -> terms (the first is the representative), in creation order
    classes: dict = field(default_factory=dict)
    #: split terms (templates with 2 outputs), in creation order
    splits: list = field(default_factory=list)
    counts: dict = field(default_factory=dict)  # size -> graphs enumerated


def _weight_only(domain: Domain, t: T.Term) -> bool:
    return all(domain.variables[v][1] for v in T.variables(t))


def _order_key(domain: Domain, t: T.Term):
    # commutative operands: input-reading graphs first, then larger, then by text
    return (_weight_only(domain, t), -T.size(t), T.show(t))


def enumerate_domain(domain: Domain, progress=None) -> Enumeration:
    ev = Evaluator(domain, domain.draw(0))
    result = Enumeration(domain.name)
    fp_of: dict = {}
    expandable: list = []  # representatives (and gets of representative splits)

    def add(t) -> bool:
        out = ev(t)
        if out is None:
            return False
        if len(out) > 1:  # a Split: its outputs are the graphs
            result.splits.append(t)
            is_rep = True
            for i in range(len(out)):
                g = ("get", t, i)
                fp = fingerprint(ev(g))
                fp_of[g] = fp
                members = result.classes.setdefault(fp, [])
                members.append(g)
                is_rep = is_rep and members[0] == g
            if is_rep:
                expandable.extend(("get", t, i) for i in range(len(out)))
            return True
        fp = fingerprint(out)
        fp_of[t] = fp
        members = result.classes.setdefault(fp, [])
        members.append(t)
        if members[0] == t:
            expandable.append(t)
        return True

    for name in sorted(domain.variables):
        add(T.var(name))
    result.counts[0] = len(domain.variables)
    measure = _measure_fn(domain)
    for s in range(1, domain.max_size * (2 if domain.weight_ops_half else 1) + 1):
        pool = list(expandable)  # graphs of smaller measure
        made = 0
        for tmpl in domain.templates:
            for args in _argument_tuples(domain, tmpl, pool, s, measure, ev):
                t = (tmpl.name,) + args
                if domain.weight_ops_half and T.size(t) > 1 and _weight_only(domain, t):
                    continue  # one weight operator per weight operand (a merge needs no more)
                if add(t):
                    made += 1
                if made >= domain.max_terms:
                    break
            if made >= domain.max_terms:
                break
            if progress is not None:
                progress.set_postfix(domain=domain.name, size=s, graphs=made)
        result.counts[s] = made
    return result


def _measure_fn(domain: Domain):
    """The size of a set of operator nodes: the number of operators, or where weight
    operators count half (`Domain.weight_ops_half`: concatenating or adding weights is
    folded before run time, so a merge's target is not charged for it) twice the run-time
    operators plus the weight operators."""
    if not domain.weight_ops_half:
        return len

    weight: dict = {}

    def node(n) -> int:
        w = weight.get(n)
        if w is None:
            w = weight[n] = 1 if _weight_only(domain, n) else 2
        return w

    def measure(nodes) -> int:
        return sum(node(n) for n in nodes)
    return measure


def _argument_tuples(domain: Domain, tmpl, pool, target: int, measure, ev):
    """Argument tuples whose graph with the new operator has measure `target`."""
    ranks = tmpl.ranks or (None,) * tmpl.arity

    def ok(i, t):
        if ranks[i] is not None and ev(t)[0].ndim != ranks[i]:
            return False
        kind = kinds[i]
        if kind == "w":
            return _weight_only(domain, t)
        if kind == "a":
            return not _weight_only(domain, t)
        return True

    kinds = tmpl.kinds or (None,) * tmpl.arity
    sized = sorted(((measure(T.op_nodes(t)), k, t) for k, t in enumerate(pool)), key=lambda x: (x[0], x[1]))
    cands = [[(m, t) for m, _, t in sized if m < target and ok(i, t)] for i in range(tmpl.arity)]

    def rec(i, chosen, nodes):
        if i == tmpl.arity:
            new = (tmpl.name,) + tuple(chosen)
            if measure(nodes | {new}) == target:
                yield tuple(chosen)
            return
        base = measure(nodes)
        for m, t in cands[i]:
            if m >= target:
                break  # sorted by measure: every later one is larger
            n = nodes | T.op_nodes(t)
            if base + m >= target and measure(n) >= target:
                continue
            if tmpl.commutative and i > 0 and _order_key(domain, chosen[-1]) > _order_key(domain, t):
                continue
            yield from rec(i + 1, chosen + [t], n)
    yield from rec(0, [], frozenset())


@dataclass(frozen=True)
class Candidate:
    """A candidate substitution: source roots -> target roots (equal fingerprints)."""

    domain: str
    source: tuple
    target: tuple
    kind: str  # "single" or "multi"


def candidates(domain: Domain, en: Enumeration, all_pairs_up_to: int = 4) -> list[Candidate]:
    """Pairs of equal graphs: every graph of a class with its representative (both
    directions), and all pairs in classes of at most `all_pairs_up_to` graphs."""
    out: list[Candidate] = []
    seen = set()

    def push(src, tgt, kind):
        if src == tgt or T.roots_size(src) == 0:
            return
        sv = frozenset().union(*(T.variables(r) for r in src))
        tv = frozenset().union(*(T.variables(r) for r in tgt))
        if not tv <= sv:
            return
        key = (src, tgt)
        if key not in seen:
            seen.add(key)
            out.append(Candidate(domain.name, src, tgt, kind))

    for members in en.classes.values():
        singles = [m for m in members if not T.is_get(m)]
        if len(singles) < 2:
            continue
        if len(singles) <= all_pairs_up_to:
            pairs = [(a, b) for a in singles for b in singles if a != b]
        else:
            rep = singles[0]
            pairs = [(rep, m) for m in singles[1:]] + [(m, rep) for m in singles[1:]]
        for a, b in pairs:
            push((a,), (b,), "single")
    # two-output substitutions: (r0, r1) == (Split(...)[0], Split(...)[1])
    fp_cache = {}
    for fp, members in en.classes.items():
        for m in members:
            fp_cache[m] = fp
    for sp in en.splits:
        gets = (("get", sp, 0), ("get", sp, 1))
        reps = []
        for g in gets:
            members = en.classes[fp_cache[g]]
            plain = [m for m in members if not T.is_get(m) and not T.is_var(m)]
            reps.append(plain[0] if plain else None)
        if None in reps or reps[0] == reps[1]:
            continue
        push(tuple(reps), gets, "multi")
        push(gets, tuple(reps), "multi")
    return out
