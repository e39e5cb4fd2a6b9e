# cython: language_level=3, boundscheck=False, wraparound=False
"""Cython face of the CUDA backend (taso_env/csrc/gpu). Internal: use
taso_env.gpu.cuda_backend.

Arrays cross the boundary as contiguous numpy arrays whose data pointer is handed to
C++ (no numpy headers needed). C++ exceptions become the typed errors of
taso_env.gpu.cuda_backend (CudaBackendError, UnsupportedGraphError) or taso_env.errors.
"""

from cython.operator cimport dereference as deref
from libc.stdint cimport uintptr_t
from libcpp.map cimport map
from libcpp.memory cimport unique_ptr
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector

import numpy as np

from taso_env._core cimport CoreGraph, TableModel


cdef int raise_cuda_error() except -1:
    cdef pair[int, string] err = classify_cuda_exception()
    from taso_env import errors
    from taso_env.gpu import cuda_backend
    message = err.second.decode("utf-8", "replace")
    if err.first == 100:
        raise cuda_backend.CudaBackendError(message)
    if err.first == 101:
        raise cuda_backend.UnsupportedGraphError(message)
    classes = {1: errors.ShapeError, 2: errors.OpAttributeError, 3: errors.GraphError, 4: errors.CycleError,
               5: errors.UnknownOpError, 6: ValueError, 7: IndexError}
    raise classes.get(err.first, errors.TasoEnvError)(message)


cdef MathMode _math(str math) except *:
    if math == "fp32":
        return MathMode.kFP32
    if math == "tf32":
        return MathMode.kTF32
    if math == "fp16":
        return MathMode.kFP16
    if math == "bf16":
        return MathMode.kBF16
    raise ValueError(f"unknown math mode {math!r}; use 'fp32' (strict), 'tf32', 'fp16' or 'bf16'")


_PLAN_KEYS = ("conv_algo", "conv_math", "conv_fused_call", "fuse", "threads", "items_per_thread")


cdef OpPlan _op_plan(choice) except *:
    cdef OpPlan p
    unknown = set(choice) - set(_PLAN_KEYS)
    if unknown:
        raise ValueError(f"unknown tuning-plan knobs {sorted(unknown)}; known: {list(_PLAN_KEYS)}")
    p.conv_algo = int(choice.get("conv_algo", -1))
    p.conv_math = int(choice.get("conv_math", -1))
    p.conv_fused_call = int(choice.get("conv_fused_call", 0))
    p.fuse = int(choice.get("fuse", -1))
    p.threads = int(choice.get("threads", 0))
    p.items_per_thread = int(choice.get("items_per_thread", 0))
    return p


cdef string _s(obj) except *:
    return obj if isinstance(obj, bytes) else str(obj).encode("utf-8")


def _switches(fuse, cudnn_find, tune_log):
    """The backend's switches: each as the caller gives it, or from its environment
    variable where None (taso_env.gpu.cuda_backend.backend_switches)."""
    from taso_env.gpu import cuda_backend
    return cuda_backend.backend_switches(fuse=fuse, cudnn_find=cudnn_find, tune_log=tune_log)


cdef AlgoSearch _algo_search(switches) except *:
    cdef AlgoSearch search
    search.cudnn_find = switches.cudnn_find
    search.log = switches.tune_log
    return search


cdef ExecutorOptions _executor_options(str math, host_fed_ops, unsigned long long seed, plan, known_scalars,
                                       size_t arena_offset, switches) except *:
    cdef ExecutorOptions opts
    cdef OpPlan p
    opts.math = _math(math)
    opts.seed = seed
    opts.replicas = 1
    opts.arena_offset = arena_offset
    opts.fuse = switches.fuse
    opts.algo_search = _algo_search(switches)
    for op_id in host_fed_ops:
        opts.host_fed_ops.push_back(op_id)
    for op_id, choice in (plan or {}).items():
        p = _op_plan(choice)
        opts.plan[<int>op_id] = p
    for op_id, value in (known_scalars or {}).items():
        opts.known_scalars[<int>op_id] = <double>value
    return opts


_STEP_CALLS = {0: "op", 1: "conv", 2: "gemm", 3: "chain", 4: "strided_copy"}
_VIEW_STEP = 4  # step_plan.h's kViewStep: a strided view, computed by no step


cdef dict _report(PlanningReport r):
    """The planning passes' results as Python data (taso_env.gpu.cuda_backend.PlanningReport)."""
    cdef size_t i
    cdef PlannedStep step
    n = r.needed.size()
    offsets = {}
    for i in range(n):
        if r.needed[i]:
            offsets[i] = [None if o == kNoOffset else o for o in r.in_place.offsets[i]]
    steps = []
    for step in r.steps:
        steps.append({"op": step.op, "call": _STEP_CALLS[<int>step.call], "constant": step.constant,
                      "ops": list(step.ops)})
    return {
        "host_fed": [i for i in range(n) if r.host_fed[i]],
        "needed": [i for i in range(n) if r.needed[i]],
        "arena_bytes": r.arena.bytes,
        "aliases": [i for i in range(n) if r.arena.alias[i]],
        "offsets": offsets,
        "folded": list(r.constants.folded),
        "strided_views": [i for i in range(n) if r.fused_kind[i] == _VIEW_STEP],
        "in_place_concats": list(r.in_place.in_place_concats),
        "in_place_splits": list(r.in_place.in_place_splits),
        "fused_ops": r.fused_ops,
        "steps": steps,
    }


def plan_graph(CoreGraph graph not None, str math="fp32", host_fed_ops=(), plan=None, known_scalars=None,
               size_t arena_offset=0, fuse=None):
    """What an executor of the graph with these options plans, pass by pass, computed
    without a GPU (a dict; see taso_env.gpu.cuda_backend.PlanningReport)."""
    cdef ExecutorOptions opts = _executor_options(math, host_fed_ops, 0, plan, known_scalars, arena_offset,
                                                  _switches(fuse, None, None))
    return _report(planning_report(deref(graph.g), opts))


def num_devices():
    """Number of CUDA devices (0 when there is no driver or GPU)."""
    return device_count()


def info():
    """Device name, compute capability, memory and library versions."""
    cdef DeviceInfo d = device_info()
    return {"name": d.name.decode(), "compute_capability": f"{d.cc_major}.{d.cc_minor}",
            "total_memory": d.total_memory, "cuda_runtime": d.cuda_runtime, "cuda_driver": d.cuda_driver,
            "cudnn": d.cudnn_version, "cublas": d.cublas_version}


def mem_info():
    """(free, total) bytes of device memory."""
    cdef pair[size_t, size_t] m = memory_info()
    return m.first, m.second


def cache_sizes():
    """Sizes of the process-wide caches: chosen conv and GEMM algorithms, measured op configs."""
    return {"conv_algorithms": conv_algo_cache_size(), "gemm_algorithms": gemm_algo_cache_size(),
            "op_costs": op_cache_size()}


cdef class GpuExecutor:
    """Owns one taso::cuda::Executor for a graph (freed in __dealloc__ or close())."""

    cdef unique_ptr[Executor] ex
    cdef object _dtypes

    def __cinit__(self, CoreGraph graph not None, str math="fp32", host_fed_ops=(), unsigned long long seed=0, plan=None,
                  known_scalars=None, size_t arena_offset=0, fuse=None, cudnn_find=None, tune_log=None):
        cdef ExecutorOptions opts = _executor_options(math, host_fed_ops, seed, plan, known_scalars, arena_offset,
                                                      _switches(fuse, cudnn_find, tune_log))
        self.ex.reset(new Executor(deref(graph.g), opts))

    cdef Executor* _get(self) except NULL:
        if not self.ex:
            raise ValueError("this executor has been closed")
        return self.ex.get()

    def close(self):
        """Frees every device buffer of this executor now."""
        self.ex.reset()

    def set_source(self, name, array):
        a = np.ascontiguousarray(array)
        self._get().set_source(_s(name), <const void*><uintptr_t>a.ctypes.data, a.nbytes)

    def set_host_fed(self, int op_id, int index, array):
        a = np.ascontiguousarray(array)
        self._get().set_host_fed(op_id, index, <const void*><uintptr_t>a.ctypes.data, a.nbytes)

    def run(self):
        self._get().run()

    def num_outputs(self):
        return self._get().num_outputs()

    def output(self, int i, np_dtype):
        """Graph output i as a new numpy array of `np_dtype`."""
        cdef TensorType t = self._get().output_type(i)
        out = np.empty(tuple(t.shape), dtype=np_dtype)
        self._get().read_output(i, <void*><uintptr_t>out.ctypes.data, out.nbytes)
        return out

    def measure(self, int warmup=10, int repeats=50, int inner=0):
        cdef Measurement m = self._get().measure(warmup, repeats, inner)
        return {"median_ms": m.median_ms, "min_ms": m.min_ms, "mean_ms": m.mean_ms, "repeats": m.repeats,
                "inner": m.inner, "cuda_graph": m.cuda_graph, "samples_ms": list(m.samples_ms)}

    @property
    def num_steps(self):
        return self._get().num_steps()

    @property
    def fused_ops(self):
        return self._get().fused_ops()

    @property
    def fused_steps(self):
        """Per op: (the op whose step computes it, that step's kind) where that is not
        its own step (kind 'conv', 'gemm', 'chain' or 'view'; a view is its own), else None."""
        kinds = {1: "conv", 2: "gemm", 3: "chain", 4: "view"}
        into, kind = self._get().fused_into(), self._get().fused_kind()
        return [(into[i], kinds[kind[i]]) if kind[i] else None for i in range(len(into))]

    @property
    def in_place_concats(self):
        """The Concat op ids that run no kernel (their producers write into their slices)."""
        return list(self._get().in_place_concats())

    def conv_choices(self):
        """{conv op id: {conv_algo, conv_math, conv_fused_call, fuse}}: what each
        convolution step runs (the executor's own choice where no plan forced one)."""
        cdef map[int, OpPlan] c = self._get().conv_choices()
        out = {}
        for item in c:
            out[item.first] = {"conv_algo": item.second.conv_algo, "conv_math": item.second.conv_math,
                               "conv_fused_call": item.second.conv_fused_call, "fuse": item.second.fuse}
        return out

    @property
    def arena_bytes(self):
        return self._get().arena_bytes()

    def planning_report(self):
        """What each planning pass decided for this executor (a dict, as plan_graph's)."""
        return _report(self._get().planning())

    def __dealloc__(self):
        self.ex.reset()


cdef OpMeasureOptions _measure_options(int copies, int warmup, int repeats, int threads, int items_per_thread,
                                       fuse, cudnn_find, tune_log) except *:
    cdef OpMeasureOptions o
    switches = _switches(fuse, cudnn_find, tune_log)
    o.copies = copies
    o.warmup = warmup
    o.repeats = repeats
    o.threads = threads
    o.items_per_thread = items_per_thread
    o.fuse = switches.fuse
    o.algo_search = _algo_search(switches)
    return o


def measure_ops(CoreGraph graph not None, str math="fp32", fuse=None, cudnn_find=None, tune_log=None):
    """Measures every computing, non-constant op of the graph (each configuration once).

    Returns (costs, skipped): costs = [(signature, op type, ms, analytic ms)], skipped =
    signatures of ops the backend cannot run (opaque ops)."""
    cdef vector[string] skipped
    cdef OpMeasureOptions o = _measure_options(100, 2, 5, 0, 0, fuse, cudnn_find, tune_log)
    cdef vector[OpCost] costs = measure_graph_ops(deref(graph.g), _math(math), &skipped, o)
    return ([(c.signature.decode(), c.op_type.decode(), c.ms, c.analytic_ms) for c in costs],
            [s.decode() for s in skipped])


def measure_op(CoreGraph graph not None, int op_id, str math="fp32", int copies=100, int warmup=2, int repeats=5,
               int threads=0, int items_per_thread=0, fuse=None, cudnn_find=None, tune_log=None):
    """Milliseconds of op `op_id` of the graph run in isolation (cached per signature and
    launch parameters)."""
    cdef OpMeasureOptions o = _measure_options(copies, warmup, repeats, threads, items_per_thread, fuse, cudnn_find,
                                               tune_log)
    cdef Op op = deref(graph.g).op(op_id)
    cdef vector[TensorType] types
    for r in op.inputs:
        types.push_back(deref(graph.g).tensor_type(r))
    return measure_op_ms(op, types, _math(math), o)


def measure_signature(str signature, str math="fp32", int copies=100, int warmup=2, int repeats=5, fuse=None,
                      cudnn_find=None, tune_log=None):
    """Milliseconds of the op configuration `signature` (op_signature's format) run in
    isolation, as measure_op does."""
    cdef OpMeasureOptions o = _measure_options(copies, warmup, repeats, 0, 0, fuse, cudnn_find, tune_log)
    cdef vector[TensorType] types
    cdef Op op = op_from_signature(signature.encode(), &types)
    return measure_op_ms(op, types, _math(math), o)


def install_measurer(TableModel model, str math="fp32", fuse=None, cudnn_find=None, tune_log=None):
    """Makes the table model measure its misses on this GPU and store them."""
    cdef OpMeasureOptions o = _measure_options(100, 2, 5, 0, 0, fuse, cudnn_find, tune_log)
    install_cuda_measurer(deref(model.model), _math(math), o)


def graph_fusion_sites(CoreGraph graph not None, host_fed_ops=(), fuse=None):
    """The convolutions whose epilogue the executor fuses by default (none without
    `fuse`): [{conv, last, mid, residual, activation}] (op ids; mid -1 when none)."""
    cdef vector[int] hf
    for i in host_fed_ops:
        hf.push_back(i)
    cdef vector[FusionSite] sites = fusion_sites(deref(graph.g), hf, _switches(fuse, None, None).fuse)
    return [{"conv": s.conv, "last": s.last, "mid": s.mid, "residual": s.residual, "activation": s.activation}
            for s in sites]


def conv_choice_space(CoreGraph graph not None, int conv_id, bint fused_epilogue, host_fed_ops=(), str math="fp32",
                      tune_log=None):
    """Every cuDNN choice for Conv2D `conv_id` (and the GEMM path, algorithm 100, for a
    pointwise one; our kernel, algorithm 101, for a depthwise one), timed as the executor runs it:
    [{conv_algo, conv_math, conv_fused_call, workspace, ms}]."""
    cdef vector[int] hf
    for i in host_fed_ops:
        hf.push_back(i)
    cdef AlgoSearch search = _algo_search(_switches(None, None, tune_log))
    cdef vector[ConvAlgo] c = conv_candidates(deref(graph.g), conv_id, fused_epilogue, hf, _math(math), search)
    return [{"conv_algo": a.algo, "conv_math": a.math, "conv_fused_call": int(a.fused), "workspace": a.workspace,
             "ms": a.ms} for a in c]
