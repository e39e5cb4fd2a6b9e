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
    """Schema of one op type: input counts and attributes (name -> (kind, required))."""
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
    }


def sort_topologically(deps, names):
    """Order for `deps[i]` = producers of op i; raises CycleError naming ops on a cycle."""
    cdef vector[vector[int]] d = deps
    cdef vector[string] n = [_s(x) for x in names]
    return list(topological_sort(d, n))


cdef class CoreGraph:
    """Owns one C++ taso::Graph."""

    cdef unique_ptr[Graph] g

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

    def hash(self):
        return deref(self.g).hash()

    def op_hashes(self):
        return list(deref(self.g).op_hashes())

    def topological_order(self):
        return list(deref(self.g).topological_order())

    def op_work(self, int i):
        cdef OpWork w = deref(self.g).op_work(i)
        return (w.flops, w.bytes_read, w.bytes_written)


cdef class AnalyticModel:
    """The roofline cost model on a named device profile."""

    cdef unique_ptr[AnalyticCostModel] model

    def __cinit__(self, profile="h100"):
        self.model = make_unique[AnalyticCostModel](device_profile(_s(profile)))

    @property
    def profile(self):
        cdef DeviceProfile p = deref(self.model).profile()
        return {
            "name": p.name.decode(),
            "peak_flops": p.peak_flops,
            "memory_bandwidth": p.memory_bandwidth,
            "launch_overhead_us": p.launch_overhead_us,
            "compute_efficiency": p.compute_efficiency,
            "memory_efficiency": p.memory_efficiency,
        }

    def op_costs(self, CoreGraph graph):
        return list(deref(self.model).op_costs_ms(deref(graph.g)))

    def graph_cost(self, CoreGraph graph):
        return deref(self.model).graph_cost_ms(deref(graph.g))


def list_device_profiles():
    """Names of the built-in device profiles of the analytic cost model."""
    return [n.decode() for n in device_profile_names()]
