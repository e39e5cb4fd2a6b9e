"""A candidate substitution as a rule of the JSON format (taso_env/rules/README.md).

Source and target operators are named s0, s1, ... and t0, t1, ... in depth-first
post-order; variables keep their domain names. Attributes become patterns: a draw
value `K1` is the binding "$K1", except symbols the rule is specialised on, which
become the fingerprint draw's literals. Outside element-wise domains, every source
variable gets a shape pattern over the same bindings, so the rule matches exactly the
shapes it was verified on, up to the sizes. Examples are the verification draws.
"""

from __future__ import annotations

import hashlib
import json

from taso_env.rules.generator import terms as T
from taso_env.rules.generator.vocabulary import Domain


def _post_order(roots) -> list:
    order, seen = [], set()

    def walk(t):
        if T.is_var(t) or t in seen:
            return
        if T.is_get(t):
            walk(t[1])
            return
        for c in t[1:]:
            walk(c)
        seen.add(t)
        order.append(t)
    for r in roots:
        walk(r)
    return order


def _attr_pattern(value, fixed: dict):
    """A template attribute as a JSON pattern/expression."""
    if isinstance(value, str):
        return fixed[value] if value in fixed else "$" + value
    if isinstance(value, list):
        out = []
        for e in value:
            if isinstance(e, str) and e in fixed:
                v = fixed[e]
                out.extend(v) if isinstance(v, list) else out.append(v)
            else:
                out.append("$" + e if isinstance(e, str) else e)
        return out
    return value


def _names_in(value) -> set:
    if isinstance(value, str):
        return {value[1:]} if value.startswith("$") else set()
    if isinstance(value, list):
        return set().union(*(_names_in(v) for v in value)) if value else set()
    return set()


def _pattern(domain: Domain, roots, prefix: str, fixed: dict):
    nodes = _post_order(roots)
    names = {n: f"{prefix}{i}" for i, n in enumerate(nodes)}

    def ref(t):
        if T.is_var(t):
            return t[1]
        if T.is_get(t):
            return f"{names[t[1]]}:{t[2]}"
        return names[t]
    ops = []
    for n in nodes:
        tmpl = domain.template(n[0])
        op = {"name": names[n], "type": tmpl.op, "inputs": [ref(c) for c in n[1:]]}
        if tmpl.attrs:
            op["attrs"] = {k: _attr_pattern(v, fixed) for k, v in tmpl.attrs.items()}
        ops.append(op)
    return {"ops": ops, "outputs": [ref(r) for r in roots]}


def fixed_values(domain: Domain, level: tuple) -> dict:
    d0 = domain.draw(0)
    return {g: d0[g] for g in level}


def to_spec(domain: Domain, cand, level: tuple, draws: list[dict]) -> dict | None:
    """The rule spec (without id), or None if the target needs a value the source does
    not bind."""
    fixed = fixed_values(domain, level)
    source = _pattern(domain, cand.source, "s", fixed)
    target = _pattern(domain, cand.target, "t", fixed)
    src_vars = T.var_order(cand.source)
    shapes = {}
    if not domain.pointwise:
        for v in src_vars:
            dims = domain.variables[v][0]
            shapes[v] = [fixed[a] if a in fixed else ("$" + a if isinstance(a, str) else a) for a in dims]
    bound = set()
    for op in source["ops"]:
        for val in op.get("attrs", {}).values():
            bound |= _names_in(val)
    for pat in shapes.values():
        bound |= _names_in(pat)
    for op in target["ops"]:
        for val in op.get("attrs", {}).values():
            if not _names_in(val) <= bound:
                return None
    body = {"source": source, "target": target}
    if shapes:
        body["shapes"] = shapes
    digest = hashlib.sha1(json.dumps(body, sort_keys=True).encode()).hexdigest()[:10]
    weights = [v for v in src_vars if domain.variables[v][1]]
    examples = []
    for d in draws:
        ex = {v: domain.shape(v, d) for v in src_vars}
        for name in sorted(bound):
            if name in d:
                ex["$" + name] = d[name]
        if weights:
            ex["weights"] = weights
        examples.append(ex)
    doc = ("; ".join(T.show(r) for r in cand.source) + "  =>  " + "; ".join(T.show(r) for r in cand.target))
    return {"name": f"gen_{domain.name}_{digest}", "doc": doc, **body, "examples": examples}
