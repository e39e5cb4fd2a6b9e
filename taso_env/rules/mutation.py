"""Mutation testing of the rule verifier: wrong rules made from right ones, which
`verify_rule` must reject.

A *mutant* is a copy of a rule whose target has one change that keeps shapes (the rule
still compiles and still fires on its source pattern, so only the numeric or formal
check can tell it is wrong):

    op         an op replaced by another of the same arity and shape behaviour
               (Add/Sub/Mul/Div; Relu/Sigmoid/Tanh/Gelu/Sqrt/Exp; MaxPool2D/AvgPool2D)
    operand    two inputs of an op swapped, or one input replaced by another tensor of
               the target (a free variable or an earlier target op's output)
    attribute  a literal attribute changed: a fused activation code, an axis, a
               transpose perm or a list of sizes with two neighbours swapped, a `$name`
               of a split or reshape with two neighbours swapped
    output     two target outputs swapped, one replaced by another tensor, or one
               passed through a Relu (wrong wherever it is negative; for targets that
               are a bare free variable, the only change that keeps shapes)

`mutants(spec)` lists the candidates in a fixed order; `judge(mutant)` says what became
of one:

    rejected              verify_rule raised RuleOutputMismatchError (or
                          RuleCostDeltaError): the verifier caught it
    equivalent            verify_rule accepted it and it is in fact right: z3 proves it
                          on the example shapes (`axioms.prove_rule`), or, where z3
                          cannot decide or the example is too large for it
                          (`Z3_MAX_ELEMENTS`), it also passes on `EXTRA_SEEDS` more
                          value draws (say, swapped operands of a commutative op)
    survived              verify_rule accepted a wrong mutant (z3 or the extra draws
                          show it wrong): a hole in the verifier
    not_shape_preserving  the change breaks the shapes or the format (the rule does
                          not compile or does not fire): not a test of the verifier

Equivalent mutants are reported with the others (`MutantResult`), never dropped.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from taso_env.errors import TasoEnvError
from taso_env.rules import RuleFormatError, build_rule_set
from taso_env.rules.sets import renumbered
from taso_env.rules.verify import (
    RuleCostDeltaError,
    RuleDoesNotFireError,
    RuleOutputMismatchError,
    verify_rule,
)

#: ops interchangeable without changing shapes (same arity, same output shape rule)
SAME_SHAPE_OPS = (("Add", "Sub", "Mul", "Div"),
                  ("Relu", "Sigmoid", "Tanh", "Gelu", "Sqrt", "Exp"),
                  ("MaxPool2D", "AvgPool2D"))
ACTIVATION_CODES = (0, 1, 2, 3)
#: value seeds of the equivalence check of a mutant that z3 cannot decide
EXTRA_SEEDS = tuple(range(3, 13))
#: z3 is not tried on mutants computing more tensor elements than this (see
#: `axioms.prove_rule`), nor longer than Z3_TIMEOUT_MS; the extra draws decide those
Z3_MAX_ELEMENTS = 1500
Z3_TIMEOUT_MS = 3000

REJECTED, EQUIVALENT, SURVIVED, NOT_SHAPE_PRESERVING = "rejected", "equivalent", "survived", "not_shape_preserving"
VERDICTS = (REJECTED, EQUIVALENT, SURVIVED, NOT_SHAPE_PRESERVING)


@dataclass(frozen=True)
class Mutant:
    """A rule with one change to its target.

    Attributes:
        rule_id: the id of the rule it was made from.
        family: `family_of` the rule.
        kind: "op", "operand", "attribute" or "output".
        change: what changed, e.g. "t0: Add -> Sub" or "t1 input 0: a -> c".
        spec: the mutated rule spec (same id and name as the rule).
    """

    rule_id: int
    family: str
    kind: str
    change: str
    spec: dict

    @property
    def key(self) -> str:
        """Identifies the mutant: the rule's name and the change."""
        return f"{self.spec['name']}: {self.change}"


@dataclass(frozen=True)
class MutantResult:
    """What became of a mutant: one of VERDICTS, the check that decided, and its message."""

    mutant: Mutant
    verdict: str
    decided_by: str
    detail: str


def family_of(spec: dict) -> str:
    """A hand rule's family (its file), or "generated/<domain>/<kind>" for a generated one."""
    if spec.get("family") == "generated":
        p = spec.get("provenance", {})
        return f"generated/{p.get('domain')}/{p.get('kind')}"
    return spec["family"]


def _copy(spec: dict) -> dict:
    target = {"ops": [dict(o, inputs=list(o.get("inputs", [])), attrs=dict(o.get("attrs", {})))
                      for o in spec["target"].get("ops", [])],
              "outputs": list(spec["target"]["outputs"])}
    for o in target["ops"]:
        if not o["attrs"]:
            del o["attrs"]
    return dict(spec, target=target)


def _free_variables(spec: dict) -> list[str]:
    """The source's free variables in first-use order (optional ones left out)."""
    ops = {o["name"] for o in spec["source"]["ops"]}
    out: list[str] = []
    for o in spec["source"]["ops"]:
        for ref in o.get("inputs", []):
            if ref.partition(":")[0] not in ops and not ref.endswith("?") and ref not in out:
                out.append(ref)
    return out


def _tensors_before(spec: dict, position: int) -> list[str]:
    """Tensors a target op at `position` may read: free variables and earlier outputs."""
    out = _free_variables(spec)
    for o in spec["target"]["ops"][:position]:
        n_out = len(o["attrs"]["split"]) if o["type"] == "Split" and isinstance(
            o.get("attrs", {}).get("split"), list) else 1
        out += [o["name"]] if n_out == 1 else [f"{o['name']}:{i}" for i in range(n_out)]
    return out


def _op_mutants(spec: dict) -> Iterator[tuple[str, str, dict]]:
    for j, op in enumerate(spec["target"]["ops"]):
        for group in SAME_SHAPE_OPS:
            if op["type"] in group:
                for other in group:
                    if other != op["type"]:
                        m = _copy(spec)
                        m["target"]["ops"][j]["type"] = other
                        yield "op", f"{op['name']}: {op['type']} -> {other}", m


def _operand_mutants(spec: dict) -> Iterator[tuple[str, str, dict]]:
    for j, op in enumerate(spec["target"]["ops"]):
        inputs = op.get("inputs", [])
        for a, b in itertools.combinations(range(len(inputs)), 2):
            if inputs[a] != inputs[b] and not (inputs[a].endswith("?") or inputs[b].endswith("?")):
                m = _copy(spec)
                ins = m["target"]["ops"][j]["inputs"]
                ins[a], ins[b] = ins[b], ins[a]
                yield "operand", f"{op['name']} inputs {a} <-> {b} ({inputs[a]}, {inputs[b]})", m
        for k, ref in enumerate(inputs):
            if ref.endswith("?"):
                continue
            for other in _tensors_before(spec, j):
                if other != ref:
                    m = _copy(spec)
                    m["target"]["ops"][j]["inputs"][k] = other
                    yield "operand", f"{op['name']} input {k}: {ref} -> {other}", m


def _attribute_values(name: str, value) -> list:
    """Changed values of one attribute (none for expressions and plain bindings)."""
    if isinstance(value, bool) or isinstance(value, dict):
        return []
    if isinstance(value, int):
        if name == "activation":
            return [c for c in ACTIVATION_CODES if c != value]
        if name == "axis":
            return [a for a in (value - 1, value + 1) if a >= 0]
        return []
    if isinstance(value, list) and len(value) >= 2:
        out = []
        for i in range(len(value) - 1):  # neighbours swapped (perms, split sizes, shapes)
            swapped = list(value)
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
            if swapped != value and swapped not in out:
                out.append(swapped)
        return out
    return []


def _attribute_mutants(spec: dict) -> Iterator[tuple[str, str, dict]]:
    for j, op in enumerate(spec["target"]["ops"]):
        for name, value in op.get("attrs", {}).items():
            for new in _attribute_values(name, value):
                m = _copy(spec)
                m["target"]["ops"][j]["attrs"][name] = new
                yield "attribute", f"{op['name']} {name}: {value} -> {new}", m


def _output_mutants(spec: dict) -> Iterator[tuple[str, str, dict]]:
    outs = spec["target"]["outputs"]
    for a, b in itertools.combinations(range(len(outs)), 2):
        if outs[a] != outs[b]:
            m = _copy(spec)
            m["target"]["outputs"][a], m["target"]["outputs"][b] = outs[b], outs[a]
            yield "output", f"outputs {a} <-> {b} ({outs[a]}, {outs[b]})", m
    candidates = _tensors_before(spec, len(spec["target"]["ops"]))
    for a, ref in enumerate(outs):
        for other in candidates:
            if other != ref:
                m = _copy(spec)
                m["target"]["outputs"][a] = other
                yield "output", f"output {a}: {ref} -> {other}", m
    for a, ref in enumerate(outs):
        m = _copy(spec)
        m["target"]["ops"].append({"name": "mutant_relu", "type": "Relu", "inputs": [ref]})
        m["target"]["outputs"][a] = "mutant_relu"
        yield "output", f"output {a}: {ref} -> Relu({ref})", m


def mutants(spec: dict) -> list[Mutant]:
    """Every candidate mutant of the rule's target, in a fixed order (op, operand,
    attribute, output changes), without duplicates. Candidates are not yet checked
    for shapes: `judge` sorts out those that break them."""
    out, seen = [], set()
    family = family_of(spec)
    for gen in (_op_mutants, _operand_mutants, _attribute_mutants, _output_mutants):
        for kind, change, m in gen(spec):
            body = repr((m["target"]["ops"], m["target"]["outputs"]))
            if body in seen or m["target"] == _copy(spec)["target"]:
                continue
            seen.add(body)
            out.append(Mutant(spec["id"], family, kind, change, m))
    return out


def judge(mutant: Mutant, seeds=(0, 1, 2)) -> MutantResult:
    """Runs `verify_rule` on the mutant (with `seeds`), and where it accepts, decides
    whether the mutant is equivalent (z3, else `EXTRA_SEEDS` more draws) or survived."""
    from taso_env.rules.generator import axioms

    def result(verdict, by, detail):
        return MutantResult(mutant, verdict, by, str(detail).splitlines()[0][:300])

    try:
        rules = build_rule_set(renumbered([mutant.spec]))
    except RuleFormatError as e:
        return result(NOT_SHAPE_PRESERVING, "format", e)
    try:
        verify_rule(rules, 0, seeds=seeds)
    except RuleOutputMismatchError as e:
        return result(REJECTED, "numeric", e)
    except RuleCostDeltaError as e:
        return result(REJECTED, "cost", e)
    except (RuleDoesNotFireError, TasoEnvError, ValueError) as e:
        return result(NOT_SHAPE_PRESERVING, "shapes", e)
    try:
        formal = axioms.prove_rule(rules, 0, timeout_ms=Z3_TIMEOUT_MS, max_elements=Z3_MAX_ELEMENTS)
    except (RuleDoesNotFireError, TasoEnvError, ValueError) as e:  # a later example's shapes
        return result(NOT_SHAPE_PRESERVING, "shapes", e)
    if formal == axioms.PROVED_ON_EXAMPLE_SHAPES:
        return result(EQUIVALENT, "z3", "z3 proves it on the example shapes")
    if formal == axioms.REFUTED:
        return result(SURVIVED, "z3", "verify_rule accepted it; z3 finds values where it is wrong")
    try:
        verify_rule(rules, 0, seeds=EXTRA_SEEDS)
    except (RuleOutputMismatchError, RuleCostDeltaError) as e:
        return result(SURVIVED, "numeric_extra_seeds", e)
    return result(EQUIVALENT, "numeric_extra_seeds",
                  f"z3 undecided; equal on {len(EXTRA_SEEDS)} more value draws")
