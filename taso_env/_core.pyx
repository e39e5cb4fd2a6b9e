# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython face of the C++ core (taso_env/csrc). Internal: use taso_env's Python API.

Everything crossing the boundary is a plain Python value (ints, floats, strings,
tuples, lists, dicts); C++ objects are owned by `cdef class` wrappers and freed in
`__dealloc__`. C++ exceptions become the typed errors of taso_env.errors.
"""

from cython.operator cimport dereference as deref
from libc.stdint cimport int64_t, uint64_t
from libcpp.memory cimport unique_ptr, make_unique
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM

from taso_env import errors as _errors

# ErrorKind codes (taso/errors.h) -> Python classes.
_ERROR_CLASSES = {
    1: _errors.ShapeError,
    2: _errors.OpAttributeError,
    3: _errors.GraphError,
    4: _errors.CycleError,
    5: _errors.UnknownOpError,
    6: ValueError,
    7: IndexError,
}


cdef int raise_core_error() except -1:
    cdef pair[int, string] err = classify_current_exception()
    cls = _ERROR_CLASSES.get(err.first, _errors.TasoEnvError)
    raise cls(err.second.decode("utf-8", "replace"))


cdef string _s(obj) except *:
    if isinstance(obj, bytes):
        return obj
    return str(obj).encode("utf-8")


cdef Attrs _to_attrs(dict attrs, str where) except *:
    cdef Attrs out
    cdef vector[int64_t] values
    for key, value in attrs.items():
        if isinstance(value, int):  # bool is an int too
            values.clear()
            values.push_back(int(value))
            out.ints[_s(key)] = values
        elif isinstance(value, float):
            out.floats[_s(key)] = value
        elif isinstance(value, (str, bytes)):
            out.strings[_s(key)] = _s(value)
        elif isinstance(value, (list, tuple)):
            values.clear()
            for v in value:
                if isinstance(v, float) or not hasattr(v, "__index__"):
                    raise _errors.OpAttributeError(
                        f"{where}: attribute {key!r} must be a list of integers, got {value!r}")
                values.push_back(v.__index__())
            out.ints[_s(key)] = values
        else:
            raise _errors.OpAttributeError(
                f"{where}: attribute {key!r} has unsupported type {type(value).__name__}")
    return out


cdef TensorType _to_type(shape, dtype) except *:
    cdef TensorType t
    for d in shape:
        t.shape.push_back(int(d))
    t.dtype = int(dtype)
    return t


def list_op_types():
    """Names of all op types the core models, in op-type code order."""
    return [n.decode() for n in op_type_names()]


def op_type_schema(name):
    """Schema of one op type (its row of taso/op_table.def): input counts, whether its
    output types are declared by the caller, attributes (name -> (kind, required)), its
    element-wise class ("none", "flat" or "chain") and FLOPs per output element (element-wise
    ops; 0 for the others)."""
    cdef OpSchema s = op_schema(op_type_from_name(_s(name)))
    kinds = ("int", "ints", "float", "string")
    attrs = {}
    for a in s.attrs:
        attrs[a.name.decode()] = (kinds[<int>a.kind], a.required)
    return {
        "min_inputs": s.min_inputs,
        "max_inputs": s.max_inputs,
        "declared_outputs": s.declared_outputs,
        "attrs": attrs,
        "elementwise": ("none", "flat", "chain")[<int>s.elementwise],
        "elementwise_flops": s.elementwise_flops,
    }


def sort_topologically(deps, names):
    """Order for `deps[i]` = producers of op i; raises CycleError naming ops on a cycle."""
    cdef vector[vector[int]] d = deps
    cdef vector[string] n = [_s(x) for x in names]
    return list(topological_sort(d, n))


cdef class CoreGraph:
    """Owns one C++ taso::Graph."""

    def __cinit__(self):
        self.g = make_unique[Graph]()

    def copy(self):
        cdef CoreGraph other = CoreGraph.__new__(CoreGraph)
        other.g = make_unique[Graph](deref(self.g))
        return other

    def add_op(self, op_type, name, inputs, dict attrs, declared_outputs=()):
        """Appends an op; returns its id. `inputs` are (op, index) pairs."""
        cdef OpSpec spec
        cdef TensorRef ref
        spec.type = _s(op_type)
        spec.name = _s(name or "")
        for op, index in inputs:
            ref.op = op
            ref.index = index
            spec.inputs.push_back(ref)
        spec.attrs = _to_attrs(attrs, f"{op_type} op {name!r}")
        for shape, dtype in declared_outputs:
            spec.declared_outputs.push_back(_to_type(shape, dtype))
        return deref(self.g).add_op(spec)

    def add_output(self, tensor, name):
        cdef TensorRef ref
        ref.op, ref.index = tensor
        deref(self.g).add_output(ref, _s(name))

    @property
    def num_ops(self):
        return deref(self.g).num_ops()

    @property
    def num_compute_ops(self):
        return deref(self.g).num_compute_ops()

    def op_record(self, int i):
        """(type, name, inputs, ints, floats, strings, outputs) of op i."""
        cdef Op op = deref(self.g).op(i)
        inputs = tuple((r.op, r.index) for r in op.inputs)
        ints = {k.decode(): list(v) for k, v in op.attrs.ints}
        floats = {k.decode(): v for k, v in op.attrs.floats}
        strings = {k.decode(): v for k, v in op.attrs.strings}
        outputs = tuple((tuple(t.shape), t.dtype) for t in op.outputs)
        return (op_schema(op.type).name.decode(), op.name.decode(), inputs, ints, floats, strings, outputs)

    def outputs(self):
        cdef vector[TensorRef] outs = deref(self.g).outputs()
        return [(r.op, r.index) for r in outs]

    def output_names(self):
        cdef vector[string] names = deref(self.g).output_names()
        return [n.decode() for n in names]

    def sizes(self):
        """(number of ops, number of edges = op inputs)."""
        cdef Graph* g = self.g.get()
        cdef int i, edges = 0
        for i in range(g.num_ops()):
            edges += <int>g.op(i).inputs.size()
        return g.num_ops(), edges

    def structure(self):
        """Flat structure for feature extraction, as plain lists: op type codes,
        constant flags, output flags (per op); senders, receivers, the last 4 dims of
        each edge's tensor right-aligned (4 per edge, 0 where the rank is smaller), its
        rank and its number of elements (per edge)."""
        cdef Graph* g = self.g.get()
        cdef int n = g.num_ops(), i, slot, k, r
        cdef vector[TensorRef] outs = g.outputs()
        cdef vector[char] constant = constant_ops(deref(g))
        cdef const vector[int64_t]* shape
        cdef int64_t numel
        types, senders, receivers, dims, ranks, numels = [], [], [], [], [], []
        cdef Op op
        for i in range(n):
            op = g.op(i)
            types.append(<int>op.type)
            for slot in range(<int>op.inputs.size()):
                senders.append(op.inputs[slot].op)
                receivers.append(i)
                shape = &g.op(op.inputs[slot].op).outputs[op.inputs[slot].index].shape
                r = <int>shape.size()
                numel = 1
                for k in range(r):
                    numel *= shape[0][k]
                for k in range(4):
                    dims.append(shape[0][r - 4 + k] if r - 4 + k >= 0 else 0)
                ranks.append(r)
                numels.append(numel)
        is_output = [0] * n
        for t in outs:
            is_output[t.op] = 1
        return types, [<int>c for c in constant], is_output, senders, receivers, dims, ranks, numels

    def hash(self):
        return deref(self.g).hash()

    def op_hashes(self):
        return list(deref(self.g).op_hashes())

    def topological_order(self):
        return list(deref(self.g).topological_order())

    def op_work(self, int i):
        cdef OpWork w = deref(self.g).op_work(i)
        return (w.flops, w.bytes_read, w.bytes_written)


cdef class CoreCostModel:
    """Base of the C++ cost-model wrappers: what search and candidates() accept."""

    def __cinit__(self, *args, **kwargs):
        self.ptr = NULL

    cdef CostModel* cptr(self) except NULL:
        if self.ptr == NULL:
            raise ValueError("cost model wrapper holds no C++ model")
        return self.ptr

    def op_costs(self, CoreGraph graph not None):
        return list(deref(self.cptr()).op_costs_ms(deref(graph.g)))

    def graph_cost(self, CoreGraph graph not None):
        return deref(self.cptr()).graph_cost_ms(deref(graph.g))

    def graph_cost_units(self, CoreGraph graph not None):
        """The graph cost as an exact integer of cost units (1e-12 ms), as search sums it."""
        return deref(self.cptr()).graph_cost_units(deref(graph.g))

    @property
    def prices_weight_residency(self):
        """Whether graph costs include the weight-residency term (taso/weight_residency.h)."""
        return deref(self.cptr()).prices_weight_residency()


cdef class AnalyticModel(CoreCostModel):
    """The roofline cost model on a named device profile."""

    def __cinit__(self, profile="h100"):
        self.model = make_unique[AnalyticCostModel](device_profile(_s(profile)))
        self.ptr = self.model.get()

    @property
    def profile(self):
        cdef DeviceProfile p = deref(self.model).profile()
        return {
            "name": p.name.decode(),
            "peak_flops": p.peak_flops,
            "memory_bandwidth": p.memory_bandwidth,
            "launch_overhead_us": p.launch_overhead_us,
            "kernel_latency_us": p.kernel_latency_us,
            "library_latency_us": p.library_latency_us,
            "compute_efficiency": p.compute_efficiency,
            "gemm_efficiency": p.gemm_efficiency,
            "memory_efficiency": p.memory_efficiency,
        }


cdef class TableModel(CoreCostModel):
    """Measured op costs by signature (taso/table_cost_model.h), analytic fallback."""

    def __cinit__(self, profile="h100", bint fused_epilogues=True, bint weight_residency=False):
        # fused: taso/epilogue.h's ops cost nothing; weight_residency: taso/weight_residency.h's term
        self.model.reset(new TableCostModel(device_profile(_s(profile))))
        deref(self.model).set_fused_epilogues(fused_epilogues)
        deref(self.model).set_weight_residency(weight_residency)
        self.ptr = self.model.get()

    def set(self, signature, double ms, double analytic_ms=0.0):
        deref(self.model).set(_s(signature), ms, analytic_ms)

    def __contains__(self, signature):
        return deref(self.model).contains(_s(signature))

    def __len__(self):
        return deref(self.model).size()

    def get(self, signature):
        return deref(self.model).get(_s(signature))

    def entries(self):
        """[(signature, ms, analytic_ms)] sorted by signature."""
        return [(e.first.decode(), e.second.ms, e.second.analytic_ms) for e in deref(self.model).entries()]

    @property
    def hits(self):
        return deref(self.model).hits()

    @property
    def misses(self):
        return deref(self.model).misses()

    @property
    def measured(self):
        return deref(self.model).measured()

    def missed_signatures(self):
        return sorted(s.decode() for s in deref(self.model).missed_signatures())

    def reset_counters(self):
        deref(self.model).reset_counters()

    def scale_for(self, op_type):
        return deref(self.model).scale_for(_s(op_type))

    @property
    def has_measurer(self):
        return deref(self.model).has_measurer()

    def clear_measurer(self):
        deref(self.model).clear_measurer()


def canonical_signature(signature):
    """`signature` as this version writes it (older tables: Add / Mul inputs in either
    order, element-wise ops by shape rather than element count)."""
    return canonical_signature_cpp(_s(signature)).decode()


def op_signatures(CoreGraph graph not None, CoreCostModel analytic=None):
    """[(op id, op type, signature, analytic ms)] of every computing, non-constant op
    (the ops a cost model charges); analytic ms is 0 without `analytic`."""
    cdef vector[char] constant = constant_ops(deref(graph.g))
    cdef vector[TensorType] types
    cdef Op op
    out = []
    for i in range(deref(graph.g).num_ops()):
        op = deref(graph.g).op(i)
        if constant[i] or is_source_op(op.type):
            continue
        types.clear()
        for r in op.inputs:
            types.push_back(deref(graph.g).tensor_type(r))
        ms = deref(analytic.cptr()).compute_cost_ms(op, types) if analytic is not None else 0.0
        out.append((i, op_schema(op.type).name.decode(), op_signature(op, types).decode(), ms))
    return out


def weight_residency(CoreGraph graph not None):
    """The graph's GEMV reads as the table model's weight-residency term prices them
    (taso/weight_residency.h): {distinct_bytes, term_ms, reads: {op id: (weight bytes,
    its share of the term in ms)}}."""
    cdef const Graph* g = graph.g.get()
    cdef unique_ptr[WeightResidency] r
    r.reset(new WeightResidency(deref(g), constant_ops(deref(g)), deref(g).op_hashes()))
    cdef const WeightRead* read
    reads = {}
    for i in range(deref(g).num_ops()):
        read = deref(r).read_of(i)
        if read != NULL:
            reads[i] = (read.bytes, deref(r).op_units(i) * 1e-12)
    return {"distinct_bytes": deref(r).distinct_bytes(), "term_ms": deref(r).term_units() * 1e-12, "reads": reads}


def parse_op_signature(str signature):
    """The op configuration a signature names: {type, ints, floats, strings, inputs,
    outputs} (inputs / outputs as [(dtype code, shape)]). ValueError for a malformed
    signature, UnknownOpError for an unknown op type."""
    cdef vector[TensorType] types
    cdef Op op = op_from_signature(_s(signature), &types)
    return {"type": op_schema(op.type).name.decode(),
            "ints": {k.decode(): list(v) for k, v in op.attrs.ints},
            "floats": {k.decode(): v for k, v in op.attrs.floats},
            "strings": {k.decode(): v.decode() for k, v in op.attrs.strings},
            "inputs": [(t.dtype, tuple(t.shape)) for t in types],
            "outputs": [(t.dtype, tuple(t.shape)) for t in op.outputs]}


def list_device_profiles():
    """Names of the built-in device profiles of the analytic cost model."""
    return [n.decode() for n in device_profile_names()]


include "_core_rules.pxi"
