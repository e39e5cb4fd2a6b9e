"""Operator graphs of the generator as hash-consed terms.

A term is a nested tuple, so equal graphs are equal values and shared subgraphs are
shared (a DAG):

    ("v", "x")                      a free variable (an input or weight of the rule)
    ("Add", t1, t2)                 an operator template of the domain applied to terms
    ("get", t, i)                   output i of a multi-output term (a Split)

The template name (first element) names an operator *with its attributes*
(`vocabulary.Template`), e.g. "Concat1" is Concat on axis 1.
"""

from __future__ import annotations

from functools import cache

Term = tuple


def var(name: str) -> Term:
    return ("v", name)


def is_var(t: Term) -> bool:
    return t[0] == "v"


def is_get(t: Term) -> bool:
    return t[0] == "get"


def children(t: Term) -> tuple:
    if is_var(t):
        return ()
    if is_get(t):
        return (t[1],)
    return t[1:]


@cache
def op_nodes(t: Term) -> frozenset:
    """The operator nodes of the DAG under `t` (a "get" is not an operator)."""
    if is_var(t):
        return frozenset()
    if is_get(t):
        return op_nodes(t[1])
    out = {t}
    for c in t[1:]:
        out |= op_nodes(c)
    return frozenset(out)


def size(t: Term) -> int:
    return len(op_nodes(t))


def roots_size(roots) -> int:
    nodes = frozenset()
    for r in roots:
        nodes |= op_nodes(r)
    return len(nodes)


@cache
def variables(t: Term) -> frozenset:
    if is_var(t):
        return frozenset([t[1]])
    out = frozenset()
    for c in children(t):
        out |= variables(c)
    return out


def subterms(t: Term) -> set:
    """Every term under `t`, `t` included (variables and gets too)."""
    out, stack = set(), [t]
    while stack:
        u = stack.pop()
        if u in out:
            continue
        out.add(u)
        stack.extend(children(u))
    return out


def rename(t: Term, mapping: dict) -> Term:
    if is_var(t):
        return ("v", mapping.get(t[1], t[1]))
    if is_get(t):
        return ("get", rename(t[1], mapping), t[2])
    return (t[0],) + tuple(rename(c, mapping) for c in t[1:])


def substitute(t: Term, mapping: dict) -> Term:
    """Replaces variables by terms."""
    if is_var(t):
        return mapping.get(t[1], t)
    if is_get(t):
        return ("get", substitute(t[1], mapping), t[2])
    return (t[0],) + tuple(substitute(c, mapping) for c in t[1:])


def show(t: Term) -> str:
    """Readable form: Add(Mul(a, b), c); split outputs as Split1(x)[0]."""
    if is_var(t):
        return t[1]
    if is_get(t):
        return f"{show(t[1])}[{t[2]}]"
    return f"{t[0]}({', '.join(show(c) for c in t[1:])})"


def var_order(roots) -> list[str]:
    """Variables in first-occurrence order of a depth-first walk (deterministic)."""
    seen: list[str] = []

    def walk(t):
        if is_var(t):
            if t[1] not in seen:
                seen.append(t[1])
            return
        for c in children(t):
            walk(c)
    for r in roots:
        walk(r)
    return seen


def match(pattern: Term, t: Term, binding: dict) -> bool:
    """One-way matching of `pattern` (its variables bind to terms of `t`)."""
    if is_var(pattern):
        name = pattern[1]
        if name in binding:
            return binding[name] == t
        binding[name] = t
        return True
    if is_var(t) or pattern[0] != t[0] or len(pattern) != len(t):
        return False
    if is_get(pattern):
        return pattern[2] == t[2] and match(pattern[1], t[1], binding)
    return all(match(p, u, binding) for p, u in zip(pattern[1:], t[1:]))
