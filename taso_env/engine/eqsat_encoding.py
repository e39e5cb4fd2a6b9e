"""Graph <-> egglog terms for equality saturation (`taso_env.engine.eqsat`).

Two egglog sorts: `T` (a tensor e-class) and `N` (an op e-class). An op is the term
`(op_<Type>_<arity> key t1 ... tn)` of sort N, where `key` (i64) names an interned
`OpKey` (type, every attribute, output types), so two ops are congruent exactly when
type, attributes and input e-classes agree. Output `i` of an op is `(Out n i)`. Graph
inputs and weights are `(Leaf k)`. Every tensor that Python creates is also named
`(Ref r)` (one e-node per name, in the tensor's class) so that later commands can
point at any e-class; extraction ignores Ref nodes.

egglog is imported lazily (only when eqsat runs).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from taso_env import _core
from taso_env.engine.graph import Graph

SOURCE_TYPES = ("Input", "Weight")
FLUSH_CHUNK = 8
ACTION_CHUNK = 100
MAX_RANK = 8
LIST_ID_BASE = 1 << 40


@dataclass(frozen=True)
class OpKey:
    """Everything about an op except its inputs. `name` is a hint for rebuilding (kept in
    the key only for opaque ops, whose semantics live in their attributes and name)."""

    type: str
    ints: tuple
    floats: tuple
    strings: tuple
    outputs: tuple  # ((shape tuple, dtype), ...)
    opaque_name: str = ""

    def attrs(self) -> dict:
        """Attributes as `CoreGraph.add_op` takes them."""
        out: dict = {k: list(v) for k, v in self.ints}
        out.update(dict(self.floats))
        out.update(dict(self.strings))
        return out


@dataclass(frozen=True)
class Leaf:
    type: str  # Input or Weight
    name: str
    output: tuple  # (shape tuple, dtype)


def op_key(record) -> OpKey:
    """The OpKey of a `CoreGraph.op_record` tuple."""
    op_type, name, _inputs, ints, floats, strings, outputs = record
    return OpKey(op_type, tuple(sorted((k, tuple(v)) for k, v in ints.items())),
                 tuple(sorted(floats.items())), tuple(sorted(strings.items())),
                 tuple((tuple(s), d) for s, d in outputs),
                 name if op_type == "Opaque" else "")


def attr_fn(op_type: str, attr: str, form) -> str:
    return f"A_{op_type}_{''.join(c if c.isalnum() else '_' for c in attr)}_{form}"


@functools.cache
def is_scalar_attr(op_type: str, attr: str) -> bool:
    kind = _core.op_type_schema(op_type)["attrs"].get(attr, ("?",))[0]
    return kind == "int"


def constructor(op_type: str, arity: int) -> str:
    return f"op_{op_type}_{arity}"


def _sexpr_name(op_type: str) -> str:
    if not op_type.replace("_", "").isalnum():
        raise ValueError(f"op type {op_type!r} cannot name an egglog constructor")
    return op_type


class Encoding:
    """An egglog e-graph plus the Python tables its terms refer to."""

    def __init__(self):
        from egglog import bindings

        self.egraph = bindings.EGraph()
        self.keys: list[OpKey] = []
        self.key_ids: dict[OpKey, int] = {}
        self.key_names: list[str] = []  # a name hint per key (first op seen)
        self.leaves: list[Leaf] = []
        self.leaf_ids: dict[tuple[str, str], int] = {}
        self.ref_types: list[tuple] = []  # (shape, dtype) per Ref id
        self.declared: set[str] = set()
        self.pending: list[str] = []  # declarations (egglog source text)
        self.actions: list = []  # unions and facts (egglog binding objects: no parsing)
        self._b = bindings
        self._span = bindings.PanicSpan()
        self._batches = 0
        self.unions = 0
        # Side-condition facts: the shape id of each tensor and the dims of each shape id;
        # attribute values of op keys, only those that some rule's query reads
        # (attr_needs: op type -> {(attribute, "h" whole value | element index)}).
        self.attr_needs: dict[str, set] = {}
        self.declared_attr_fns: set[str] = set()
        self.shape_ids: dict[tuple, int] = {}
        self.list_ids: dict[tuple, int] = {}
        self.run("(sort T)\n(sort N)\n(constructor Out (N i64) T)\n(constructor Ref (i64) T)\n"
                 "(constructor Leaf (i64) N)\n(function Shape (T) i64 :no-merge)\n"
                 "(function SRank (i64) i64 :no-merge)\n"
                 + "".join(f"(function SDim{j} (i64) i64 :no-merge)\n" for j in range(MAX_RANK)))

    # -- egglog I/O ----------------------------------------------------------------------
    def run(self, program: str):
        return self.egraph.run_program(*self.egraph.parse_program(program))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for i in range(0, len(pending), FLUSH_CHUNK):  # egglog's parser is costly on huge programs
            self.run("\n".join(pending[i:i + FLUSH_CHUNK]))
        actions, self.actions = self.actions, []
        b, span = self._b, self._span
        # Actions run as the head of a one-shot rule, ACTION_CHUNK at a time: top-level
        # commands and large heads both cost time superlinear in their number.
        for i in range(0, len(actions), ACTION_CHUNK):
            self._batches += 1
            rs = f"batch{self._batches}"
            self.egraph.run_program(b.AddRuleset(span, rs),
                                    b.RuleCommand(b.Rule(span, actions[i:i + ACTION_CHUNK], [], rs, rs)),
                                    b.RunSchedule(b.Run(span, b.RunConfig(rs, None))))

    # -- binding objects -----------------------------------------------------------------
    def _int(self, v: int):
        return self._b.Lit(self._span, self._b.Int(int(v)))

    def _call(self, name: str, *args):
        return self._b.Call(self._span, name, list(args))

    def _ref(self, r: int):
        return self._call("Ref", self._int(r))

    def _set(self, fn: str, arg, value: int) -> None:
        self.actions.append(self._b.Set(self._span, fn, [arg], self._int(value)))

    def _union(self, a, b) -> None:
        self.actions.append(self._b.Union(self._span, a, b))

    def declare(self, op_type: str, arity: int) -> str:
        name = constructor(_sexpr_name(op_type), arity)
        if name not in self.declared:
            self.declared.add(name)
            self.pending.append(f"(constructor {name} ({' '.join(['i64'] + ['T'] * arity)}) N)")
        return name

    # -- tables --------------------------------------------------------------------------
    def key_id(self, key: OpKey, name: str = "") -> int:
        k = self.key_ids.get(key)
        if k is None:
            k = self.key_ids[key] = len(self.keys)
            self.keys.append(key)
            self.key_names.append(name or key.type.lower())
            ints = dict(key.ints)
            for attr, form in sorted(self.attr_needs.get(key.type, ()), key=str):
                value = self.attr_value(key.type, attr, form, ints.get(attr))
                if value is not None:
                    self._set(attr_fn(key.type, attr, form), self._int(k), value)
        return k

    def need_attr(self, op_type: str, attr: str, form) -> str:
        """Registers an attribute fact that a query reads; returns its function name."""
        self.attr_needs.setdefault(op_type, set()).add((attr, form))
        fn = attr_fn(op_type, attr, form)
        if fn not in self.declared_attr_fns:
            self.declared_attr_fns.add(fn)
            self.pending.append(f"(function {fn} (i64) i64 :no-merge)")
        return fn

    def list_id(self, values) -> int:
        t = tuple(int(v) for v in values)
        return self.list_ids.setdefault(t, LIST_ID_BASE + len(self.list_ids))

    def attr_value(self, op_type: str, attr: str, form, values) -> int | None:
        """The value an attribute fact holds: scalars as themselves, whole lists as an
        interned id, list elements as themselves."""
        if values is None:
            return None
        if form == "h":
            return int(values[0]) if is_scalar_attr(op_type, attr) else self.list_id(values)
        return int(values[form]) if form < len(values) else None

    def shape_id(self, tensor_type: tuple) -> int:
        sid = self.shape_ids.get(tensor_type)
        if sid is None:
            sid = self.shape_ids[tensor_type] = len(self.shape_ids)
            shape = tensor_type[0]
            self._set("SRank", self._int(sid), len(shape))
            for j, d in enumerate(shape[:MAX_RANK]):
                self._set(f"SDim{j}", self._int(sid), int(d))
        return sid

    def leaf_id(self, leaf: Leaf) -> int:
        k = self.leaf_ids.get((leaf.type, leaf.name))
        if k is None:
            k = self.leaf_ids[(leaf.type, leaf.name)] = len(self.leaves)
            self.leaves.append(leaf)
        return k

    def new_ref(self, tensor_type: tuple) -> int:
        self.ref_types.append(tensor_type)
        return len(self.ref_types) - 1

    def _shape_fact(self, r: int) -> None:
        self._set("Shape", self._ref(r), self.shape_id(self.ref_types[r]))

    # -- adding terms --------------------------------------------------------------------
    def add_op(self, key_id: int, input_refs: list[int]) -> list[int]:
        """Adds op `key_id` reading the e-classes of `input_refs`; returns a new Ref per
        output."""
        key = self.keys[key_id]
        ctor = self.declare(key.type, len(input_refs))
        term = self._call(ctor, self._int(key_id), *[self._ref(r) for r in input_refs])
        refs = []
        for i, out in enumerate(key.outputs):
            r = self.new_ref(out)
            self._union(self._ref(r), self._call("Out", term, self._int(i)))
            self._shape_fact(r)
            refs.append(r)
        return refs

    def add_leaf(self, leaf: Leaf) -> int:
        r = self.new_ref(leaf.output)
        self._union(self._ref(r), self._call("Out", self._call("Leaf", self._int(self.leaf_id(leaf))), self._int(0)))
        self._shape_fact(r)
        return r

    def union(self, a: int, b: int) -> None:
        self.unions += 1
        self._union(self._ref(a), self._ref(b))

    def add_graph(self, graph: Graph) -> dict[tuple[int, int], int]:
        """Adds every op of `graph`; returns the Ref of each tensor (op id, index)."""
        core = graph.core
        refs: dict[tuple[int, int], int] = {}
        for i in range(core.num_ops):
            record = core.op_record(i)
            op_type, name, inputs = record[0], record[1], record[2]
            if op_type in SOURCE_TYPES:
                s, d = record[6][0]
                refs[(i, 0)] = self.add_leaf(Leaf(op_type, name, (tuple(s), d)))
                continue
            k = self.key_id(op_key(record), name)
            for j, r in enumerate(self.add_op(k, [refs[tuple(t)] for t in inputs])):
                refs[(i, j)] = r
        return refs


@dataclass
class Snapshot:
    """The e-graph as Python data, from `egglog`'s frozen tables (classes as ints).

    t_nodes[c]: the Out nodes (N class, index) of tensor class c.
    n_nodes[c]: the nodes of op class c: (key id or -1 - leaf id, input T classes).
    ref_class[r]: the class of Ref r. relations[name]: rows with i64 columns as ints."""

    t_nodes: dict
    n_nodes: dict
    ref_class: list
    relations: dict
    num_enodes: int

    def tensor_type(self, enc: Encoding, c: int) -> tuple:
        n, i = self.t_nodes[c][0]
        k, _ = self.n_nodes[n][0]
        return enc.leaves[-1 - k].output if k < 0 else enc.keys[k].outputs[i]


def snapshot(enc: Encoding, relations: tuple[str, ...] = ()) -> Snapshot:
    """Reads the whole e-graph (after `enc.flush()`)."""
    enc.flush()
    frozen = enc.egraph.freeze().functions
    eg = enc.egraph
    t_ids: dict = {}
    n_ids: dict = {}

    def cid(v) -> int:  # tensor classes
        c = t_ids.get(v)
        if c is None:
            c = t_ids[v] = len(t_ids)
        return c

    def nid(v) -> int:  # op classes (a separate id space: egglog ids are per sort)
        c = n_ids.get(v)
        if c is None:
            c = n_ids[v] = len(n_ids)
        return c

    to_int = eg.value_to_i64
    t_nodes: dict[int, list] = {}
    n_nodes: dict[int, list] = {}
    ref_class = [-1] * len(enc.ref_types)
    num = 0
    for name, f in frozen.items():
        if f.is_let_binding:
            continue
        if name == "Ref":
            for row in f.rows:
                ref_class[to_int(row.inputs[0])] = cid(row.output)
        elif name == "Out":
            for row in f.rows:
                t_nodes.setdefault(cid(row.output), []).append((nid(row.inputs[0]), to_int(row.inputs[1])))
                num += 1
        elif name == "Leaf":
            for row in f.rows:
                n_nodes.setdefault(nid(row.output), []).append((-1 - to_int(row.inputs[0]), ()))
                num += 1
        elif name.startswith("op_") and f.output_sort == "N":
            for row in f.rows:
                n_nodes.setdefault(nid(row.output), []).append(
                    (to_int(row.inputs[0]), tuple(cid(v) for v in row.inputs[1:])))
                num += 1
    rel_rows = {}
    for name in relations:
        f = frozen.get(name)
        if f is None:
            rel_rows[name] = []
            continue
        is_int = [s == "i64" for s in f.input_sorts]
        rel_rows[name] = [tuple(to_int(v) if i else cid(v) for v, i in zip(row.inputs, is_int, strict=True))
                          for row in f.rows]
    for nodes in list(t_nodes.values()) + list(n_nodes.values()):
        nodes.sort()  # deterministic order whatever egglog's table order
    return Snapshot(t_nodes, n_nodes, ref_class, rel_rows, num)


def check_schema(op_type: str) -> bool:
    """Whether the core models `op_type` (rules over unknown types are skipped)."""
    try:
        _core.op_type_schema(op_type)
    except Exception:  # noqa: BLE001 - the core raises its own kinds for unknown names
        return False
    return True
