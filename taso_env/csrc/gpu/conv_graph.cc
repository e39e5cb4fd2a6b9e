// cuDNN graph-API convolutions (see conv_graph.h).
#include "conv_graph.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "config_cache.h"
#include "library_util.h"
#include "taso/types.h"
#include "views.h"  // contiguous_strides

namespace taso {
namespace cuda {
namespace {

constexpr int64_t kMaxEngines = 8;           // heuristic candidates timed
constexpr int64_t kMaxWorkspace = 1 << 30;   // bytes an engine may ask for
enum : int64_t { kX = 1, kW = 2, kY = 3 };   // tensor unique ids
constexpr int64_t kNoEngine = -2;

// One owned backend descriptor.
class Backend {
 public:
  explicit Backend(cudnnBackendDescriptorType_t type) { RLFLOW_CUDNN(cudnnBackendCreateDescriptor(type, &d_)); }
  ~Backend() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Backend(Backend&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Backend& operator=(Backend&& o) noexcept {
    std::swap(d_, o.d_);
    return *this;
  }
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values) {
    RLFLOW_CUDNN(cudnnBackendSetAttribute(d_, name, type, count, values));
  }
  void set_descriptor(cudnnBackendAttributeName_t name, const Backend& other) {
    cudnnBackendDescriptor_t d = other.get();
    set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &d);
  }
  cudnnStatus_t finalize() { return cudnnBackendFinalize(d_); }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

Backend tensor(int64_t uid, cudnnDataType_t type, const std::vector<int64_t>& dims) {
  Backend t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::vector<int64_t> strides = contiguous_strides(dims);
  const int64_t alignment = 16;  // the executor's buffers are 256-byte aligned
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  t.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, static_cast<int64_t>(dims.size()), dims.data());
  t.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, static_cast<int64_t>(strides.size()), strides.data());
  t.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  t.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  RLFLOW_CUDNN(t.finalize());
  return t;
}

// y = conv(x, w) through execution plan `plan` (the uids of tensor()).
cudnnStatus_t execute(const Backend& plan, const void* x, const void* w, void* y, void* workspace, cudaStream_t s) {
  cudnnHandle_t handle = context().cudnn;
  cudnnStatus_t st = cudnnSetStream(handle, s);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  Backend pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const int64_t uids[3] = {kX, kW, kY};
  void* pointers[3] = {const_cast<void*>(x), const_cast<void*>(w), y};
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  st = pack.finalize();
  if (st != CUDNN_STATUS_SUCCESS) return st;
  return cudnnBackendExecute(handle, plan.get(), pack.get());
}

// The heuristics' engine index chosen per configuration (kNoEngine: none runs), for the
// process.
ConfigCache<int64_t>& engine_cache() {
  static ConfigCache<int64_t> c;
  return c;
}

}  // namespace

struct GraphConv::Descriptors {
  Backend x{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, w{CUDNN_BACKEND_TENSOR_DESCRIPTOR}, y{CUDNN_BACKEND_TENSOR_DESCRIPTOR};
  Backend conv{CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR};
  Backend op{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR};
  Backend graph{CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR};
  Backend plan{CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR};
};

GraphConv::GraphConv(const GraphConvShape& shape) : d_(std::make_unique<Descriptors>()) {
  Context& ctx = context();
  cudnnHandle_t handle = ctx.cudnn;
  std::string key = ctx.device_name + "|cudnn" + std::to_string(cudnnGetVersion()) + "|x" + dims_str(shape.x) +
                    "|w" + dims_str(shape.w) + "|s" + dims_str(shape.strides) + "|p" + dims_str(shape.pads) + "|d" +
                    dims_str(shape.dilations) + "|" + math_mode_name(shape.math);
  const int64_t cached = engine_cache().find(key).value_or(-1);
  const std::string unsupported = "no cuDNN graph-API engine runs convolution x" + dims_str(shape.x) + " w" +
                                  dims_str(shape.w) + " in " + math_mode_name(shape.math);
  if (cached == kNoEngine)  // known before: no descriptors, no heuristics query
    throw UnsupportedGraphError(unsupported);
  const cudnnDataType_t type = cudnn_storage_type(shape.math);
  d_->x = tensor(kX, type, shape.x);
  d_->w = tensor(kW, type, shape.w);
  d_->y = tensor(kY, type, shape.y);

  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t spatial = 2;
  Backend& conv = d_->conv;
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  conv.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  conv.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial);
  conv.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, shape.dilations.data());
  conv.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, shape.strides.data());
  conv.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, shape.pads.data());
  conv.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, shape.pads.data());
  RLFLOW_CUDNN(conv.finalize());

  const float alpha = 1.f, beta = 0.f;
  Backend& op = d_->op;
  op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, d_->x);
  op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, d_->w);
  op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, d_->y);
  op.set_descriptor(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  op.set(CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  if (op.finalize() != CUDNN_STATUS_SUCCESS)
    throw UnsupportedGraphError("cuDNN's graph API does not accept convolution x" + dims_str(shape.x) + " w" +
                                dims_str(shape.w));

  Backend& graph = d_->graph;
  graph.set_descriptor(CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
  RLFLOW_CUDNN(graph.finalize());

  Backend heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  heur.set_descriptor(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  heur.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &heur_mode);
  RLFLOW_CUDNN(heur.finalize());
  int64_t offered = 0;
  RLFLOW_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                        &offered, nullptr));
  offered = std::min(offered, kMaxEngines);
  std::vector<Backend> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < offered; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  int64_t returned = 0;
  if (offered > 0)
    RLFLOW_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                          offered, &returned, raw.data()));

  // The plan of engine config i, or false when the engine cannot run this convolution.
  auto make_plan = [&](int64_t i, Backend* plan, int64_t* workspace) {
    Backend p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    p.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    p.set_descriptor(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
    if (p.finalize() != CUDNN_STATUS_SUCCESS) return false;
    int64_t n = 0;
    if (cudnnBackendGetAttribute(p.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                 workspace) != CUDNN_STATUS_SUCCESS ||
        *workspace > kMaxWorkspace)
      return false;
    *plan = std::move(p);
    return true;
  };

  int64_t workspace = 0;
  if (cached >= 0 && cached < returned && make_plan(cached, &d_->plan, &workspace)) {
    workspace_ = static_cast<size_t>(workspace);
    return;
  }

  // Time every engine that builds, on zeroed scratch tensors of this configuration.
  cudaStream_t s = ctx.stream;
  const size_t esize = dtype_size(float_storage(shape.math));
  auto zeroed = [&](size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 16));
    RLFLOW_CUDA(cudaMemsetAsync(b.get(), 0, b.bytes(), s));
    return b;
  };
  DeviceBuffer bx = zeroed(prod(shape.x) * esize), bw = zeroed(prod(shape.w) * esize);
  DeviceBuffer by = zeroed(prod(shape.y) * esize);
  const bool log = shape.log;
  int64_t best = -1;
  ms_ = -1;
  for (int64_t i = 0; i < returned; ++i) {
    Backend plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    if (!make_plan(i, &plan, &workspace)) continue;
    DeviceBuffer ws;
    try {
      ws = DeviceBuffer(static_cast<size_t>(workspace));
    } catch (const CudaError&) {
      cudaGetLastError();
      continue;
    }
    const float ms = time_calls_ms(
        [&](cudaStream_t st) {
          return execute(plan, bx.get(), bw.get(), by.get(), ws.get(), st) == CUDNN_STATUS_SUCCESS;
        },
        s);
    if (log) std::fprintf(stderr, "rlflow graph conv %s engine %lld: %.4f ms\n", key.c_str(), static_cast<long long>(i), ms);
    if (ms >= 0 && (ms_ < 0 || ms < ms_)) {
      ms_ = ms;
      best = i;
      workspace_ = static_cast<size_t>(workspace);
      d_->plan = std::move(plan);
    }
  }
  engine_cache().put(key, best >= 0 ? best : kNoEngine);
  if (best < 0) throw UnsupportedGraphError(unsupported);
}

GraphConv::~GraphConv() = default;

cudnnStatus_t GraphConv::enqueue(const void* x, const void* w, void* y, void* workspace, cudaStream_t s) const {
  return execute(d_->plan, x, w, y, workspace, s);
}

}  // namespace cuda
}  // namespace taso
