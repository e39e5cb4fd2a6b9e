"""Redundancy pruning of candidate substitutions (TASO section 4.2, adapted to terms).

- renaming: two candidates that differ only in variable names are one rule;
- common subgraph: a candidate whose source and target share an operator subgraph,
  or whose roots are the same operator with all arguments but one equal, is a smaller
  substitution applied in context;
- commutation: a candidate whose sides differ only by swapping the operands of
  commutative operators is an instance of the hand rules commute_add / commute_mul;
- subsumption: a candidate that is an instance (variables replaced by graphs, or two
  variables made one) of another kept candidate is dropped.

Each function returns (kept, dropped count) and keeps the input order (deterministic).
"""

from __future__ import annotations

from taso_env.rules.generator import terms as T
from taso_env.rules.generator.vocabulary import Domain


def canonical(src: tuple, tgt: tuple) -> str:
    """The candidate's text with variables renamed v0, v1, ... in order of appearance."""
    order = T.var_order(src + tgt)
    mapping = {v: f"v{i}" for i, v in enumerate(order)}
    return " ; ".join(T.show(T.rename(r, mapping)) for r in src) + " => " + \
        " ; ".join(T.show(T.rename(r, mapping)) for r in tgt)


def by_renaming(cands: list) -> tuple[list, int]:
    seen, kept = set(), []
    for c in cands:
        key = canonical(c.source, c.target)
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return kept, len(cands) - len(kept)


def _shared_ops(src: tuple, tgt: tuple) -> bool:
    a = frozenset().union(*(T.op_nodes(r) for r in src))
    b = frozenset().union(*(T.op_nodes(r) for r in tgt))
    return bool(a & b)


def _context(src: tuple, tgt: tuple) -> bool:
    if len(src) != 1 or len(tgt) != 1:
        return False
    s, t = src[0], tgt[0]
    if T.is_var(s) or T.is_var(t) or T.is_get(s) or T.is_get(t) or s[0] != t[0] or len(s) != len(t):
        return False
    return sum(a != b for a, b in zip(s[1:], t[1:])) == 1


def by_common_subgraph(cands: list) -> tuple[list, int]:
    kept = [c for c in cands if not _shared_ops(c.source, c.target) and not _context(c.source, c.target)]
    return kept, len(cands) - len(kept)


def _commute_canonical(domain: Domain, t):
    if T.is_var(t):
        return t
    if T.is_get(t):
        return ("get", _commute_canonical(domain, t[1]), t[2])
    args = tuple(_commute_canonical(domain, c) for c in t[1:])
    if domain.template(t[0]).commutative:
        args = tuple(sorted(args, key=repr))
    return (t[0],) + args


def by_commutation(domain: Domain, cands: list) -> tuple[list, int]:
    kept = []
    for c in cands:
        a = tuple(_commute_canonical(domain, r) for r in c.source)
        b = tuple(_commute_canonical(domain, r) for r in c.target)
        if a != b:
            kept.append(c)
    return kept, len(cands) - len(kept)


def _instance_of(general, specific) -> bool:
    binding: dict = {}
    if len(general.source) != len(specific.source) or len(general.target) != len(specific.target):
        return False
    pairs = list(zip(general.source, specific.source)) + list(zip(general.target, specific.target))
    return all(T.match(p, s, binding) for p, s in pairs)


def _root_key(c):
    r = c.source[0]
    while T.is_get(r):
        r = r[1]
    return (len(c.source), len(c.target), r[0])


def by_subsumption(cands: list) -> tuple[list, int]:
    """Drops candidates that are instances of another (strictly more general or earlier
    equal) candidate of the list."""
    buckets: dict = {}
    for i, c in enumerate(cands):
        buckets.setdefault(_root_key(c), []).append(i)
    drop = set()
    for idx in buckets.values():
        sizes = {i: T.roots_size(cands[i].source) + T.roots_size(cands[i].target) for i in idx}
        for i in idx:
            for j in idx:
                if i == j or j in drop or sizes[j] > sizes[i]:
                    continue
                if _instance_of(cands[j], cands[i]):
                    # equal-size mutual instances are renamings: keep the earlier one
                    if sizes[j] == sizes[i] and j > i and _instance_of(cands[i], cands[j]):
                        continue
                    drop.add(i)
                    break
    kept = [c for i, c in enumerate(cands) if i not in drop]
    return kept, len(drop)


def by_degeneracy(domain: Domain, cands: list, evaluator) -> tuple[list, int]:
    """Drops candidates that can never pay on a deployed graph or are padded forms:
    sources computed from weights only (folded before run time, so free already), sides
    with an operator reading one tensor twice (Concat(x, x): instances, not patterns of
    real graphs), targets with more than one run-time operator more than the source
    (a - b => Sub(Add(a, a), ...)), and sides holding a proper subgraph equal to the
    whole side (Relu(Relu(y)) stands for Relu(y))."""
    from taso_env.rules.generator.enumeration import fingerprint

    def weight_only(roots):
        return all(domain.variables[v][1] for r in roots for v in T.variables(r))

    def doubled(roots):
        return any(not T.is_var(n) and len(set(n[1:])) < len(n) - 1
                   for r in roots for n in T.op_nodes(r))

    def padded(roots):
        for r in roots:
            if T.is_get(r) or T.is_var(r):
                continue
            whole = fingerprint(evaluator(r))
            for u in T.subterms(r) - {r}:
                out = evaluator(u)
                if out is not None and len(out) == 1 and fingerprint(out) == whole:
                    return True
        return False

    def runtime_ops(roots):
        nodes = frozenset().union(*(T.op_nodes(r) for r in roots))
        return sum(1 for n in nodes if not weight_only((n,)))

    kept = [c for c in cands if not weight_only(c.source) and not doubled(c.source) and not doubled(c.target)
            and runtime_ops(c.target) <= runtime_ops(c.source) + 1
            and not padded(c.source) and not padded(c.target)]
    return kept, len(cands) - len(kept)
