# Declarations mirrored from the CUDA backend's headers (taso_env/csrc/gpu/).
from libc.stdint cimport int64_t, uint64_t
from libcpp cimport bool
from libcpp.map cimport map
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from taso_env._core cimport Graph, Op, TableCostModel, TensorType, op_from_signature

# Translates the active C++ exception (CudaError, UnsupportedGraphError or a core error)
# into a Python exception; the `except +` handler of every backend call.
cdef int raise_cuda_error() except -1


cdef extern from "common.h" namespace "taso::cuda":
    pair[int, string] classify_cuda_exception()

    cdef enum class MathMode(int):
        kFP32
        kTF32
        kFP16
        kBF16

    cdef cppclass DeviceInfo:
        string name
        int cc_major
        int cc_minor
        size_t total_memory
        int cuda_runtime
        int cuda_driver
        size_t cudnn_version
        int cublas_version

    cdef cppclass AlgoSearch:
        bool cudnn_find
        bool log

    DeviceInfo device_info() except +raise_cuda_error
    int device_count()
    pair[size_t, size_t] memory_info() except +raise_cuda_error


cdef extern from "planning.h" namespace "taso::cuda":
    size_t kNoOffset

    cdef enum class StepCall(int):
        kOp
        kFusedConv
        kGemm
        kChain
        kStridedCopy

    cdef cppclass ArenaPlan:
        vector[vector[size_t]] offsets
        vector[char] alias
        size_t bytes

    cdef cppclass ConstantFolding:
        vector[char] constant
        vector[int] folded

    cdef cppclass InPlaceViews:
        vector[int] in_place_concats
        vector[int] in_place_splits
        vector[vector[size_t]] offsets

    cdef cppclass PlannedStep:
        int op
        StepCall call
        bool constant
        vector[int] ops

    cdef cppclass PlanningReport:
        vector[char] host_fed
        vector[char] needed
        ArenaPlan arena
        ConstantFolding constants
        vector[int] fused_into
        vector[int] fused_kind
        int fused_ops
        InPlaceViews in_place
        vector[PlannedStep] steps


cdef extern from "executor.h" namespace "taso::cuda":
    cdef cppclass OpPlan:
        int conv_algo
        int conv_math
        int conv_fused_call
        int fuse
        int threads
        int items_per_thread

    cdef cppclass ExecutorOptions:
        MathMode math
        vector[int] host_fed_ops
        uint64_t seed
        int replicas
        map[int, OpPlan] plan
        map[int, double] known_scalars
        size_t arena_offset
        bool fuse
        AlgoSearch algo_search

    cdef cppclass Measurement:
        double median_ms
        double min_ms
        double mean_ms
        int repeats
        int inner
        bool cuda_graph
        vector[double] samples_ms

    cdef cppclass Executor:
        Executor(const Graph& graph, ExecutorOptions options) except +raise_cuda_error
        void set_source(const string& name, const void* data, size_t bytes) except +raise_cuda_error
        void set_host_fed(int op_id, int index, const void* data, size_t bytes) except +raise_cuda_error
        void run() except +raise_cuda_error
        void read_output(int i, void* data, size_t bytes) except +raise_cuda_error
        const TensorType& output_type(int i) except +raise_cuda_error
        int num_outputs()
        Measurement measure(int warmup, int repeats, int inner) except +raise_cuda_error
        int num_steps()
        size_t arena_bytes()
        int fused_ops()
        const vector[int]& fused_into()
        const vector[int]& fused_kind()
        const vector[int]& in_place_concats()
        const map[int, OpPlan]& conv_choices()
        const PlanningReport& planning()


cdef extern from "planning.h" namespace "taso::cuda":
    PlanningReport planning_report(const Graph& graph, const ExecutorOptions& options) except +raise_cuda_error


cdef extern from "op_measure.h" namespace "taso::cuda":
    cdef cppclass OpMeasureOptions:
        int copies
        int warmup
        int repeats
        int threads
        int items_per_thread
        bool fuse
        AlgoSearch algo_search

    cdef cppclass OpCost:
        string signature
        string op_type
        double ms
        double analytic_ms

    double measure_op_ms(const Op& op, const vector[TensorType]& input_types, MathMode math,
                         const OpMeasureOptions& options) except +raise_cuda_error
    vector[OpCost] measure_graph_ops(const Graph& graph, MathMode math, vector[string]* skipped,
                                     const OpMeasureOptions& options) except +raise_cuda_error
    size_t op_cache_size()
    void install_cuda_measurer(TableCostModel& model, MathMode math,
                               const OpMeasureOptions& options) except +raise_cuda_error


cdef extern from "library_ops.h" namespace "taso::cuda":
    size_t conv_algo_cache_size()


cdef extern from "gemm_lt.h" namespace "taso::cuda":
    size_t gemm_algo_cache_size()


cdef extern from "tuning.h" namespace "taso::cuda":
    cdef cppclass ConvAlgo:
        int algo
        int math
        size_t workspace
        float ms
        bool fused

    cdef cppclass FusionSite:
        int conv
        int last
        int mid
        bool residual
        int activation

    vector[FusionSite] fusion_sites(const Graph& graph, const vector[int]& host_fed_ops,
                                    bool fuse) except +raise_cuda_error
    vector[ConvAlgo] conv_candidates(const Graph& graph, int conv_id, bool fused_epilogue,
                                     const vector[int]& host_fed_ops, MathMode math,
                                     const AlgoSearch& search) except +raise_cuda_error
