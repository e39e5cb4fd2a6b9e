# Included by _core.pyx (one extension module): rules as the engine takes them (the JSON
# specs converted), the rule set, and enumerations it carries through rewrites.


cdef Expr _expr(obj, str where) except *:
    """Python rule expression -> C++ Expr (see taso/rule.h for the grammar)."""
    cdef Expr e
    if isinstance(obj, int):  # bool too
        e.kind = 0
        e.ints.push_back(int(obj))
    elif isinstance(obj, float):
        e.kind = 1
        e.number = obj
    elif isinstance(obj, str):
        if obj == "_":
            e.kind = 4
        elif obj.startswith("$"):
            e.kind = 2
            e.name = _s(obj[1:])
        else:
            e.kind = 3
            e.name = _s(obj)
    elif isinstance(obj, list):
        e.kind = 5
        e.name = b"list"
        for x in obj:
            e.args.push_back(_expr(x, where))
    elif isinstance(obj, dict) and len(obj) == 1:
        (fn, args), = obj.items()
        e.kind = 5
        e.name = _s(fn)
        for x in (args if isinstance(args, list) else [args]):
            e.args.push_back(_expr(x, where))
    else:
        raise ValueError(f"{where}: cannot read expression {obj!r}")
    return e


cdef PatternOp _pattern_op(dict o, str where) except *:
    cdef PatternOp op
    op.name = _s(o["name"])
    op.type = _s(o["type"])
    op.inputs = [_s(i) for i in o.get("inputs", [])]
    for k, v in o.get("attrs", {}).items():
        op.attrs[_s(k)] = _expr(v, f"{where} op {o['name']!r} attribute {k!r}")
    return op


cdef Pattern _pattern(dict p, str where) except *:
    cdef Pattern out
    for o in p.get("ops", []):
        out.ops.push_back(_pattern_op(o, where))
    out.outputs = [_s(x) for x in p.get("outputs", [])]
    return out


cdef RuleSpec _rule_spec(dict spec) except *:
    cdef RuleSpec r
    cdef vector[Expr] dims
    where = f"rule {spec.get('id')} {spec.get('name')!r}"
    r.id = spec["id"]
    r.name = _s(spec["name"])
    r.source = _pattern(spec["source"], where + " source")
    r.target = _pattern(spec["target"], where + " target")
    for t, pattern in spec.get("shapes", {}).items():
        dims.clear()
        for d in pattern:
            dims.push_back(_expr(d, f"{where} shape of {t!r}"))
        r.shapes[_s(t)] = dims
    for c in spec.get("constraints", []):
        r.constraints.push_back(_expr(c, where + " constraint"))
    return r


cdef extern from *:
    """
    static PyObject* rlflow_tuple_of_type(PyObject* type, Py_ssize_t n) {
        return PyType_GenericAlloc((PyTypeObject*) type, n);
    }
    """
    object _tuple_of_type "rlflow_tuple_of_type"(object type, Py_ssize_t n)


cdef inline void _set_item(object t, Py_ssize_t i, object item):
    """t[i] = item in a tuple being filled (PyTuple_SET_ITEM steals a reference)."""
    Py_INCREF(item)
    PyTuple_SET_ITEM(t, i, item)


cdef tuple _int_tuple(const vector[int]& v):
    cdef Py_ssize_t i, n = <Py_ssize_t> v.size()
    cdef tuple t = PyTuple_New(n)
    for i in range(n):
        _set_item(t, i, v[i])
    return t


cdef list _candidate_list(const vector[Candidate]& cands, type as_type):
    """[as_type((rule_id, location tuple, cost delta ms))], read in place and made as
    tuple.__new__(as_type, ...) makes them (a step makes hundreds: no C++ Candidate is
    copied, no intermediate tuple built)."""
    if not issubclass(as_type, tuple):
        raise TypeError(f"candidates are made tuples or a tuple subclass, not {as_type.__name__}")
    cdef list out = PyList_New(<Py_ssize_t> cands.size())
    cdef Py_ssize_t i
    cdef object item  # a tuple or a tuple subclass
    for i in range(<Py_ssize_t> cands.size()):
        item = PyTuple_New(3) if as_type is tuple else _tuple_of_type(as_type, 3)
        _set_item(item, 0, cands[i].rule_id)
        _set_item(item, 1, _int_tuple(cands[i].location))
        _set_item(item, 2, cands[i].cost_delta)
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    return out


cdef class CoreEnumeration:
    """Owns a C++ taso::Enumeration: a graph's candidates (sorted by rule and location)
    and the bindings rejected for closing a cycle, for following it through a rewrite."""

    cdef Enumeration e
    cdef object graph  # the CoreGraph and CoreCostModel enumerated: e's facts refer to them
    cdef object model

    def candidates(self, as_type=tuple):
        """[(rule_id, location tuple, cost delta ms)], each made an `as_type` (a tuple
        subclass: tuple.__new__(as_type, ...))."""
        return _candidate_list(self.e.candidates, as_type)

    def cycle_rejected(self):
        """[(rule_id, location tuple)]."""
        return [(c.rule_id, tuple(c.location)) for c in self.e.cycle_rejected]

    def op_costs(self):
        """Each op's estimated runtime (ms) in the graph enumerated, under the model it was
        enumerated with (the same as the model's op_costs; read from the enumeration's
        facts where the model prices fused steps)."""
        return enumeration_op_costs_ms(deref((<CoreGraph> self.graph).g), deref((<CoreCostModel> self.model).cptr()),
                                       self.e)


cdef class CoreRuleSet:
    """Owns a C++ taso::RuleSet built from rule dicts (taso_env/rules/*.json)."""

    cdef unique_ptr[RuleSet] rules

    def __cinit__(self, list specs):
        cdef vector[RuleSpec] cpp
        for spec in specs:
            cpp.push_back(_rule_spec(spec))
        self.rules.reset(new RuleSet(cpp))  # `new` so the constructor's exceptions translate

    def __len__(self):
        return deref(self.rules).size()

    def candidates(self, CoreGraph graph not None, CoreCostModel model not None, int rule_id=-1, as_type=tuple):
        """[(rule_id, location tuple, cost delta ms)] for every valid match, each made an
        `as_type` (a tuple subclass)."""
        cdef vector[Candidate] cands = deref(self.rules).candidates(deref(graph.g), deref(model.cptr()), rule_id,
                                                                    False)
        return _candidate_list(cands, as_type)

    def candidate_effects(self, CoreGraph graph not None, CoreCostModel model not None, int rule_id=-1):
        """[(rule_id, location, cost delta in cost units, child hash)]: what the search
        uses, computed without building any child graph."""
        cdef vector[Candidate] cands = deref(self.rules).candidates(deref(graph.g), deref(model.cptr()), rule_id,
                                                                    True)
        return [(c.rule_id, tuple(c.location), c.cost_delta_units, c.child_hash) for c in cands]

    def apply(self, CoreGraph graph not None, int rule_id, location):
        cdef vector[int] loc = list(location)
        cdef CoreGraph out = CoreGraph.__new__(CoreGraph)
        out.g = make_unique[Graph](deref(self.rules).apply(deref(graph.g), rule_id, loc))
        return out

    def successors(self, CoreGraph graph not None, CoreCostModel model not None, CoreEnumeration current not None,
                   which):
        """[(child hash, best cost delta ms among the child's candidates or None)] for each
        index in `which` of current's candidates (`current`: the enumeration of `graph`
        under `model`), each child scored without enumerating all of it."""
        cdef vector[int] picks = list(which)
        cdef vector[Successor] out = deref(self.rules).successors(deref(graph.g), deref(model.cptr()), current.e,
                                                                  picks)
        return [(s.child_hash, s.best_delta if s.has_candidates else None) for s in out]

    def enumeration(self, CoreGraph graph not None, CoreCostModel model not None):
        """The CoreEnumeration of `graph` (a full enumeration)."""
        cdef CoreEnumeration out = CoreEnumeration.__new__(CoreEnumeration)
        out.e = deref(self.rules).enumeration(deref(graph.g), deref(model.cptr()))
        out.graph, out.model = graph, model
        return out

    def step(self, CoreGraph graph not None, CoreCostModel model not None, CoreEnumeration current not None,
             int which):
        """(CoreGraph, CoreEnumeration): `graph` with current's candidate `which` applied and
        its enumeration, found by enumerating only near the rewritten ops."""
        cdef CoreGraph child = CoreGraph.__new__(CoreGraph)
        cdef CoreEnumeration nxt = CoreEnumeration.__new__(CoreEnumeration)
        child.g = deref(self.rules).step(deref(graph.g), deref(model.cptr()), current.e, which, &nxt.e)
        nxt.graph, nxt.model = child, model
        return child, nxt

    def search(self, str method, CoreGraph graph not None, CoreCostModel model not None, double alpha=1.05, int budget=1000,
               int max_steps=10000, int max_ops=40, int max_states=20000, bint incremental=True,
               int store_ops=150000):
        """Runs greedy / backtracking / exhaustive search; returns (CoreGraph, stats)."""
        cdef SearchResult r
        if method == "greedy":
            r = greedy_search(deref(graph.g), deref(self.rules), deref(model.cptr()), max_steps, 1e-9)
        elif method == "backtracking":
            r = backtracking_search(deref(graph.g), deref(self.rules), deref(model.cptr()), alpha, budget,
                                    incremental, store_ops)
        elif method == "exhaustive":
            r = exhaustive_search(deref(graph.g), deref(self.rules), deref(model.cptr()), max_ops, max_states)
        else:
            raise ValueError(f"unknown search method {method!r}; use greedy, backtracking or exhaustive")
        cdef CoreGraph out = CoreGraph.__new__(CoreGraph)
        out.g = make_unique[Graph](r.graph)
        stats = {"initial_cost": r.initial_cost, "final_cost": r.final_cost, "expansions": r.expansions,
                 "graphs_seen": r.graphs_seen, "applied": list(r.applied), "complete": r.complete,
                 "graphs_built": r.graphs_built, "peak_graphs_stored": r.peak_graphs_stored}
        return out, stats
