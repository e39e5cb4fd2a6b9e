"""The generator's vocabulary: domains of operators and variables with symbolic shapes.

A *domain* is a small world the enumerator explores exhaustively: free variables with
shapes over named dimension atoms (`A`, `T`, `K1`, ...), and operator *templates*
(an op type with its attributes, which may reference atoms and attribute symbols of
the domain). The atoms and symbols take concrete values in a *draw*; the first draw
fingerprints, the others verify. Domains are chosen from the operator patterns of the
real graphs (bert/vit attention, ResNet/Inception/SqueezeNet/NASNet convolutions and
concatenations, NASRNN cells), so the rules they produce fire there.

In the emitted JSON an atom `K1` becomes the binding `"$K1"` and a symbol `p` (say
Conv2D pads) `"$p"`: a rule matches any sizes and geometries, and is verified on draws
of different ones. Where a rule holds only for the fingerprint draw's geometry (e.g.
only without a fused activation), it is emitted *specialised*: the geometry symbols of
`Domain.geometry` become the literals of the fingerprint draw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Template:
    """An operator with fixed attributes. Attribute values: literals, or strings naming
    a draw value (an atom or symbol), or lists of those."""

    name: str
    op: str
    arity: int
    attrs: dict = field(default_factory=dict)
    n_out: int = 1
    commutative: bool = False
    #: per argument: "w" weight-only terms, "a" terms reading an input, None anything
    kinds: tuple = ()
    #: per argument: the rank it must have (None: any); prunes ill-typed tuples early
    ranks: tuple = ()

    def concrete_attrs(self, draw: dict) -> dict:
        def res(v):
            if isinstance(v, str):
                return draw[v]
            if isinstance(v, list):
                out = []
                for e in v:
                    r = res(e)
                    out.extend(r) if isinstance(r, list) else out.append(r)
                return out
            return v
        return {k: res(v) for k, v in self.attrs.items()}


@dataclass(frozen=True)
class Domain:
    name: str
    doc: str
    #: variable -> (dims as atom names or ints, is_weight)
    variables: dict
    templates: tuple
    max_size: int
    #: atom -> candidate values (drawn per verification draw); the first of each is
    #: the fingerprint draw's value
    atoms: dict
    #: geometry symbol sets: each a dict symbol -> value; draw k uses set k % len
    geometries: tuple = ({},)
    #: symbols and atoms fixed when a rule is specialised
    geometry: tuple = ()
    #: element-wise only: rules hold pointwise, so no shape patterns are emitted and
    #: z3 proves them
    pointwise: bool = False
    #: cap on terms kept per size level (deterministic order), to bound the run time
    max_terms: int = 60000
    #: atoms that are products of other atoms (N = H * E for attention heads)
    products: tuple = ()
    #: weight-only operators count half towards `max_size` (see enumeration._measure_fn)
    weight_ops_half: bool = False

    def template(self, name: str) -> Template:
        for t in self.templates:
            if t.name == name:
                return t
        raise KeyError(name)

    def draw(self, k: int) -> dict:
        """Draw k: k = 0 is the fingerprint draw (first values); others are random but
        deterministic."""
        rng = np.random.default_rng(1000 + k)
        d = {a: (vals[0] if k == 0 else int(rng.choice(vals))) for a, vals in self.atoms.items()}
        for name, parts in self.products:
            d[name] = int(np.prod([d[p] for p in parts]))
        d.update(self.geometries[k % len(self.geometries)])
        return d

    def specialised_draw(self, k: int) -> dict:
        d = self.draw(k)
        d0 = self.draw(0)
        for g in self.geometry:
            d[g] = d0[g]
        return d

    def shape(self, var: str, draw: dict) -> list[int]:
        return [draw[a] if isinstance(a, str) else a for a in self.variables[var][0]]


def _ew_templates():
    return (Template("Add", "Add", 2, commutative=True), Template("Sub", "Sub", 2),
            Template("Mul", "Mul", 2, commutative=True), Template("Div", "Div", 2),
            Template("Relu", "Relu", 1), Template("Tanh", "Tanh", 1), Template("Sigmoid", "Sigmoid", 1))


_CONV_GEOMETRIES = (
    {"R": 3, "S": 3, "s": [1, 1], "p": [1, 1, 1, 1], "act": 0, "pk": [3, 3], "ps": [1, 1], "pp": [1, 1, 1, 1]},
    {"R": 1, "S": 1, "s": [1, 1], "p": [0, 0, 0, 0], "act": 1, "pk": [2, 2], "ps": [2, 2], "pp": [0, 0, 0, 0]},
    {"R": 3, "S": 3, "s": [2, 2], "p": [1, 1, 1, 1], "act": 0, "pk": [3, 3], "ps": [2, 2], "pp": [0, 0, 0, 0]},
    {"R": 1, "S": 3, "s": [1, 1], "p": [0, 1, 0, 1], "act": 1, "pk": [3, 3], "ps": [1, 1], "pp": [1, 1, 1, 1]},
)
_CONV_GEOMETRY_SYMBOLS = ("R", "S", "s", "p", "act", "pk", "ps", "pp")


def _conv(name="Conv", act="act"):
    return Template(name, "Conv2D", 3, {"strides": "s", "pads": "p", "dilations": [1, 1], "group": 1,
                                        "activation": act}, kinds=("a", "w", "w"), ranks=(4, 4, 1))


DOMAINS: tuple[Domain, ...] = (
    Domain(
        "ew", "element-wise algebra (Add Sub Mul Div, Relu Tanh Sigmoid) over three tensors",
        {"a": (("A", "B"), False), "b": (("A", "B"), False), "c": (("A", "B"), False)},
        _ew_templates(), 3, {"A": [3, 2, 4], "B": [5, 3, 6]}, pointwise=True, max_terms=30000),
    Domain(
        "scale", "scalars and biases moving through MatMul, Reshape and Transpose (attention)",
        {"x": (("A", "T", "C"), False), "w": (("C", "N"), True), "b": (("N",), True), "s": ((), True),
         "y": (("A", "T", "N"), False), "q": (("A", "H", "T", "E"), False), "k": (("A", "H", "E", "T"), False)},
        (Template("MatMul", "MatMul", 2, {"activation": 0}),
         Template("Add", "Add", 2, commutative=True),
         Template("Mul", "Mul", 2, commutative=True),
         Template("Div", "Div", 2, kinds=(None, "w")),
         Template("Heads", "Reshape", 1, {"shape": ["A", "T", "H", "E"]}),
         Template("Merge", "Reshape", 1, {"shape": ["A", "T", "N"]}),
         Template("T0213", "Transpose", 1, {"perm": [0, 2, 1, 3]}),
         Template("T0231", "Transpose", 1, {"perm": [0, 2, 3, 1]})),
        3, {"A": [1, 2], "T": [5, 3, 4], "C": [3, 5, 2], "H": [2, 3], "E": [3, 2, 4]},
        max_terms=30000, products=(("N", ("H", "E")),)),
    Domain(
        "merge", "parallel and summed Conv2Ds with biases, channel Concat/Split, Relu, pooling",
        {"x": ((1, "C", "H", "H"), False), "w1": (("K1", "C", "R", "S"), True), "b1": (("K1",), True),
         "w2": (("K2", "C", "R", "S"), True), "b2": (("K2",), True),
         "w3": (("K1", "C", "R", "S"), True), "b3": (("K1",), True)},
        (_conv(),
         Template("Cat0", "Concat", 2, {"axis": 0}, kinds=("w", "w")),
         Template("Cat1", "Concat", 2, {"axis": 1}, kinds=("a", "a")),
         Template("Split1", "Split", 1, {"axis": 1, "split": ["K1", "K2"]}, n_out=2, kinds=("a",)),
         Template("Add", "Add", 2, commutative=True),
         Template("Relu", "Relu", 1, kinds=("a",)),
         Template("MaxPool", "MaxPool2D", 1, {"kernel": "pk", "strides": "ps", "pads": "pp"}, kinds=("a",))),
        3, {"C": [3, 2, 4], "H": [7, 6, 8], "K1": [2, 3, 4], "K2": [4, 2, 5]},
        geometries=_CONV_GEOMETRIES, geometry=_CONV_GEOMETRY_SYMBOLS, weight_ops_half=True),
    Domain(
        "sumconv", "Conv2Ds of different inputs summed: one Conv2D of the channel Concat (ResNet shortcuts)",
        {"x": ((1, "C1", "H", "H"), False), "y": ((1, "C2", "H", "H"), False),
         "w": (("K", "C1", "R", "S"), True), "v": (("K", "C2", "R", "S"), True),
         "b": (("K",), True), "c": (("K",), True)},
        (_conv(),
         Template("Add", "Add", 2, commutative=True),
         Template("Relu", "Relu", 1, kinds=("a",)),
         Template("Cat1", "Concat", 2, {"axis": 1}, kinds=("a", "a")),
         Template("CatW1", "Concat", 2, {"axis": 1}, kinds=("w", "w"))),
        3, {"C1": [3, 2, 4], "C2": [2, 5, 3], "H": [7, 6, 8], "K": [4, 3, 5]},
        geometries=_CONV_GEOMETRIES, geometry=_CONV_GEOMETRY_SYMBOLS, weight_ops_half=True),
    Domain(
        "cat", "channel Concat/Split movement across Relu, pooling, Add and Conv2D",
        {"a": ((1, "C1", "H", "H"), False), "b": ((1, "C2", "H", "H"), False),
         "c": ((1, "C3", "H", "H"), False), "w": (("K", "C1", "R", "S"), True),
         "v": (("K", "C2", "R", "S"), True), "bias": (("K",), True)},
        (Template("Cat1", "Concat", 2, {"axis": 1}),
         Template("Cat1x3", "Concat", 3, {"axis": 1}),
         Template("Split12", "Split", 1, {"axis": 1, "split": ["C1", "C2"]}, n_out=2, kinds=("a",)),
         Template("Relu", "Relu", 1, kinds=("a",)),
         Template("MaxPool", "MaxPool2D", 1, {"kernel": "pk", "strides": "ps", "pads": "pp"}, kinds=("a",)),
         Template("AvgPool", "AvgPool2D", 1, {"kernel": "pk", "strides": "ps", "pads": "pp"}, kinds=("a",)),
         Template("Cat1w", "Concat", 2, {"axis": 1}, kinds=("w", "w")),
         _conv()),
        3, {"C1": [2, 3, 4], "C2": [5, 2, 3], "C3": [3, 4, 2], "H": [6, 7, 8], "K": [4, 3, 5]},
        geometries=_CONV_GEOMETRIES, geometry=_CONV_GEOMETRY_SYMBOLS),
    Domain(
        "mm", "MatMul with biases and activations: parallel merges, summed and concatenated inputs (QKV, RNN cells)",
        {"x": (("A", "T", "K"), False), "h": (("A", "T", "J"), False),
         "w1": (("K", "N1"), True), "w2": (("K", "N2"), True), "u": (("J", "N1"), True),
         "b1": (("N1",), True), "b2": (("N2",), True)},
        (Template("MatMul", "MatMul", 2, {"activation": 0}, kinds=("a", "w"), ranks=(None, 2)),
         Template("Add", "Add", 2, commutative=True),
         Template("CatL", "Concat", 2, {"axis": 2}, kinds=("a", "a")),
         Template("CatW0", "Concat", 2, {"axis": 0}, kinds=("w", "w")),
         Template("CatW1", "Concat", 2, {"axis": 1}, kinds=("w", "w")),
         Template("SplitN", "Split", 1, {"axis": 2, "split": ["N1", "N2"]}, n_out=2, kinds=("a",)),
         Template("Tanh", "Tanh", 1), Template("Sigmoid", "Sigmoid", 1), Template("Relu", "Relu", 1, kinds=("a",))),
        3, {"A": [1, 2], "T": [3, 4, 2], "K": [4, 3, 5], "J": [5, 2, 3], "N1": [2, 3, 4], "N2": [6, 4, 3]},
        max_terms=40000, weight_ops_half=True),
    Domain(
        "mm2", "2-D MatMul cells (NASRNN): summed products of different inputs, parallel merges, biases",
        {"x": (("T", "K"), False), "h": (("T", "J"), False),
         "w1": (("K", "N1"), True), "w2": (("K", "N2"), True), "u": (("J", "N1"), True),
         "b1": (("N1",), True), "b2": (("N2",), True)},
        (Template("MatMul", "MatMul", 2, {"activation": 0}, kinds=("a", "w"), ranks=(None, 2)),
         Template("Add", "Add", 2, commutative=True),
         Template("CatL", "Concat", 2, {"axis": 1}, kinds=("a", "a")),
         Template("CatW0", "Concat", 2, {"axis": 0}, kinds=("w", "w")),
         Template("CatW1", "Concat", 2, {"axis": 1}, kinds=("w", "w")),
         Template("SplitN", "Split", 1, {"axis": 1, "split": ["N1", "N2"]}, n_out=2, kinds=("a",)),
         Template("Tanh", "Tanh", 1), Template("Sigmoid", "Sigmoid", 1), Template("Relu", "Relu", 1, kinds=("a",))),
        3, {"T": [1, 3, 2], "K": [4, 3, 5], "J": [5, 2, 3], "N1": [2, 3, 4], "N2": [6, 4, 3]},
        max_terms=40000, weight_ops_half=True),
)


def domains(names=None) -> tuple[Domain, ...]:
    if not names:
        return DOMAINS
    by = {d.name: d for d in DOMAINS}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise KeyError(f"unknown domains {unknown}; known: {sorted(by)}")
    return tuple(by[n] for n in names)
