"""Formal verification of element-wise substitutions with z3 (as TASO did with operator
axioms).

Element-wise rules hold for all shapes when they hold pointwise (broadcasting indexes
every variable the same way on both sides, and the engine only applies a rule whose
target has the source's output shapes), so a rule is proved by proving the scalar
identity over the reals: Add, Sub, Mul and Div are real arithmetic (division is
guarded: a proof must hold wherever every divisor is non-zero, and no divisor may
become zero where the source had none), Relu is max(x, 0), and Tanh and Sigmoid are
uninterpreted functions with their axioms (odd / complementary symmetry, ranges,
monotonicity is not needed). An identity that z3 refutes with only interpreted
operators is rejected; one it cannot decide stays numerically verified only.
"""

from __future__ import annotations

from taso_env.rules.generator import terms as T


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
