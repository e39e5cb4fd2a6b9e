"""Numerical verification of rules: build the source pattern from a rule example as a
real graph, find the rule's candidate there with the C++ matcher, apply it, and check
with the numpy reference executor that the rewritten graph computes the same outputs
(and that the candidate's cost delta is the true change of the graph cost).

This exercises exactly what ships: the JSON rule, the C++ matcher and applier, and the
reference numerics of every op involved.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from taso_env.engine import reference
from taso_env.engine.builder import GraphBuilder
from taso_env.engine.graph import Graph
from taso_env.rules import RuleSet


class RuleVerificationError(AssertionError):
    """A rule failed verification (names the rule, the example and what differed)."""


class RuleDoesNotFireError(RuleVerificationError):
    """The rule finds no candidate on its own source pattern (its constraints or shape
    checks refuse the example, or its target does not build with the source's output
    types)."""


class RuleCostDeltaError(RuleVerificationError):
    """The candidate's cost delta is not the true change of the graph cost."""


class RuleOutputMismatchError(RuleVerificationError):
    """The rewritten graph computes different outputs (the numeric check failed)."""


#: magnitude range of every float weight value `verify_rule` draws: of order 1, so
#: that outputs leave the near-linear region of the activations (a fused Tanh or Gelu
#: where the rule has none differs from the identity there by far more than the
#: tolerance), and bounded away from 0, so that a weight used as a divisor is safe
WEIGHT_MAGNITUDE = (0.5, 1.5)


def verification_weights(graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Values for every weight without data: floats of magnitude uniform in
    `WEIGHT_MAGNITUDE` with a random sign, BatchNorm variances positive; other weights
    (integer indices) as `Graph.random_weights` draws them.

    `Graph.random_weights` scales its draws for deep nets (N(0, 1/fan_in) kernels,
    N(0, 0.05^2) vectors); on a rule's few ops such small values keep every
    activation near its linear region and hide a wrong activation or op.
    """
    rng = np.random.default_rng(seed)
    positive = {graph.ops[o.inputs[4].op].name for o in graph.ops if o.type == "BatchNorm"}
    out = graph.random_weights(seed)
    for name, value in out.items():
        if not np.issubdtype(value.dtype, np.floating):
            continue
        magnitude = rng.uniform(*WEIGHT_MAGNITUDE, size=value.shape)
        sign = 1.0 if name in positive else rng.choice((-1.0, 1.0), size=value.shape)
        out[name] = (sign * magnitude).astype(value.dtype)
    return out


@dataclass(frozen=True)
class Instance:
    graph: Graph
    source_ops: frozenset[int]


def _draw_dims(example: dict, rng: np.random.Generator) -> dict[str, int]:
    dims: dict[str, int] = {}
    for name, (lo, hi) in example.get("dims", {}).items():
        lo, hi = (dims[v] if isinstance(v, str) else v for v in (lo, hi))
        dims[name] = int(rng.integers(lo, hi + 1))
    for name, parts in example.get("derived", {}).items():
        dims[name] = sum(dims[p] for p in parts)
    return dims


def _resolve(value, dims: dict[str, int]):
    if isinstance(value, str):
        return dims[value]
    if isinstance(value, list):
        return [_resolve(v, dims) for v in value]
    return value


def _source_attrs(pattern_attrs: dict, example: dict, dims: dict[str, int]) -> dict:
    attrs = {}
    for name, expr in pattern_attrs.items():
        if isinstance(expr, str):
            if expr == "_" or expr not in example:
                continue  # free: the op's default
            attrs[name] = _resolve(example[expr], dims)
        elif isinstance(expr, list) and any(isinstance(e, str) for e in expr):
            attrs[name] = [_resolve(example[e], dims) if isinstance(e, str) else e for e in expr]
        else:
            attrs[name] = expr
    return attrs


def instantiate(spec: dict, example: dict, seed: int) -> Instance:
    """Builds a graph holding exactly the rule's source pattern, per the example."""
    rng = np.random.default_rng(seed)
    dims = _draw_dims(example, rng)
    b = GraphBuilder(f"verify_{spec['name']}")  # no weight data: feeds come from verification_weights
    tensors: dict[str, object] = {}
    weights = set(example.get("weights", []))
    source_ids = []
    for p in spec["source"]["ops"]:
        inputs = []
        for ref in p.get("inputs", []):
            base, _, index = ref.partition(":")
            if base in tensors and isinstance(tensors[base], list):
                inputs.append(tensors[base][int(index or 0)])
                continue
            if base in tensors:
                inputs.append(tensors[base])
                continue
            if ref not in example:
                if ref.endswith("?"):
                    continue  # optional and absent in this example
                raise RuleVerificationError(f"rule {spec['name']!r}: example lacks a shape for {ref!r}")
            shape = _resolve(example[ref], dims)
            t = b.weight(ref.rstrip("?"), shape) if ref in weights else b.input(ref.rstrip("?"), shape)
            tensors[base] = t
            inputs.append(t)
        attrs = _source_attrs(p.get("attrs", {}), example, dims)
        attrs.update(example.get("attrs", {}).get(p["name"], {}))
        out = b.op(p["type"], inputs, name=p["name"], **attrs)
        tensors[p["name"]] = out
        source_ids.append((out[0] if isinstance(out, list) else out).ref.op)
    for i, ref in enumerate(spec["source"]["outputs"]):
        base, _, index = ref.partition(":")
        t = tensors[base]
        b.output(t[int(index or 0)] if isinstance(t, list) else t, f"out{i}")
    return Instance(b.build(), frozenset(source_ids))


def rewrite_example(rules: RuleSet, rule_id: int, example: dict, seed: int) -> tuple[Graph, Graph, object]:
    """The example's source-pattern graph, the graph the rule rewrites it into, and the
    candidate applied.

    Raises:
        RuleDoesNotFireError: the rule finds no candidate on its own source pattern.
    """
    spec = rules.specs[rule_id]
    inst = instantiate(spec, example, seed)
    g = inst.graph
    found = [c for c in g.candidates(rule_id, rules=rules) if set(c.location) == inst.source_ops]
    if not found:
        raise RuleDoesNotFireError(f"rule {rule_id} {spec['name']!r}, seed {seed}: "
                                   "the rule does not fire on its own source pattern")
    return g, g.apply(found[0], rules=rules), found[0]


def verify_rule(rules: RuleSet, rule_id: int, seeds=(0, 1, 2), rtol: float = 1e-4) -> int:
    """Verifies one rule on every example and seed; returns the number of checks.

    Each check feeds the source graph and its rewrite the same values: inputs
    ~ N(0, 1) (`Graph.random_inputs`), weights from `verification_weights`; every
    output must agree within 1e-6 + `rtol` times its largest magnitude.

    Raises:
        RuleVerificationError: no example to verify with.
        RuleDoesNotFireError: the rule does not fire on its own source pattern.
        RuleCostDeltaError: the candidate's cost delta is wrong.
        RuleOutputMismatchError: the outputs differ.
    """
    spec = rules.specs[rule_id]
    if not spec.get("examples"):
        raise RuleVerificationError(f"rule {spec['name']!r} has no examples to verify it with")
    checks = 0
    for k, example in enumerate(spec["examples"]):
        for seed in seeds:
            where = f"rule {rule_id} {spec['name']!r}, example {k}, seed {seed}"
            try:
                g, g2, candidate = rewrite_example(rules, rule_id, example, seed)
            except RuleDoesNotFireError:
                raise RuleDoesNotFireError(f"{where}: the rule does not fire on its own source pattern") from None
            if abs((g2.cost() - g.cost()) - candidate.cost_delta) > 1e-9:
                raise RuleCostDeltaError(f"{where}: cost delta {candidate.cost_delta} but the cost "
                                         f"changed by {g2.cost() - g.cost()}")
            feeds = {**g.random_inputs(seed), **verification_weights(g, seed + 100)}
            before, after = reference.run(g, feeds), reference.run(g2, feeds)
            for name, want in before.items():
                got = after[name]
                scale = float(np.abs(want).max(initial=0.0))
                if got.shape != want.shape or not np.all(np.abs(got - want) <= 1e-6 + rtol * scale):
                    raise RuleOutputMismatchError(
                        f"{where}: output {name} differs (max |diff| "
                        f"{np.abs(got - want).max() if got.shape == want.shape else 'shape'})")
            checks += 1
    return checks
