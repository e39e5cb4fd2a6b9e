// The graph executor: planning, constant folding, runs and CUDA-graph measurement.
#include "executor.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "constant_sharing.h"
#include "kernels.h"
#include "step_plan.h"
#include "tuning.h"  // validate_plan
#include "taso/cost_model.h"
#include "taso/errors.h"

namespace taso {
namespace cuda {
namespace {

constexpr size_t kNone = SIZE_MAX;
constexpr size_t kAlign = 256;

uint64_t name_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ULL ^ seed;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// What the buffer-slicing decisions below read: per op, as the executor decided it.
struct SliceFacts {
  const Graph& graph;
  const std::vector<char>& needed;
  const std::vector<char>& host_fed;
  const std::vector<char>& constant;
  const std::vector<char>& alias;  // Reshape-likes: their input's buffer
  const StepPlan& plan;
  std::function<size_t(const TensorType&)> bytes;  // stored bytes of a tensor

  // A Split or Concat that runs per run (needed, computed per run, not host-fed, not
  // taken by a fusion) along an axis with every dim before it 1 (`shape`: the whole
  // tensor): its pieces are contiguous slices of the whole.
  bool sliceable(int id, const std::vector<int64_t>& shape) const {
    if (!needed[id] || host_fed[id] || constant[id] || plan.skipped(id)) return false;
    const size_t axis = static_cast<size_t>(graph.op(id).attrs.get_int("axis"));
    return axis < shape.size() && std::all_of(shape.begin(), shape.begin() + axis, [](int64_t d) { return d == 1; });
  }
  // Byte offsets of consecutive pieces, or empty when one would start unaligned.
  std::vector<size_t> aligned_starts(const std::vector<TensorType>& pieces) const {
    std::vector<size_t> starts;
    size_t at = 0;
    for (const TensorType& t : pieces) {
      if (at % kAlign) return {};
      starts.push_back(at);
      at += bytes(t);
    }
    return starts;
  }
};

// Splits that run no kernel (a batch-1 RNN's gates after merged GEMMs, a channel split
// after merged convolutions): each part is its slice of the input's buffer. Only where
// the input is written by a step (not a view the plan skips, not a tensor inside a fused
// step). Returns the parts' byte offsets from the input's start, per such Split (empty
// for the others).
std::vector<std::vector<size_t>> contiguous_split_parts(const SliceFacts& f) {
  const Graph& graph = f.graph;
  std::vector<std::vector<size_t>> parts(graph.num_ops());
  auto written = [&](TensorRef t) {
    while (f.alias[t.op]) t = graph.op(t.op).inputs[0];
    return !f.plan.skipped(t.op);
  };
  for (int id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.type == OpType::kSplit && f.sliceable(id, graph.tensor_type(op.inputs[0]).shape) && written(op.inputs[0]))
      parts[id] = f.aligned_starts(op.outputs);
  }
  return parts;
}

// Concats that run no kernel (a channel concat of a branching block): each input is
// written by a step of its own (not a source, constant, host-fed or skipped op, not a
// Reshape-like alias or a Split, one output; an inner in-place Concat counts) whose only
// reader is this Concat and which is no graph output; such a producer writes straight
// into its slice of the Concat's buffer. Returns the inputs' byte offsets from the
// Concat's start, per such Concat (empty for the others).
std::vector<std::vector<size_t>> in_place_concat_inputs(const SliceFacts& f) {
  const Graph& graph = f.graph;
  std::vector<std::vector<size_t>> slots(graph.num_ops());
  std::set<std::pair<int, int>> outputs;
  for (const TensorRef& r : graph.outputs()) outputs.insert({r.op, r.index});
  const auto consumers = graph.consumers();
  auto own_step = [&](const TensorRef& t) {
    const Op& p = graph.op(t.op);
    return !is_source_op(p.type) && p.type != OpType::kSplit && p.outputs.size() == 1 && f.needed[t.op] &&
           !f.host_fed[t.op] && !f.constant[t.op] && !f.alias[t.op] && !f.plan.skipped(t.op) &&
           !outputs.count({t.op, t.index}) && consumers[t.op][t.index].size() == 1;
  };
  for (int id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.type != OpType::kConcat || !f.sliceable(id, op.outputs[0].shape) ||
        !std::all_of(op.inputs.begin(), op.inputs.end(), own_step))
      continue;
    std::vector<TensorType> pieces;
    for (const TensorRef& t : op.inputs) pieces.push_back(graph.tensor_type(t));
    slots[id] = f.aligned_starts(pieces);
  }
  return slots;
}

}  // namespace

Executor::Executor(const Graph& graph, ExecutorOptions options)
    : graph_(share_equal_constants(graph, options.host_fed_ops)), options_(std::move(options)),
      res_(std::make_unique<StepResources>()) {
  Context& ctx = context();
  const int n_ops = graph_.num_ops();
  validate_plan(graph_, options_.plan);
  for (const auto& known : options_.known_scalars) {
    const int id = known.first;
    if (id < 0 || id >= n_ops) throw IndexError("known scalar names op id " + std::to_string(id) + " out of range");
    const Op& op = graph_.op(id);
    const int dt = op.outputs[0].dtype;
    if (op.type != OpType::kWeight || op.outputs[0].num_elements() != 1 ||
        (dt != kInt64 && dt != kInt32 && dt != kFloat32 && dt != kFloat64))
      throw ValueError("known scalar op '" + op.name + "' is not a one-element int32 / int64 / float Weight");
  }
  if (options_.arena_offset % kAlign)
    throw ValueError("arena offset must be a multiple of " + std::to_string(kAlign) + " bytes, got " +
                     std::to_string(options_.arena_offset));
  res_->plan = &options_.plan;
  res_->float_dtype = float_storage(options_.math);
  std::vector<char> no_fuse(n_ops, 0);
  for (const auto& [id, p] : options_.plan) no_fuse[id] = p.fuse == 0;
  std::vector<char> host_fed(n_ops, 0);
  for (int id : options_.host_fed_ops) {
    if (id < 0 || id >= n_ops) throw IndexError("host-fed op id " + std::to_string(id) + " out of range");
    host_fed[id] = 1;
  }
  // Ops the graph outputs need; host-fed ops cut the dependency walk.
  std::vector<char> needed(n_ops, 0);
  std::vector<int> stack;
  for (const TensorRef& r : graph_.outputs()) stack.push_back(r.op);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    if (needed[id]) continue;
    needed[id] = 1;
    if (host_fed[id]) continue;
    for (const TensorRef& r : graph_.op(id).inputs) stack.push_back(r.op);
  }
  // RLFLOW_FUSE=0 turns every executor fusion off (conv and GEMM epilogues, element-wise
  // chains, strided views), for comparison.
  const char* fuse_env = std::getenv("RLFLOW_FUSE");
  const bool fuse = !(fuse_env && std::string(fuse_env) == "0");
  // One arena for every needed tensor (sources included). A Reshape, Flatten or Identity
  // output (and with fusion a Transpose that only moves dims of size 1) is its input's
  // buffer (tensors are written once, by their producer, so an alias never sees other
  // data): it runs no kernel.
  offsets_.assign(n_ops, {});
  std::vector<char> alias(n_ops, 0);
  size_t total = options_.arena_offset;
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph_.op(id);
    offsets_[id].assign(op.outputs.size(), kNone);
    if (!needed[id]) continue;
    bool view = op.type == OpType::kReshape || op.type == OpType::kFlatten || op.type == OpType::kIdentity ||
                (fuse && op.type == OpType::kTranspose && is_reshape_like(graph_, id));
    if (view && !host_fed[id] && op.inputs.size() == 1) {
      size_t in = offsets_[op.inputs[0].op][op.inputs[0].index];
      if (in != kNone) {
        offsets_[id][0] = in;
        alias[id] = 1;
        continue;
      }
    }
    for (size_t k = 0; k < op.outputs.size(); ++k) {
      offsets_[id][k] = total;
      size_t bytes = stored_bytes(op.outputs[k]);
      total += (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    }
  }
  arena_ = DeviceBuffer(std::max<size_t>(total, kAlign));
  RLFLOW_CUDA(cudaMemsetAsync(arena_.get(), 0, arena_.bytes(), ctx.stream));

  // Deterministic random data for every source; BatchNorm variances positive.
  std::vector<char> positive(n_ops, 0);
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph_.op(id);
    if (op.type == OpType::kBatchNorm && op.inputs.size() > 4) positive[op.inputs[4].op] = 1;
  }
  std::vector<char> constant = constant_ops(graph_);
  const StepPlan plan = plan_steps(graph_, needed, host_fed, constant, alias, no_fuse, options_.known_scalars, fuse,
                                   res_->float_dtype);
  const ViewPlan& views = *plan.views;
  fused_ops_ = plan.fused_ops;
  record_fused_steps(graph_, plan, &fused_into_, &fused_kind_);
  // With fusion, in-place Concats' inputs are written into their slices of its buffer,
  // contiguous Split parts are slices of their input's buffer, and the aliases of either
  // (Reshapes after them) follow.
  std::vector<std::vector<size_t>> split_parts(n_ops), concat_slots(n_ops);
  if (fuse) {
    const SliceFacts facts{graph_, needed, host_fed, constant, alias, plan,
                           [&](const TensorType& t) { return stored_bytes(t); }};
    concat_slots = in_place_concat_inputs(facts);
    split_parts = contiguous_split_parts(facts);
  }
  for (int id = n_ops - 1; id >= 0; --id) {  // an outer Concat places an inner one before it places its inputs
    const Op& op = graph_.op(id);
    for (size_t k = 0; k < concat_slots[id].size(); ++k)
      offsets_[op.inputs[k].op][op.inputs[k].index] = offsets_[id][0] + concat_slots[id][k];
    fused_ops_ += !concat_slots[id].empty();
  }
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph_.op(id);
    if (!concat_slots[id].empty()) in_place_concats_.push_back(id);
    if (!split_parts[id].empty()) {
      const size_t in = offsets_[op.inputs[0].op][op.inputs[0].index];
      for (size_t k = 0; k < op.outputs.size(); ++k) offsets_[id][k] = in + split_parts[id][k];
      ++fused_ops_;
    } else if (alias[id]) {
      offsets_[id][0] = offsets_[op.inputs[0].op][op.inputs[0].index];
    }
  }
  const std::function<void*(const TensorRef&)> ptr = [&](const TensorRef& t) { return tensor_ptr(t); };
  const ViewResolver resolve = [&](const TensorRef& r) { return views.resolve(r, ptr); };
  for (int id = 0; id < n_ops; ++id) {
    const Op& op = graph_.op(id);
    if (!needed[id]) continue;
    if (is_source_op(op.type) || host_fed[id]) {
      for (size_t k = 0; k < op.outputs.size(); ++k) {
        const TensorType& t = op.outputs[k];
        float scale = 1.f;
        if (op.type == OpType::kWeight) {
          int64_t fan_in = t.shape.size() >= 2 ? t.num_elements() / std::max<int64_t>(t.shape[0], 1) : 0;
          scale = fan_in > 0 ? std::sqrt(3.f / static_cast<float>(fan_in)) : 0.05f;
        }
        launch_random_fill(stored(t.dtype), tensor_ptr({id, static_cast<int>(k)}), t.num_elements(),
                           name_seed(options_.seed, op.name) + k, scale, positive[id] != 0, ctx.stream);
      }
      if (auto it = options_.known_scalars.find(id); it != options_.known_scalars.end())
        launch_fill(stored(op.outputs[0].dtype), static_cast<double>(it->second), tensor_ptr({id, 0}), 1, ctx.stream);
      continue;
    }
    if (alias[id] || plan.skipped(id) || !split_parts[id].empty() || !concat_slots[id].empty()) continue;
    std::vector<void*> in, out;
    for (size_t k = 0; k < op.outputs.size(); ++k) out.push_back(tensor_ptr({id, static_cast<int>(k)}));
    if (const ConvFusion& f = plan.convs.at[id]; f.conv >= 0) {
      for (const TensorRef& r : graph_.op(f.conv).inputs) in.push_back(tensor_ptr(r));
      steps_.push_back(compile_fused_conv(graph_, f.conv, in, f.residual ? tensor_ptr(f.residual_ref) : nullptr,
                                          out[0], f.activation, options_.math, *res_));
      continue;
    }
    if (plan.gemms.at[id] >= 0) {
      steps_.push_back(
          compile_gemm(graph_, plan.gemms.fusions[plan.gemms.at[id]], resolve, out[0], options_.math, *res_));
      continue;
    }
    Step step;
    if (plan.chains.at[id] >= 0) {
      step = compile_elementwise_chain(graph_, plan.chains.chains[plan.chains.at[id]], resolve, out[0], *res_);
    } else if (plan.viewable[id]) {  // a view op that runs: one strided copy from the data's buffer
      step = compile_strided_copy(views.op_view(id, ptr), dtype_size(stored(op.outputs[0].dtype)), out[0]);
    } else {
      for (const TensorRef& r : op.inputs) in.push_back(tensor_ptr(r));
      step = compile_op(graph_, id, in, out, options_.math, *res_);
    }
    if (auto it = options_.plan.find(id); it != options_.plan.end() && (it->second.threads || it->second.items_per_thread)) {
      const int threads = it->second.threads, items = it->second.items_per_thread;
      step = [inner = std::move(step), threads, items](cudaStream_t s) {
        LaunchScope scope(threads, items);
        inner(s);
      };
    }
    (constant[id] ? const_steps_ : steps_).push_back(std::move(step));
  }
  res_->workspace = DeviceBuffer(res_->workspace_bytes);
  res_->scratch = DeviceBuffer(res_->scratch_bytes);
  RLFLOW_CUDA(cudaEventCreate(&start_));
  RLFLOW_CUDA(cudaEventCreate(&stop_));
  RLFLOW_CUDA(cudaStreamSynchronize(ctx.stream));
}

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
  size_t off = offsets_.at(t.op).at(t.index);
  if (off == kNone) throw GraphError("tensor of op '" + graph_.op(t.op).name + "' is not computed by this executor");
  return static_cast<char*>(arena_.get()) + off;
}

void Executor::set_source(const std::string& name, const void* data, size_t bytes) {
  for (int id = 0; id < graph_.num_ops(); ++id) {
    const Op& op = graph_.op(id);
    if (!is_source_op(op.type) || op.name != name) continue;
    if (offsets_[id][0] == kNone) return;  // not needed by any output
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
  if (offsets_[op_id][index] == kNone) return;
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
