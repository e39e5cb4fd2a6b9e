// The graph executor: planning, constant folding, runs and CUDA-graph measurement.
#include "executor.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "constant_sharing.h"
#include "kernels.h"
#include "planning.h"
#include "step_plan.h"
#include "taso/errors.h"

namespace taso {
namespace cuda {
namespace {

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

}  // namespace

Executor::Executor(const Graph& graph, ExecutorOptions options)
    : graph_(share_equal_constants(graph, options.host_fed_ops)), options_(std::move(options)),
      res_(std::make_unique<StepResources>()) {
  Context& ctx = context();  // the process's handles first: they are allocated before any arena
  res_->plan = &options_.plan;
  res_->float_dtype = float_storage(options_.math);
  res_->algo_search = options_.algo_search;
  ExecutorPlan plan = plan_executor(graph_, options_);
  planning_ = std::make_unique<PlanningReport>(std::move(plan.report));
  arena_ = DeviceBuffer(planning_->arena.bytes);
  RLFLOW_CUDA(cudaMemsetAsync(arena_.get(), 0, arena_.bytes(), ctx.stream));
  compile_steps(plan.fusion);
  res_->workspace = DeviceBuffer(res_->workspace_bytes);
  res_->scratch = DeviceBuffer(res_->scratch_bytes);
  RLFLOW_CUDA(cudaEventCreate(&start_));
  RLFLOW_CUDA(cudaEventCreate(&stop_));
  RLFLOW_CUDA(cudaStreamSynchronize(ctx.stream));
}

void Executor::compile_steps(const StepPlan& fusion) {
  cudaStream_t stream = context().stream;
  const PlanningReport& planned = *planning_;
  const int n_ops = graph_.num_ops();
  // Deterministic random data for every source; BatchNorm variances positive.
  std::vector<char> positive(n_ops, 0);
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph_.op(id);
    if (op.type == OpType::kBatchNorm && op.inputs.size() > 4) positive[op.inputs[4].op] = 1;
  }
  const ViewPlan& views = *fusion.views;
  const std::function<void*(const TensorRef&)> ptr = [&](const TensorRef& t) { return tensor_ptr(t); };
  const ViewResolver resolve = [&](const TensorRef& r) { return views.resolve(r, ptr); };
  size_t next = 0;  // the next planned step (steps are in op id order)
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph_.op(id);
    if (!planned.needed[id]) continue;
    if (is_source_op(op.type) || planned.host_fed[id]) {
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const TensorType& t = op.outputs[k];
        float scale = 1.f;
        if (op.type == OpType::kWeight) {
          int64_t fan_in = t.shape.size() >= 2 ? t.num_elements() / std::max<int64_t>(t.shape[0], 1) : 0;
          scale = fan_in > 0 ? std::sqrt(3.f / static_cast<float>(fan_in)) : 0.05f;
        }
        launch_random_fill(stored(t.dtype), tensor_ptr({id, static_cast<int>(k)}), t.num_elements(),
                           name_seed(options_.seed, op.name) + k, scale, positive[id] != 0, stream);
      }
      if (auto it = options_.known_scalars.find(id); it != options_.known_scalars.end())
        launch_fill(stored(op.outputs[0].dtype), static_cast<double>(it->second), tensor_ptr({id, 0}), 1, stream);
      continue;
    }
    if (next >= planned.steps.size() || planned.steps[next].op != id) continue;  // no step of its own
    const PlannedStep& planned_step = planned.steps[next++];
    std::vector<void*> in, out;
    for (size_t k = 0; k < op.outputs.size(); ++k) out.push_back(tensor_ptr({id, static_cast<int>(k)}));
    Step step;
    switch (planned_step.call) {
      case StepCall::kFusedConv: {
        const ConvFusion& f = fusion.convs.at[id];
        for (const TensorRef& r : graph_.op(f.conv).inputs) in.push_back(tensor_ptr(r));
        step = compile_fused_conv(graph_, f.conv, in, f.residual ? tensor_ptr(f.residual_ref) : nullptr, out[0],
                                  f.activation, options_.math, *res_);
        break;
      }
      case StepCall::kGemm:
        step = compile_gemm(graph_, fusion.gemms.fusions[fusion.gemms.at[id]], resolve, out[0], options_.math, *res_);
        break;
      case StepCall::kChain:
        step = compile_elementwise_chain(graph_, fusion.chains.chains[fusion.chains.at[id]], resolve, out[0], *res_);
        break;
      case StepCall::kStridedCopy:  // a view op that runs: one strided copy from the data's buffer
        step = compile_strided_copy(views.op_view(id, ptr), dtype_size(stored(op.outputs[0].dtype)), out[0]);
        break;
      case StepCall::kOp:
        for (const TensorRef& r : op.inputs) in.push_back(tensor_ptr(r));
        step = compile_op(graph_, id, in, out, options_.math, *res_);
        break;
    }
    if (planned_step.call != StepCall::kFusedConv && planned_step.call != StepCall::kGemm) {
      if (auto it = options_.plan.find(id);
          it != options_.plan.end() && (it->second.threads || it->second.items_per_thread)) {
        const int threads = it->second.threads, items = it->second.items_per_thread;
        step = [inner = std::move(step), threads, items](cudaStream_t s) {
          LaunchScope scope(threads, items);
          inner(s);
        };
      }
    }
    (planned_step.constant ? const_steps_ : steps_).push_back(std::move(step));
  }
}

int Executor::fused_ops() const { return planning_->fused_ops; }
const std::vector<int>& Executor::fused_into() const { return planning_->fused_into; }
const std::vector<int>& Executor::fused_kind() const { return planning_->fused_kind; }
const std::vector<int>& Executor::in_place_concats() const { return planning_->in_place.in_place_concats; }

Executor::~Executor() {
  if (context().stream) cudaStreamSynchronize(context().stream);
  release_graph();
  if (start_) cudaEventDestroy(start_);
  if (stop_) cudaEventDestroy(stop_);
  steps_.clear();
  const_steps_.clear();
}

void Executor::release_graph() {
  if (cuda_graph_exec_) cudaGraphExecDestroy(cuda_graph_exec_);
  if (cuda_graph_) cudaGraphDestroy(cuda_graph_);
  cuda_graph_exec_ = nullptr;
  cuda_graph_ = nullptr;
}

void* Executor::tensor_ptr(const TensorRef& t) const {
  size_t off = planning_->in_place.offsets.at(t.op).at(t.index);
  if (off == kNoOffset)
    throw GraphError("tensor of op '" + graph_.op(t.op).name + "' is not computed by this executor");
  return static_cast<char*>(arena_.get()) + off;
}

void Executor::set_source(const std::string& name, const void* data, size_t bytes) {
  for (int id = 0; id < graph_.num_ops(); ++id) {
    const Op& op = graph_.op(id);
    if (!is_source_op(op.type) || op.name != name) continue;
    if (planning_->in_place.offsets[id][0] == kNoOffset) return;  // not needed by any output
    size_t expect = static_cast<size_t>(op.outputs[0].num_bytes());
    if (bytes != expect)
      throw ValueError(op_type_name(op.type) + " '" + name + "': expected " + std::to_string(expect) +
                       " bytes (" + type_str(op.outputs[0]) + "), got " + std::to_string(bytes));
    if (auto it = options_.known_scalars.find(id); it != options_.known_scalars.end()) {
      double value = 0;
      switch (op.outputs[0].dtype) {
        case kInt64: value = static_cast<double>(*static_cast<const int64_t*>(data)); break;
        case kInt32: value = *static_cast<const int32_t*>(data); break;
        case kFloat32: value = *static_cast<const float*>(data); break;
        default: value = *static_cast<const double*>(data); break;
      }
      // The plan holds the value as the op's dtype holds it (a float32 factor rounded).
      const double held = op.outputs[0].dtype == kFloat32 ? static_cast<double>(static_cast<float>(it->second))
                                                          : it->second;
      if (value != held)
        throw ValueError("weight '" + name + "' is built into this executor's plan (value " + std::to_string(held) +
                         ", a fixed slice or a GEMM scale); setting it to " + std::to_string(value) +
                         " needs a new executor");
    }
    upload(op.outputs[0], data, tensor_ptr({id, 0}));
    if (op.type == OpType::kWeight) constants_dirty_ = true;
    return;
  }
  throw GraphError("the graph has no input or weight named '" + name + "'");
}

void Executor::set_host_fed(int op_id, int index, const void* data, size_t bytes) {
  if (std::find(options_.host_fed_ops.begin(), options_.host_fed_ops.end(), op_id) == options_.host_fed_ops.end())
    throw GraphError("op " + std::to_string(op_id) + " is not host-fed in this executor");
  const Op& op = graph_.op(op_id);
  if (index < 0 || index >= static_cast<int>(op.outputs.size()))
    throw IndexError("op '" + op.name + "' has no output " + std::to_string(index));
  if (planning_->in_place.offsets[op_id][index] == kNoOffset) return;
  size_t expect = static_cast<size_t>(op.outputs[index].num_bytes());
  if (bytes != expect)
    throw ValueError("host-fed op '" + op.name + "' output " + std::to_string(index) + ": expected " +
                     std::to_string(expect) + " bytes, got " + std::to_string(bytes));
  upload(op.outputs[index], data, tensor_ptr({op_id, index}));
}

void Executor::fold_constants() {
  if (!constants_dirty_) return;
  cudaStream_t s = context().stream;
  for (const Step& step : const_steps_) step(s);
  RLFLOW_CUDA(cudaStreamSynchronize(s));
  constants_dirty_ = false;
}

void Executor::enqueue_steps(cudaStream_t s) const {
  for (int r = 0; r < std::max(options_.replicas, 1); ++r)
    for (const Step& step : steps_) step(s);
}

void Executor::run() {
  fold_constants();
  cudaStream_t s = context().stream;
  for (const Step& step : steps_) step(s);
  RLFLOW_CUDA(cudaStreamSynchronize(s));
}

const TensorType& Executor::output_type(int i) const {
  if (i < 0 || i >= num_outputs()) throw IndexError("graph output " + std::to_string(i) + " out of range");
  return graph_.tensor_type(graph_.outputs()[i]);
}

void Executor::read_output(int i, void* data, size_t bytes) const {
  const TensorType& t = output_type(i);
  if (bytes != static_cast<size_t>(t.num_bytes()))
    throw ValueError("graph output " + std::to_string(i) + " has " + std::to_string(t.num_bytes()) +
                     " bytes, buffer has " + std::to_string(bytes));
  const void* from = tensor_ptr(graph_.outputs()[i]);
  if (stored(t.dtype) == t.dtype) {
    copy_to_host(data, from, bytes);
    return;
  }
  // A 16-bit float tensor: cast to float32 on the device, then copy.
  void* buf = staging(bytes);
  launch_cast(stored(t.dtype), t.dtype, from, buf, t.num_elements(), context().stream);
  copy_to_host(data, buf, bytes);
}

void* Executor::staging(size_t bytes) const {
  if (staging_.bytes() < bytes) staging_ = DeviceBuffer(bytes);
  return staging_.get();
}

int Executor::stored(int dtype) const { return stored_dtype(dtype, res_->float_dtype); }

size_t Executor::stored_bytes(const TensorType& t) const {
  return static_cast<size_t>(t.num_elements()) * dtype_size(stored(t.dtype));
}

void Executor::upload(const TensorType& t, const void* data, void* to) {
  const size_t bytes = static_cast<size_t>(t.num_bytes());
  if (stored(t.dtype) == t.dtype) {
    copy_to_device(to, data, bytes);
    return;
  }
  // Host float32 into a 16-bit tensor: copy, then cast on the device (weights cast at load).
  void* buf = staging(bytes);
  copy_to_device(buf, data, bytes);
  launch_cast(t.dtype, stored(t.dtype), buf, to, t.num_elements(), context().stream);
  RLFLOW_CUDA(cudaStreamSynchronize(context().stream));  // the buffer is reused by the next copy
}

void Executor::capture() {
  if (cuda_graph_exec_) return;
  cudaStream_t s = context().stream;
  RLFLOW_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_steps(s);
  } catch (...) {
    cudaGraph_t broken = nullptr;
    cudaStreamEndCapture(s, &broken);
    if (broken) cudaGraphDestroy(broken);
    cudaGetLastError();
    throw;
  }
  RLFLOW_CUDA(cudaStreamEndCapture(s, &cuda_graph_));
  RLFLOW_CUDA(cudaGraphInstantiate(&cuda_graph_exec_, cuda_graph_, 0));
}

Measurement Executor::measure(int warmup, int repeats, int inner) {
  if (repeats < 1) throw ValueError("measure: repeats must be >= 1");
  fold_constants();
  cudaStream_t s = context().stream;
  Measurement m;
  bool graphed = true;
  try {
    capture();
  } catch (const CudaError&) {
    graphed = false;  // a library call refused capture: time plain launches instead
  }
  auto launch = [&]() {
    if (graphed) RLFLOW_CUDA(cudaGraphLaunch(cuda_graph_exec_, s));
    else enqueue_steps(s);
  };
  for (int i = 0; i < std::max(warmup, 1); ++i) launch();
  RLFLOW_CUDA(cudaStreamSynchronize(s));
  if (inner <= 0) {  // about 0.5 ms per sample
    RLFLOW_CUDA(cudaEventRecord(start_, s));
    launch();
    RLFLOW_CUDA(cudaEventRecord(stop_, s));
    RLFLOW_CUDA(cudaEventSynchronize(stop_));
    float ms = 0;
    RLFLOW_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    inner = ms > 0 ? std::clamp(static_cast<int>(std::ceil(0.5 / ms)), 1, 100) : 100;
  }
  for (int r = 0; r < repeats; ++r) {
    RLFLOW_CUDA(cudaEventRecord(start_, s));
    for (int i = 0; i < inner; ++i) launch();
    RLFLOW_CUDA(cudaEventRecord(stop_, s));
    RLFLOW_CUDA(cudaEventSynchronize(stop_));
    float ms = 0;
    RLFLOW_CUDA(cudaEventElapsedTime(&ms, start_, stop_));
    m.samples_ms.push_back(static_cast<double>(ms) / inner / std::max(options_.replicas, 1));
  }
  std::vector<double> sorted = m.samples_ms;
  std::sort(sorted.begin(), sorted.end());
  size_t k = sorted.size();
  m.median_ms = k % 2 ? sorted[k / 2] : 0.5 * (sorted[k / 2 - 1] + sorted[k / 2]);
  m.min_ms = sorted.front();
  m.mean_ms = std::accumulate(sorted.begin(), sorted.end(), 0.0) / k;
  m.repeats = repeats;
  m.inner = inner;
  m.cuda_graph = graphed;
  return m;
}

}  // namespace cuda
}  // namespace taso
