"""Formal verification of substitutions with z3 (as TASO did with operator axioms).

Two provers. `prove` proves element-wise substitutions for every shape; `prove_rule`
proves any rule the engine can apply on the shapes of its examples (below).

Element-wise rules hold for all shapes when they hold pointwise (broadcasting indexes
every variable the same way on both sides, and the engine only applies a rule whose
target has the source's output shapes), so a rule is proved by proving the scalar
identity over the reals: Add, Sub, Mul and Div are real arithmetic (division is
guarded: a proof must hold wherever every divisor is non-zero, and no divisor may
become zero where the source had none), Relu is max(x, 0), and Tanh and Sigmoid are
uninterpreted functions with axioms (tanh odd, sigmoid(-x) = 1 - sigmoid(x), their
ranges). An identity that z3 refutes with only interpreted
operators is rejected; one it cannot decide stays numerically verified only.

`prove_rule` covers the rules beyond element-wise algebra (MatMul, Conv2D, Concat,
Split, Transpose, Reshape, pooling, ...): for each example of the rule it builds the
source pattern, applies the rule with the engine (matcher and applier, as numeric
verification does), executes both graphs on tensors of z3 real variables
(`tensor_semantics`: the reference operators on z3 terms) and proves every output
element equal for all real input values. The proof is exact but bounded: it holds for
the example shapes (the four draws of a generated rule, covering the geometries it is
verified on), not for every shape; `PROVED_ON_EXAMPLE_SHAPES` says so in a rule's
provenance. Shape-general proofs of these rules would need TASO's first-order operator
axioms with symbolic shapes.
"""

from __future__ import annotations

import time

import numpy as np

from taso_env.rules.generator import terms as T
from taso_env.rules.generator.tensor_semantics import NoSemanticsError, SymbolicExecution

#: `prove_rule`'s verdicts ("refuted": real input values where the outputs differ;
#: "target_may_divide_by_zero": equal wherever both sides are defined, but the target
#: divides by a value that can be zero where the source is defined; "unknown":
#: undecided, or an op without a z3 encoding)
PROVED_ON_EXAMPLE_SHAPES = "proved_on_example_shapes"
REFUTED = "refuted"
TARGET_MAY_DIVIDE_BY_ZERO = "target_may_divide_by_zero"
UNKNOWN = "unknown"


def prove(src, tgt, timeout_ms: int = 3000) -> str:
    """'proved', 'refuted' (a real counterexample), or 'unknown'."""
    import z3

    xs: dict = {}
    tanh = z3.Function("tanh", z3.RealSort(), z3.RealSort())
    sigm = z3.Function("sigmoid", z3.RealSort(), z3.RealSort())
    divisors: list = []
    uses_uf = [False]

    def enc(t):
        if T.is_var(t):
            return xs.setdefault(t[1], z3.Real(t[1]))
        args = [enc(c) for c in t[1:]]
        op = t[0]
        if op == "Add":
            return args[0] + args[1]
        if op == "Sub":
            return args[0] - args[1]
        if op == "Mul":
            return args[0] * args[1]
        if op == "Div":
            divisors.append(args[1])
            return args[0] / args[1]
        if op == "Relu":
            return z3.If(args[0] > 0, args[0], z3.RealVal(0))
        if op == "Tanh":
            uses_uf[0] = True
            return tanh(args[0])
        if op == "Sigmoid":
            uses_uf[0] = True
            return sigm(args[0])
        raise ValueError(f"no axioms for {op}")

    try:
        a = enc(src)
        n_src_div = len(divisors)
        b = enc(tgt)
    except ValueError:
        return "unknown"
    s = z3.Solver()
    s.set("timeout", timeout_ms)
    if uses_uf[0]:
        y = z3.Real("_y")
        s.add(z3.ForAll([y], tanh(-y) == -tanh(y)))
        s.add(z3.ForAll([y], sigm(-y) == 1 - sigm(y)))
        s.add(z3.ForAll([y], z3.And(tanh(y) > -1, tanh(y) < 1, sigm(y) > 0, sigm(y) < 1)))
    src_ok = [d != 0 for d in divisors[:n_src_div]]
    tgt_ok = [d != 0 for d in divisors[n_src_div:]]
    # where the source is defined, the target must be defined and equal
    s.add(z3.And(*src_ok) if src_ok else z3.BoolVal(True))
    s.add(z3.Not(z3.And(*(tgt_ok + [a == b]))))
    r = s.check()
    if r == z3.unsat:
        return "proved"
    if r == z3.sat and not uses_uf[0]:
        return "refuted"
    return "unknown"


def _function_axioms(functions: dict) -> list:
    """`prove_rule`'s properties of the uninterpreted functions used: `prove`'s, and tanh
    has the sign of its argument (none for Sqrt, Erf, Exp, Gelu: congruence alone)."""
    import z3

    y = z3.Real("_y")
    out = []
    if "Tanh" in functions:
        tanh = functions["Tanh"]
        out += [z3.ForAll([y], tanh(-y) == -tanh(y)), z3.ForAll([y], z3.And(tanh(y) > -1, tanh(y) < 1)),
                z3.ForAll([y], z3.Implies(y > 0, tanh(y) > 0))]
    if "Sigmoid" in functions:
        sigm = functions["Sigmoid"]
        out += [z3.ForAll([y], sigm(-y) == 1 - sigm(y)), z3.ForAll([y], z3.And(sigm(y) > 0, sigm(y) < 1))]
    return out


def _factors(e) -> list:
    import z3

    if z3.is_mul(e):
        return [f for c in e.children() for f in _factors(c)]
    return [e]


def _cancel_inverses(e, inverse):
    """`e` (a sum of monomials) with each `d * inverse(d)` pair of a monomial replaced
    by 1: sound wherever the divisors are non-zero, which a proof assumes (source) or
    proves (target)."""
    import z3

    if z3.is_add(e):
        return z3.Sum(*[_cancel_inverses(c, inverse) for c in e.children()])
    if not z3.is_mul(e):
        return e
    factors = _factors(e)
    inverses = [f for f in factors if z3.is_app(f) and f.decl().eq(inverse)]
    for inv in inverses:
        divisor = inv.arg(0)
        for i, f in enumerate(factors):
            if f.eq(divisor):
                factors.pop(i)
                factors.remove(inv)
                break
    if not factors:
        return z3.RealVal(1)
    return factors[0] if len(factors) == 1 else z3.Product(*factors)


def _difference_is_zero(a, b, inverse) -> bool:
    """Whether a - b normalises to 0 as a polynomial in the variables and inverses."""
    import z3

    if a.eq(b):
        return True
    d = z3.simplify(a - b, som=True)
    if z3.is_rational_value(d) and d.eq(z3.RealVal(0)):
        return True
    d = z3.simplify(_cancel_inverses(d, inverse), som=True)
    return z3.is_rational_value(d) and d.eq(z3.RealVal(0))


def prove_outputs_equal(before: dict, after: dict, execution: SymbolicExecution, n_source_divisors: int,
                        timeout_ms: int = 20000) -> str:
    """Proves that two graphs' symbolic outputs (`SymbolicExecution.run`) are equal
    element by element wherever the source's divisors are non-zero, and that the
    target's divisors are non-zero there too (else TARGET_MAY_DIVIDE_BY_ZERO). Elements
    that normalise to the same polynomial (in the variables and the divisors' inverses)
    need no solver; the rest go to the solver one element at a time (`timeout_ms` for
    them all)."""
    import z3

    residual = []
    for name, want in before.items():
        got = after[name]
        if got.shape != want.shape:
            return REFUTED
        for a, b in zip(want.flat, got.flat):
            if not _difference_is_zero(a, b, execution.inverse):
                residual.append(a != b)
    residual = list({e.get_id(): e for e in residual}.values())
    source_divisors = execution.divisors[:n_source_divisors]
    known = {z3.simplify(d, som=True).get_id() for d in source_divisors}
    new_divisors = [d for d in execution.divisors[n_source_divisors:]
                    if z3.simplify(d, som=True).get_id() not in known]

    def solve(goal) -> str:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            return UNKNOWN
        solver.set("timeout", remaining_ms)
        solver.push()
        solver.add(goal)
        r = solver.check()
        solver.pop()
        if r == z3.unsat:
            return PROVED_ON_EXAMPLE_SHAPES
        return REFUTED if r == z3.sat and not execution.uses_uninterpreted() else UNKNOWN

    deadline = time.monotonic() + timeout_ms / 1000
    solver = z3.Solver()
    solver.add(*_function_axioms(execution.functions))
    solver.add(*execution.inverse_axioms())
    solver.add(*[d != 0 for d in source_divisors])
    targets_defined = z3.And(*[d != 0 for d in new_divisors])
    for differ in residual:  # one small query per element: far faster than their disjunction
        verdict = solve(z3.And(targets_defined, differ))
        if verdict != PROVED_ON_EXAMPLE_SHAPES:
            return verdict
    if new_divisors:
        verdict = solve(z3.Not(targets_defined))
        if verdict != PROVED_ON_EXAMPLE_SHAPES:
            return TARGET_MAY_DIVIDE_BY_ZERO if verdict == REFUTED else verdict
    return PROVED_ON_EXAMPLE_SHAPES


def _elements(graph) -> int:
    return sum(int(np.prod(o.shape)) for op in graph.ops for o in op.outputs)


def prove_rule(rules, rule_id: int, timeout_ms: int = 20000, max_elements: int | None = None) -> str:
    """Proves rule `rule_id` of the RuleSet `rules` with z3 on every example's shapes
    (dims drawn with seed 0 where the example gives ranges). With `max_elements`, an
    example whose two graphs compute more tensor elements than that in all is not tried
    (UNKNOWN): the encoding grows with the elements (a 16x10x10 Conv2D takes ~15 s).

    Returns:
        PROVED_ON_EXAMPLE_SHAPES, REFUTED (z3 found real input values where the outputs
        differ), TARGET_MAY_DIVIDE_BY_ZERO or UNKNOWN (undecided within the timeout, or
        an op without a z3 encoding).

    Raises:
        RuleDoesNotFireError: the rule does not fire on one of its examples.
    """
    from taso_env.rules.verify import rewrite_example

    for example in rules.specs[rule_id]["examples"]:
        source, target, _ = rewrite_example(rules, rule_id, example, seed=0)
        if max_elements is not None and _elements(source) + _elements(target) > max_elements:
            return UNKNOWN
        execution = SymbolicExecution()
        try:
            with np.errstate(all="ignore"):
                before = execution.run(source)
                n_source_divisors = len(execution.divisors)
                after = execution.run(target)
        except NoSemanticsError:
            return UNKNOWN
        verdict = prove_outputs_equal(before, after, execution, n_source_divisors, timeout_ms)
        if verdict != PROVED_ON_EXAMPLE_SHAPES:
            return verdict
    return PROVED_ON_EXAMPLE_SHAPES
