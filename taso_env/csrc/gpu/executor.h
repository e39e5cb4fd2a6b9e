// Executes a taso::Graph on the GPU and measures it end to end.
//
// Construction plans the whole graph once (the passes of planning.h): one device arena
// holds every tensor the graph needs, library descriptors and parameter arrays are built,
// cuDNN algorithms chosen, and every Input / Weight gets deterministic random data
// (replace it with set_source). Ops whose value is known before run time (weights,
// constants and ops computed only from them) run once before the first run, as
// deployment folds them; run() and measure() execute the rest. measure() captures one
// run into a CUDA graph on first use and times replays of it (warm-up, median of
// repeats). Everything is freed by the destructor: repeated measurements do not grow
// device memory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "taso/graph.h"
#include "views.h"

namespace taso {
namespace cuda {

// One op's implementation choices in a tuning plan (taso_env/tuning, docs/tuning.md);
// -1 / 0 keep the executor's default decision.
struct OpPlan {
  // Conv2D: cuDNN algorithm (cudnnConvolutionFwdAlgo_t), math type (cudnnMathType_t) and
  // cuDNN's fused bias/residual/ReLU call (1) or the convolution + our epilogue (0).
  int conv_algo = -1;
  int conv_math = -1;
  int conv_fused_call = 0;
  // Conv2D: 0 keeps its epilogue ops (activation / residual Add) separate, 1 or -1 fuses
  // them where fusion.h allows.
  int fuse = -1;
  // Ops run by our own kernels: threads per block (32..1024, a multiple of 32) and
  // elements per thread (1..64); 0 keeps the default (256, 1).
  int threads = 0;
  int items_per_thread = 0;
};

struct ExecutorOptions {
  MathMode math = MathMode::kFP32;
  // Ops whose outputs the caller provides (set_host_fed) instead of the GPU computing
  // them, e.g. opaque ONNX ops evaluated on the host. Their inputs are not computed
  // unless something else needs them.
  std::vector<int> host_fed_ops;
  uint64_t seed = 0;
  // Copies of the step sequence per captured graph (per-op measurement replays one op
  // ~100 times back to back); measure() reports the time of one copy.
  int replicas = 1;
  // Per-op implementation choices by op id (a tuning plan); validated at construction
  // (ValueError / IndexError naming the op).
  std::map<int, OpPlan> plan;
  // Values of one-element Weights the caller uploads before running (Weight op id ->
  // value), built into the plan: a Gather of such an index is a strided view of its data
  // (views.h), a MatMul operand scaled by such a factor folds it into the GEMM's alpha
  // (gemm_fusion.h). set_source refuses to change them afterwards.
  std::map<int, double> known_scalars;
  // Bytes (a multiple of 256) the arena's tensors are shifted by from the start of its
  // allocation. Where a tensor lies in memory moves a graph's runtime by a few tenths of
  // a percent (caches and memory channels are picked by address bits); measurements
  // that must rank graphs differing by that much sample several placements
  // (taso_env/gpu/interleaved_measurement.py).
  size_t arena_offset = 0;
  // false turns every executor fusion off (conv and GEMM epilogues, element-wise chains,
  // strided views, in-place Concats and Splits), for comparison.
  bool fuse = true;
  // How the steps' convolutions and GEMMs choose their algorithms.
  AlgoSearch algo_search;
};

struct Measurement {
  double median_ms = 0, min_ms = 0, mean_ms = 0;
  int repeats = 0;
  int inner = 1;            // graph replays per timed sample
  bool cuda_graph = false;  // replayed from a captured CUDA graph
  std::vector<double> samples_ms;
};

// A compiled op: enqueues its kernels on a stream.
using Step = std::function<void(cudaStream_t)>;

// Shared by the executor's step compiler (op_steps.cc).
struct StepResources {
  // Device dtype of the graph's float32 tensors (float_storage(math): kFloat32, kFloat16
  // or kBFloat16); every step reads and writes float tensors in it.
  int float_dtype = kFloat32;
  size_t workspace_bytes = 0;  // the largest cuDNN workspace any step needs
  size_t scratch_bytes = 0;    // the largest explicit-padding scratch
  DeviceBuffer workspace, scratch;
  std::vector<DeviceBuffer> params;  // device parameter arrays owned by steps
  const std::map<int, OpPlan>* plan = nullptr;  // the executor's tuning plan (may be null)
  std::map<int, OpPlan> chosen;                  // Conv2D op id -> what its step runs
  AlgoSearch algo_search;                        // the executor's options.algo_search
};

struct PlanningReport;  // planning.h
struct StepPlan;        // step_plan.h

class Executor {
 public:
  Executor(const Graph& graph, ExecutorOptions options = {});
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Copies host data into an Input or Weight by name. Throws GraphError naming an
  // unknown source, ValueError on a size mismatch.
  void set_source(const std::string& name, const void* data, size_t bytes);
  // Copies host data into output `index` of a host-fed op.
  void set_host_fed(int op_id, int index, const void* data, size_t bytes);

  // Runs the graph once and waits for it.
  void run();
  // Copies graph output `i` to the host.
  void read_output(int i, void* data, size_t bytes) const;
  const TensorType& output_type(int i) const;
  int num_outputs() const { return static_cast<int>(graph_.outputs().size()); }

  // Times the graph: `warmup` replays, then `repeats` samples of `inner` replays each
  // (inner <= 0: chosen so a sample lasts about 0.5 ms, at most 100).
  Measurement measure(int warmup = 10, int repeats = 50, int inner = 0);

  // Number of steps run per execution (compute ops not folded or host-fed).
  int num_steps() const { return static_cast<int>(steps_.size()); }
  // What each planning pass decided (planning.h).
  const PlanningReport& planning() const { return *planning_; }
  // Ops that run no step of their own (fused into another op's step, strided views,
  // in-place Concats and Splits).
  int fused_ops() const;
  // Per op: the op whose step computes it when that is another op's (the last op of its
  // convolution epilogue, GEMM fusion or element-wise chain; for a view, itself), else
  // -1; and that step's kind (step_plan.h's StepKind).
  const std::vector<int>& fused_into() const;
  const std::vector<int>& fused_kind() const;
  // The Concats that run no kernel (their producers write into their slices), in id order.
  const std::vector<int>& in_place_concats() const;
  // Conv2D op id -> the cuDNN choice its step runs (algorithm, math type, fused call).
  const std::map<int, OpPlan>& conv_choices() const { return res_->chosen; }
  size_t arena_bytes() const { return arena_.bytes(); }
  MathMode math() const { return options_.math; }

 private:
  void* tensor_ptr(const TensorRef& t) const;
  // The device dtype of a graph dtype (float32 is stored 16-bit in fp16 / bf16) and the
  // device bytes of a tensor.
  int stored(int dtype) const;
  size_t stored_bytes(const TensorType& t) const;
  // Copies host data of graph type `t` to device memory `to`, cast to the stored dtype.
  void upload(const TensorType& t, const void* data, void* to);
  // A float32 device buffer of at least `bytes` for the casts of 16-bit modes, kept and
  // grown across calls (feeds and outputs pass through it on every run).
  void* staging(size_t bytes) const;
  // Gives every source and host-fed op deterministic random data and compiles the
  // planned steps (the last stage of construction).
  void compile_steps(const StepPlan& fusion);
  void fold_constants();
  void enqueue_steps(cudaStream_t s) const;
  void capture();
  void release_graph();

  Graph graph_;
  ExecutorOptions options_;
  std::unique_ptr<PlanningReport> planning_;
  DeviceBuffer arena_;
  mutable DeviceBuffer staging_;
  std::unique_ptr<StepResources> res_;
  std::vector<Step> const_steps_;
  std::vector<Step> steps_;
  bool constants_dirty_ = true;
  cudaGraph_t cuda_graph_ = nullptr;
  cudaGraphExec_t cuda_graph_exec_ = nullptr;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Compiles op `op_id` of `graph` into a step reading `inputs` and writing `outputs`
// (device pointers into the arena). Throws UnsupportedGraphError naming the op.
Step compile_op(const Graph& graph, int op_id, const std::vector<void*>& inputs,
                const std::vector<void*>& outputs, MathMode math, StepResources& res);
// Copies the elements of a strided view, in row-major order of its shape, to `to`.
Step compile_strided_copy(const StridedView& from, int elem_size, void* to);
// Compiles Conv2D op `conv_id` with an epilogue folded in by the executor: y =
// act(conv + bias + residual) written to `output` (residual may be null).
Step compile_fused_conv(const Graph& graph, int conv_id, const std::vector<void*>& inputs, const void* residual,
                        void* output, int activation, MathMode math, StepResources& res);

}  // namespace cuda
}  // namespace taso
