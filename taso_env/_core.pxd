# Declarations mirrored from the C++ public headers (taso_env/csrc/include/taso/).
from libc.stdint cimport int64_t, uint64_t
from libcpp cimport bool
from libcpp.map cimport map
from libcpp.memory cimport unique_ptr
from libcpp.set cimport set as cpp_set
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector

# Translates the active C++ exception into the matching taso_env.errors class; used as
# the `except +` handler of every core call (defined in _core.pyx).
cdef int raise_core_error() except -1


cdef extern from "taso/types.h" namespace "taso":
    int dtype_size(int dtype) except +raise_core_error

    cdef cppclass TensorType:
        vector[int64_t] shape
        int dtype
        int64_t num_elements()
        int64_t num_bytes() except +raise_core_error

    cdef cppclass TensorRef:
        int op
        int index

    cdef cppclass Attrs:
        map[string, vector[int64_t]] ints
        map[string, double] floats
        map[string, string] strings


cdef extern from "taso/errors.h" namespace "taso":
    pair[int, string] classify_current_exception()


cdef extern from "taso/op.h" namespace "taso":
    cdef enum class OpType(int):
        pass

    cdef enum class AttrKind(int):
        pass

    cdef enum class ElementwiseClass(int):
        pass

    cdef cppclass AttrSpec:
        string name
        AttrKind kind
        bool required

    cdef cppclass OpSchema:
        string name
        int min_inputs
        int max_inputs
        bool declared_outputs
        ElementwiseClass elementwise
        double elementwise_flops
        vector[AttrSpec] attrs

    OpSchema op_schema(OpType type) except +raise_core_error
    OpType op_type_from_name(const string& name) except +raise_core_error
    vector[string] op_type_names()
    bool is_source_op(OpType type)

    cdef cppclass Op:
        OpType type
        string name
        vector[TensorRef] inputs
        Attrs attrs
        vector[TensorType] outputs

    cdef cppclass OpWork:
        double flops
        double bytes_read
        double bytes_written


cdef extern from "taso/graph.h" namespace "taso":
    cdef cppclass OpSpec:
        string type
        string name
        vector[TensorRef] inputs
        Attrs attrs
        vector[TensorType] declared_outputs

    cdef cppclass Graph:
        Graph()
        Graph(const Graph&)
        int add_op(const OpSpec& spec) except +raise_core_error
        void add_output(const TensorRef& tensor, const string& name) except +raise_core_error
        int num_ops()
        int num_compute_ops()
        Op op(int id) except +raise_core_error
        TensorType tensor_type(const TensorRef& t) except +raise_core_error
        vector[TensorRef] outputs()
        vector[string] output_names()
        uint64_t hash()
        vector[uint64_t] op_hashes()
        vector[int] topological_order() except +raise_core_error
        OpWork op_work(int id) except +raise_core_error

    vector[int] topological_sort(const vector[vector[int]]& deps, const vector[string]& names) except +raise_core_error


cdef extern from "taso/cost_model.h" namespace "taso":
    int64_t cost_units(double ms)
    cdef cppclass CostModel:
        double compute_cost_ms(const Op& op, const vector[TensorType]& input_types) except +raise_core_error
        vector[double] op_costs_ms(const Graph& graph) except +raise_core_error
        double graph_cost_ms(const Graph& graph) except +raise_core_error
        int64_t graph_cost_units(const Graph& graph) except +raise_core_error
        bool prices_weight_residency()

    cdef cppclass DeviceProfile:
        string name
        double peak_flops
        double memory_bandwidth
        double launch_overhead_us
        double kernel_latency_us
        double library_latency_us
        double compute_efficiency
        double gemm_efficiency
        double memory_efficiency

    vector[char] constant_ops(const Graph& graph) except +raise_core_error
    DeviceProfile device_profile(const string& name) except +raise_core_error
    vector[string] device_profile_names()

    cdef cppclass AnalyticCostModel(CostModel):
        AnalyticCostModel(DeviceProfile profile)
        DeviceProfile profile()


cdef extern from "taso/table_cost_model.h" namespace "taso":
    string op_signature(const Op& op, const vector[TensorType]& input_types) except +raise_core_error
    Op op_from_signature(const string& signature, vector[TensorType]* input_types) except +raise_core_error
    string canonical_signature_cpp "taso::canonical_signature"(const string& signature) except +raise_core_error

    cdef cppclass CostEntry:
        double ms
        double analytic_ms

    cdef cppclass TableCostModel(CostModel):
        TableCostModel(DeviceProfile profile)
        void set(const string& signature, double ms, double analytic_ms) except +raise_core_error
        bool contains(const string& signature)
        double get(const string& signature) except +raise_core_error
        vector[pair[string, CostEntry]] entries()
        size_t size()
        void clear_measurer()
        bool has_measurer()
        int64_t hits()
        int64_t misses()
        int64_t measured()
        const cpp_set[string]& missed_signatures()
        void reset_counters()
        double scale_for(const string& op_type)
        void set_fused_epilogues(bool on)
        void set_weight_residency(bool on)


cdef extern from "taso/weight_residency.h" namespace "taso":
    cdef cppclass WeightRead:
        uint64_t value
        int64_t bytes
        int count

    cdef cppclass WeightResidency:
        WeightResidency(const Graph& graph, const vector[char]& constant, const vector[uint64_t]& hashes) \
            except +raise_core_error
        const WeightRead* read_of(int id)
        int64_t op_units(int id)
        int64_t term_units()
        int64_t distinct_bytes()


cdef extern from "taso/rule.h" namespace "taso":
    cdef cppclass Expr:
        int kind
        vector[int64_t] ints
        double number
        string name
        vector[Expr] args

    cdef cppclass PatternOp:
        string name
        string type
        vector[string] inputs
        map[string, Expr] attrs

    cdef cppclass Pattern:
        vector[PatternOp] ops
        vector[string] outputs

    cdef cppclass RuleSpec:
        int id
        string name
        Pattern source
        Pattern target
        map[string, vector[Expr]] shapes
        vector[Expr] constraints

    cdef cppclass Candidate:
        int rule_id
        vector[int] location
        double cost_delta
        int64_t cost_delta_units
        uint64_t child_hash

    cdef cppclass Enumeration:
        vector[Candidate] candidates
        vector[Candidate] cycle_rejected

    cdef cppclass Successor:
        uint64_t child_hash
        bint has_candidates
        double best_delta

    cdef cppclass RuleSet:
        RuleSet(vector[RuleSpec] specs) except +raise_core_error
        int size()
        vector[Candidate] candidates(const Graph& graph, const CostModel& model, int rule_id,
                                    bool child_hashes) except +raise_core_error
        Graph apply(const Graph& graph, int rule_id, const vector[int]& location) except +raise_core_error
        vector[Successor] successors(const Graph& graph, const CostModel& model, const Enumeration& current,
                                     const vector[int]& which) except +raise_core_error
        Enumeration enumeration(const Graph& graph, const CostModel& model) except +raise_core_error
        unique_ptr[Graph] step(const Graph& graph, const CostModel& model, const Enumeration& current, int which,
                               Enumeration* next) except +raise_core_error

    vector[double] enumeration_op_costs_ms "taso::RuleSet::op_costs_ms"(const Graph& graph, const CostModel& model,
                                                                      const Enumeration& current) except +raise_core_error


cdef extern from "taso/search.h" namespace "taso":
    cdef cppclass SearchResult:
        Graph graph
        double initial_cost
        double final_cost
        int expansions
        int graphs_seen
        vector[int] applied
        bool complete
        int graphs_built
        int peak_graphs_stored

    SearchResult greedy_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                               int max_steps, double min_gain) except +raise_core_error
    SearchResult backtracking_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                                     double alpha, int budget, bool incremental, int store_ops) except +raise_core_error
    SearchResult exhaustive_search(const Graph& graph, const RuleSet& rules, const CostModel& model,
                                   int max_ops, int max_states) except +raise_core_error


# Owning wrappers shared with other extension modules (taso_env._cuda cimports them).
cdef class CoreGraph:
    cdef unique_ptr[Graph] g


cdef class CoreCostModel:
    cdef CostModel* ptr
    cdef CostModel* cptr(self) except NULL


cdef class AnalyticModel(CoreCostModel):
    cdef unique_ptr[AnalyticCostModel] model


cdef class TableModel(CoreCostModel):
    cdef unique_ptr[TableCostModel] model
