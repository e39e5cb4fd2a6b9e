"""Rule JSON -> egglog rewrites for equality saturation.

Every rule the C++ engine loads is translated generically from its JSON (no rule is
hand-encoded). The source pattern becomes an egglog query over op constructors (type
and arity; one variant per combination of present optional inputs); a match writes
one row into the rule's relation: the attribute keys of the matched ops, the e-classes
of the free variables and of the source outputs. The side conditions (attribute
literals and bindings, shape patterns, constraints) and the target are then decided by
the real C++ engine on a small concrete graph built from the match (the source pattern
over inputs of the matched shapes): if its matcher offers the rule at exactly that
location, its applier builds the target, whose ops are added to the e-graph and whose
outputs are unioned with the source outputs. Verdicts are cached per (rule, attribute
keys, variable shapes, variable aliasing), so each configuration reaches C++ once.

Rules that cannot be expressed (an optional input naming an op, too many optional
inputs, unknown op types) are skipped and counted by reason.
"""

from __future__ import annotations

import collections
import itertools
import time
from collections import Counter
from dataclasses import dataclass

from taso_env import _core
from taso_env.engine.eqsat_encoding import Encoding, Snapshot, check_schema, op_key

MAX_OPTIONAL = 3  # 2**3 query variants at most per rule


@dataclass
class MatchRule:
    """One egglog query variant of a rule."""

    rule_id: int
    relation: str
    ops: list  # [(name, type, [input refs])] in pattern order, optional-absent inputs dropped
    order: list  # pattern op indices in dependency order
    var_names: list
    outputs: list  # [(op index, output index)] of the source outputs

    @property
    def multi_root(self) -> bool:
        """Several source ops are outputs (parallel merges): matches grow combinatorially."""
        return len({k for k, _ in self.outputs}) > 1

    def shared_input(self) -> list | None:
        """For a multi-root pattern, [(op type, arity, input position)] of each root op
        at a free variable that every root reads (the join that makes matches grow)."""
        roots = sorted({k for k, _ in self.outputs})
        for name in self.var_names:
            slots = []
            for k in roots:
                _, op_type, ins = self.ops[k]
                pos = [i for i, r in enumerate(ins) if r == ("var", name)]
                if not pos:
                    break
                slots.append((op_type, len(ins), pos[0]))
            else:
                return slots
        return None


def _parse_ref(ref: str, op_index: dict) -> tuple:
    """('var', name) or ('op', op index, output index)."""
    name, _, idx = ref.partition(":")
    if name in op_index:
        return ("op", op_index[name], int(idx or 0))
    return ("var", ref)


def _dependency_order(ops: list) -> list | None:
    order, placed = [], set()
    while len(order) < len(ops):
        ready = [i for i, (_, _, ins) in enumerate(ops)
                 if i not in placed and all(r[0] == "var" or r[1] in placed for r in ins)]
        if not ready:
            return None
        order.append(ready[0])
        placed.add(ready[0])
    return order


def compile_rule(spec: dict) -> tuple[list[MatchRule], str | None]:
    """The query variants of one rule spec, or ([], reason) if it cannot be expressed."""
    src = spec["source"]
    names = [o["name"] for o in src["ops"]]
    op_index = {n: i for i, n in enumerate(names)}
    for o in src["ops"]:
        if not check_schema(o["type"]):
            return [], f"unknown op type {o['type']}"
        if not o["type"].replace("_", "").isalnum():
            return [], "op type not an identifier"
    optional = sorted({i for o in src["ops"] for i in o.get("inputs", []) if i.endswith("?")})
    for i in optional:
        if i[:-1].partition(":")[0] in op_index:
            return [], "optional input naming an op"
    if len(optional) > MAX_OPTIONAL:
        return [], "too many optional inputs"
    outputs = []
    for out in src["outputs"]:
        r = _parse_ref(out, op_index)
        if r[0] != "op":
            return [], "source output is a free variable"
        outputs.append(r[1:])
    variants = []
    for present in itertools.product((True, False), repeat=len(optional)):
        on = dict(zip(optional, present, strict=True))
        ops = []
        for o in src["ops"]:
            ins = [_parse_ref(i.rstrip("?"), op_index) for i in o.get("inputs", []) if on.get(i, True)]
            ops.append((o["name"], o["type"], ins))
        order = _dependency_order(ops)
        if order is None:
            return [], "source pattern has a cycle"
        var_names = []
        for _, _, ins in ops:
            for r in ins:
                if r[0] == "var" and r[1] not in var_names:
                    var_names.append(r[1])
        variants.append(MatchRule(spec["id"], f"M{spec['id']}_{len(variants)}", ops, order, var_names, outputs))
    return variants, None


def _sym(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _side_conditions(m: MatchRule, spec: dict, enc: Encoding, tensor_var) -> list[str]:
    """egglog facts for the attribute and shape patterns that are plain integers or
    `$name` bindings (a pre-filter: the C++ engine decides every match in the end)."""
    uses: dict = {}  # $name -> [(kind, fact template)]
    facts = []
    for k, o in enumerate(spec["source"]["ops"]):
        for attr, pat in (o.get("attrs") or {}).items():
            op_type = o["type"]
            if attr not in _core.op_type_schema(op_type)["attrs"]:
                continue
            kind = _core.op_type_schema(op_type)["attrs"][attr][0]
            if kind not in ("int", "ints"):
                continue
            whole = f"({{fn}} a{k})"
            if _is_int(pat) and kind == "int":
                facts.append(f"(= ({enc.need_attr(op_type, attr, 'h')} a{k}) {pat})")
            elif isinstance(pat, list) and kind == "ints" and all(_is_int(x) for x in pat):
                facts.append(f"(= ({enc.need_attr(op_type, attr, 'h')} a{k}) {enc.list_id(pat)})")
            elif isinstance(pat, str) and pat.startswith("$"):
                uses.setdefault(pat, []).append(("scalar" if kind == "int" else "list",
                                                 (op_type, attr, "h", whole)))
            elif isinstance(pat, list) and kind == "ints":
                for j, x in enumerate(pat):
                    elem = f"({{fn}} a{k})"
                    if _is_int(x):
                        facts.append(f"(= ({enc.need_attr(op_type, attr, j)} a{k}) {x})")
                    elif isinstance(x, str) and x.startswith("$"):
                        uses.setdefault(x, []).append(("scalar", (op_type, attr, j, elem)))
    for tensor, dims in (spec.get("shapes") or {}).items():
        var = tensor_var(tensor)
        if var is None or not isinstance(dims, list) or len(dims) > 8:
            continue
        sid = f"s_{_sym(tensor)}"
        facts.append(f"(= (Shape {var}) {sid})")
        facts.append(f"(= (SRank {sid}) {len(dims)})")
        for j, d in enumerate(dims):
            if _is_int(d):
                facts.append(f"(= (SDim{j} {sid}) {d})")
            elif isinstance(d, str) and d.startswith("$"):
                uses.setdefault(d, []).append(("scalar", (None, sid, j, None)))
    # `$name` bindings shared between tensors or ops are left to the engine: as egglog
    # facts they let the query planner join unrelated tensors by equal dims first
    # (a cross product that exhausted memory on nasrnn). Only literals filter here.
    del uses
    return facts


def egglog_rule(m: MatchRule, spec: dict, enc: Encoding) -> str:
    """The ruleset, relation and egglog rule that record every match of `m`."""
    facts = []
    shape_outs = set()
    op_index = {o[0]: i for i, o in enumerate(m.ops)}

    def tensor_var(name: str):
        r = _parse_ref(name.rstrip("?"), op_index)
        if r[0] == "op":
            shape_outs.add((r[1], r[2]))
            return f"o{r[1]}_{r[2]}"
        return f"v{m.var_names.index(r[1])}" if r[1] in m.var_names else None

    side = _side_conditions(m, spec, enc, tensor_var)
    used_outs = ({(r[1], r[2]) for _, _, ins in m.ops for r in ins if r[0] == "op"} | set(m.outputs)
                 | shape_outs)
    ctors = []
    for k in m.order:
        _, op_type, ins = m.ops[k]
        args = []
        for r in ins:
            args.append(f"v{m.var_names.index(r[1])}" if r[0] == "var" else f"o{r[1]}_{r[2]}")
        ctor = enc.declare(op_type, len(ins))
        ctors.append((ctor, k))
        facts.append(f"(= n{k} ({ctor} a{k}{''.join(' ' + a for a in args)}))")
        for op, idx in sorted(used_outs):
            if op == k:
                facts.append(f"(= o{k}_{idx} (Out n{k} {idx}))")
    for (c1, k1), (c2, k2) in itertools.combinations(ctors, 2):
        if c1 == c2:
            facts.append(f"(!= n{k1} n{k2})")  # the engine matches distinct ops
    if m.multi_root:  # two roots in one class are the same tensor: nothing to merge
        for (k1, i1), (k2, i2) in itertools.combinations(m.outputs, 2):
            if k1 != k2:
                facts.append(f"(!= o{k1}_{i1} o{k2}_{i2})")
    facts += side
    cols = ([f"a{k}" for k in range(len(m.ops))] + [f"v{j}" for j in range(len(m.var_names))]
            + [f"o{k}_{i}" for k, i in m.outputs])
    sorts = ["i64"] * len(m.ops) + ["T"] * (len(cols) - len(m.ops))
    rs = m.relation.lower()
    return (f"(ruleset {rs})\n(relation {m.relation} ({' '.join(sorts)}))\n"
            f"(rule ({' '.join(facts)}) (({m.relation} {' '.join(cols)})) :ruleset {rs})")


def _product(values) -> int:
    out = 1
    for v in values:
        out *= v
    return out


@dataclass
class Template:
    """A verified rewrite of one match configuration: target ops over variable slots."""

    ops: list  # [(key id, [('var', j) | ('new', op, index)])]
    outputs: list  # per source output: ('var', j) or ('new', op, index)


class RuleTranslator:
    """The compiled rules of a rule set over one encoding, and the match processor."""

    def __init__(self, rule_set, enc: Encoding, core_model):
        self.rule_set, self.enc, self.model = rule_set, enc, core_model
        self.variants: list[MatchRule] = []
        self.skipped: Counter = Counter()
        for spec in rule_set.specs:
            variants, reason = compile_rule(spec)
            if reason:
                self.skipped[reason] += 1
            self.variants.extend(variants)
        self.rules_translated = len({v.rule_id for v in self.variants})
        specs = {spec["id"]: spec for spec in rule_set.specs}
        for v in self.variants:
            enc.pending.append(egglog_rule(v, specs[v.rule_id], enc))
        enc.flush()
        self.templates: dict = {}
        self.done: set = set()
        self.fires: Counter = Counter()
        self.memo: dict = {}  # (key id, input refs) -> output refs of terms already added

    def run_queries(self, snap: Snapshot, multi_root: bool = True, match_limit: int = 50_000,
                    deadline: float | None = None) -> list[str]:
        """Runs every rule's query once. Multi-root ones run only if `multi_root` and if
        their estimated number of matches in `snap` (the product, per shared input
        class, of the number of candidate root ops reading it) is at most
        `match_limit`: egglog materialises every match, and these grow as a power of
        the number of readers. Returns the relations skipped for their estimate."""
        readers = Counter()
        if multi_root:
            for nodes in snap.n_nodes.values():
                for k, ins in nodes:
                    if k >= 0:
                        op_type = self.enc.keys[k].type
                        for pos, c in enumerate(ins):
                            readers[(op_type, len(ins), pos, c)] += 1
        skipped, run = [], []
        for v in self.variants:
            if v.multi_root:
                if not multi_root:
                    continue
                slots = v.shared_input()
                if slots is not None:
                    estimate = sum(_product(readers[(t, a, p, c)] for t, a, p in slots) for c in snap.t_nodes)
                    if estimate > match_limit:
                        skipped.append(v.relation)
                        continue
            run.append(f"(run {v.relation.lower()} 1)")
        self.enc.flush()
        for i in range(0, len(run), 16):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            self.enc.run("\n".join(run[i:i + 16]))
        return skipped

    @property
    def relations(self) -> tuple[str, ...]:
        return tuple(v.relation for v in self.variants)

    def template(self, m: MatchRule, attr_keys: tuple, alias: tuple, var_types: tuple) -> Template | None:
        key = (m.relation, attr_keys, alias, var_types)
        if key not in self.templates:
            try:
                self.templates[key] = self._build_template(m, attr_keys, alias, var_types)
            except (ValueError, KeyError, IndexError):  # the core's typed errors derive from ValueError
                self.templates[key] = None
        return self.templates[key]

    def _build_template(self, m: MatchRule, attr_keys, alias, var_types) -> Template | None:
        enc = self.enc
        core = _core.CoreGraph()
        slot_op = {}
        for j, a in enumerate(alias):
            if a == j:
                s, d = var_types[j]
                slot_op[j] = core.add_op("Input", f"x{j}", [], {}, [(list(s), d)])
        op_ids = {}
        for k in m.order:
            _, op_type, ins = m.ops[k]
            key = enc.keys[attr_keys[k]]
            if key.type != op_type or key.type == "Opaque":
                return None
            refs = [(slot_op[alias[m.var_names.index(r[1])]], 0) if r[0] == "var" else (op_ids[r[1]], r[2])
                    for r in ins]
            op_ids[k] = core.add_op(op_type, f"p{k}", refs, key.attrs())
        for i, (k, idx) in enumerate(m.outputs):
            core.add_output((op_ids[k], idx), f"out{i}")
        location = tuple(op_ids[k] for k in range(len(m.ops)))
        # The engine offers a symmetric pattern once (e.g. c1/c2 swapped); any candidate
        # covering exactly these ops rewrites this subgraph, and the graph outputs say
        # which target tensor replaces which source output.
        cands = [tuple(loc) for _, loc, _ in self.rule_set.core.candidates(core, self.model, m.rule_id)]
        found = [loc for loc in cands if loc == location] or [loc for loc in cands if sorted(loc) == sorted(location)]
        if not found:
            return None
        out = self.rule_set.core.apply(core, m.rule_id, found[0])
        slot_of = {}
        new_of = {}
        ops = []
        for i in range(out.num_ops):
            record = out.op_record(i)
            if record[0] == "Input":
                slot_of[i] = int(record[1][1:])
                continue
            if record[0] == "Weight":
                return None  # targets never create weights; refuse rather than guess
            ins = [("var", slot_of[o]) if o in slot_of else ("new", new_of[o], idx) for o, idx in record[2]]
            new_of[i] = len(ops)
            ops.append((enc.key_id(op_key(record), record[1]), ins))
        outputs = [("var", slot_of[o]) if o in slot_of else ("new", new_of[o], idx) for o, idx in out.outputs()]
        return Template(ops, outputs)

    def apply_matches(self, snap: Snapshot, budget: int, deadline: float | None = None
                      ) -> tuple[int, int, bool]:
        """Adds the target of every new valid match, taking the rules in turn (one
        match of each in round robin, so a budget is shared fairly), until `budget` new
        e-nodes or `deadline`; returns (matches applied, e-nodes added, all done)."""
        enc = self.enc
        class_ref = {}
        for r, c in enumerate(snap.ref_class):
            if c >= 0 and c not in class_ref:
                class_ref[c] = r
        applied = added = seen = 0
        n_known = len(snap.ref_class)

        def canon(r: int) -> int:
            c = snap.ref_class[r] if r < n_known else -1
            return class_ref[c] if c >= 0 else r

        queues = collections.deque((m, iter(snap.relations.get(m.relation, ()))) for m in self.variants)
        while queues:
            m, rows = queues.popleft()
            row = next(rows, None)
            if row is None:
                continue
            queues.append((m, rows))
            seen += 1
            if deadline is not None and seen % 256 == 0 and time.perf_counter() >= deadline:
                return applied, added, False
            n_ops, n_vars = len(m.ops), len(m.var_names)
            # class ids are per snapshot; a class's smallest Ref is stable until it merges
            stable = (m.relation, row[:n_ops], tuple(class_ref[c] for c in row[n_ops:]))
            if stable in self.done:
                continue
            attr_keys = row[:n_ops]
            var_classes = row[n_ops:n_ops + n_vars]
            out_classes = row[n_ops + n_vars:]
            alias = tuple(var_classes.index(c) for c in var_classes)
            var_types = tuple(snap.tensor_type(enc, c) for c in var_classes)
            t = self.template(m, attr_keys, alias, var_types)
            if t is None:
                self.done.add(stable)
                continue
            if added + sum(1 + len(enc.keys[k].outputs) for k, _ in t.ops) > budget:
                return applied, added, False
            self.done.add(stable)
            new_refs = []
            for key_id, ins in t.ops:
                refs = [class_ref[var_classes[x[1]]] if x[0] == "var" else new_refs[x[1]][x[2]] for x in ins]
                memo_key = (key_id, tuple(canon(r) for r in refs))
                outs = self.memo.get(memo_key)
                if outs is None:  # a term the e-graph may not have yet
                    outs = self.memo[memo_key] = enc.add_op(key_id, refs)
                    added += 1 + len(enc.keys[key_id].outputs)  # the op and its Out nodes
                new_refs.append(outs)
            for c, o in zip(out_classes, t.outputs, strict=True):
                target = class_ref[var_classes[o[1]]] if o[0] == "var" else new_refs[o[1]][o[2]]
                if canon(target) != class_ref[c]:
                    enc.union(class_ref[c], target)
            applied += 1
            self.fires[m.rule_id] += 1
        return applied, added, True
