// cuDNN convolution with a timed, cached algorithm choice and fused epilogues (see
// library_ops.h).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "config_cache.h"
#include "library_ops.h"
#include "library_util.h"
#include "taso/errors.h"
#include "taso/types.h"

namespace taso {
namespace cuda {
namespace {

// RLFLOW_CONV_ALGO_CACHE: a file of lines "key<TAB>algo math fused workspace ms" (keys
// name the device and cuDNN; config_cache.h).
constexpr char kCacheEnv[] = "RLFLOW_CONV_ALGO_CACHE";

ConfigCache<ConvAlgo>& conv_cache() {
  static ConfigCache<ConvAlgo> cache([] {
    std::map<std::string, ConvAlgo> c;
    for (const auto& [key, value] : read_choices(kCacheEnv)) {
      int algo = 0, math = 0, fused = 0;
      unsigned long long ws = 0;
      float ms = 0;
      if (std::sscanf(value.c_str(), "%d %d %d %llu %f", &algo, &math, &fused, &ws, &ms) != 5) continue;
      if ((algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT) && algo != kConvAlgoGemm &&
          algo != kConvAlgoDepthwise)
        continue;
      c[key] = {algo, static_cast<cudnnMathType_t>(math), static_cast<size_t>(ws), ms, fused != 0};
    }
    return c;
  }());
  return cache;
}

void save_choice(const std::string& key, const ConvAlgo& a) {
  char value[128];
  std::snprintf(value, sizeof value, "%d %d %d %llu %g", static_cast<int>(a.algo), static_cast<int>(a.math),
                a.fused ? 1 : 0, static_cast<unsigned long long>(a.workspace), a.ms);
  append_choice(kCacheEnv, key, value);
}

// Scratch for timing: `bytes` (at least 4) of zeros.
DeviceBuffer zeroed_buffer(size_t bytes, cudaStream_t s) {
  DeviceBuffer b(std::max<size_t>(bytes, 4));
  RLFLOW_CUDA(cudaMemsetAsync(b.get(), 0, b.bytes(), s));
  return b;
}

}  // namespace

size_t conv_algo_cache_size() { return conv_cache().size(); }

ConvOp::ConvOp(const ConvConfig& cfg) : cfg_(cfg) {
  Context& ctx = context();
  const auto& p = cfg.pads;
  explicit_pad_ = p[0] != p[2] || p[1] != p[3];
  std::vector<int64_t> xin = cfg.x;
  pointwise_ = cfg.w.size() == 4 && cfg.w[2] == 1 && cfg.w[3] == 1 && cfg.group == 1 && cfg.strides[0] == 1 &&
               cfg.strides[1] == 1 && p[0] == 0 && p[1] == 0 && p[2] == 0 && p[3] == 0 && cfg.x[2] == cfg.y[2] &&
               cfg.x[3] == cfg.y[3];
  if (cfg.w.size() == 4 && cfg.group > 1 && cfg.group == cfg.x[1] && cfg.group == cfg.y[1] && cfg.w[1] == 1) {
    dw_.n = cfg.x[0];
    dw_.c = cfg.x[1];
    dw_.h = cfg.x[2];
    dw_.w = cfg.x[3];
    dw_.oh = cfg.y[2];
    dw_.ow = cfg.y[3];
    dw_.kh = static_cast<int>(cfg.w[2]);
    dw_.kw = static_cast<int>(cfg.w[3]);
    dw_.stride_h = static_cast<int>(cfg.strides[0]);
    dw_.stride_w = static_cast<int>(cfg.strides[1]);
    dw_.dilation_h = static_cast<int>(cfg.dilations[0]);
    dw_.dilation_w = static_cast<int>(cfg.dilations[1]);
    dw_.pad_top = static_cast<int>(p[0]);
    dw_.pad_left = static_cast<int>(p[1]);
    dw_.act = cfg.activation;
    depthwise_ = depthwise_conv_fits(dw_);
  }
  int pad_h = static_cast<int>(p[0]), pad_w = static_cast<int>(p[1]);
  if (explicit_pad_) {  // cuDNN pads symmetrically only: pad into a scratch buffer first
    xin = {cfg.x[0], cfg.x[1], cfg.x[2] + p[0] + p[2], cfg.x[3] + p[1] + p[3]};
    pad_idx_.rank = 4;
    for (int d = 0; d < 4; ++d) {
      pad_idx_.out_dims[d] = xin[d];
      pad_idx_.in_dims[d] = cfg.x[d];
    }
    pad_idx_.begins[2] = p[0];
    pad_idx_.begins[3] = p[1];
    scratch_bytes_ = static_cast<size_t>(prod(xin)) * dtype_size(float_storage(cfg.math));
    pad_h = pad_w = 0;
  }
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&y_desc_));
  RLFLOW_CUDNN(cudnnCreateFilterDescriptor(&w_desc_));
  RLFLOW_CUDNN(cudnnCreateConvolutionDescriptor(&conv_desc_));
  // 16-bit modes store half / bfloat16 tensors and accumulate in float (cuDNN's pseudo-half
  // configuration: the convolution's compute type stays float).
  const cudnnDataType_t type = cudnn_storage_type(cfg.math);
  set_nchw(x_desc_, xin, cfg.math);
  set_nchw(y_desc_, cfg.y, cfg.math);
  RLFLOW_CUDNN(cudnnSetFilter4dDescriptor(w_desc_, type, CUDNN_TENSOR_NCHW, static_cast<int>(cfg.w[0]),
                                          static_cast<int>(cfg.w[1]), static_cast<int>(cfg.w[2]),
                                          static_cast<int>(cfg.w[3])));
  RLFLOW_CUDNN(cudnnSetConvolution2dDescriptor(conv_desc_, pad_h, pad_w, static_cast<int>(cfg.strides[0]),
                                               static_cast<int>(cfg.strides[1]), static_cast<int>(cfg.dilations[0]),
                                               static_cast<int>(cfg.dilations[1]), CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT));
  RLFLOW_CUDNN(cudnnSetConvolutionGroupCount(conv_desc_, static_cast<int>(cfg.group)));
  RLFLOW_CUDNN(cudnnSetConvolutionMathType(conv_desc_, default_math()));
  int on, oc, oh, ow;
  RLFLOW_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &on, &oc, &oh, &ow));
  if (on != cfg.y[0] || oc != cfg.y[1] || oh != cfg.y[2] || ow != cfg.y[3])
    throw CudaError("cuDNN computes a convolution output of " + std::to_string(on) + "x" + std::to_string(oc) + "x" +
                    std::to_string(oh) + "x" + std::to_string(ow) + ", the graph says " + dims_str(cfg.y));

  if (cfg.bias) {
    RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&b_desc_));
    RLFLOW_CUDNN(cudnnSetTensor4dDescriptor(b_desc_, CUDNN_TENSOR_NCHW, type, 1,
                                            static_cast<int>(cfg.y[1]), 1, 1));
    RLFLOW_CUDNN(cudnnCreateActivationDescriptor(&act_desc_));
    RLFLOW_CUDNN(cudnnSetActivationDescriptor(
        act_desc_, cfg.activation == kActRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
        CUDNN_NOT_PROPAGATE_NAN, 0.0));
  }
  std::string key = ctx.device_name + "|cudnn" + std::to_string(cudnnGetVersion()) + "|x" + dims_str(xin) + "|w" +
                    dims_str(cfg.w) + "|p" + std::to_string(pad_h) + "," + std::to_string(pad_w) + "|s" +
                    dims_str(cfg.strides) + "|d" + dims_str(cfg.dilations) + "|g" + std::to_string(cfg.group) +
                    "|b" + std::to_string(cfg.bias) + "|r" + std::to_string(cfg.residual) + "|a" +
                    std::to_string(cfg.activation) + "|" + math_mode_name(cfg.math) + (pointwise_ ? "|lt" : "") +
                    (depthwise_ ? "|dw" : "");
  const bool log = cfg.search.log;
  if (is_16bit(cfg.math) && cfg.forced_algo < 0 && !cfg.timings && choose_16bit(key + "|graph", xin, pad_h, pad_w))
    return;
  if (cfg.timings) {  // the whole space, for tuning records: no cache
    algo_ = tune(xin, cfg.timings);
  } else if (cfg.forced_algo >= 0) {
    algo_ = forced_choice();
  } else {
    choose_cached(key, log, xin);
  }
  if (algo_.is_ours()) {  // no cuDNN workspace (cuBLASLt's is the context's)
    algo_.workspace = 0;
    return;
  }
  RLFLOW_CUDNN(cudnnSetConvolutionMathType(conv_desc_, algo_.math));
  size_t ws = 0;
  cudnnStatus_t st = cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                             algo_.cudnn_algo(), &ws);
  if (st != CUDNN_STATUS_SUCCESS) {
    if (cfg.forced_algo >= 0)
      throw ValueError("tuning plan: cuDNN algorithm " + std::to_string(cfg.forced_algo) + " with math type " +
                       std::to_string(cfg.forced_math) + " is not supported for convolution x" + dims_str(xin) +
                       " w" + dims_str(cfg.w) + " (" + cudnnGetErrorString(st) + ")");
    check_cudnn(st, "cudnnGetConvolutionForwardWorkspaceSize", __FILE__, __LINE__);
  }
  algo_.workspace = ws;
}

// A tuning plan's choice, validated against this configuration.
ConvAlgo ConvOp::forced_choice() const {
  const int a = cfg_.forced_algo, m = cfg_.forced_math;
  if (a == kConvAlgoGemm && !pointwise_)
    throw ValueError("tuning plan: the GEMM path (" + std::to_string(kConvAlgoGemm) +
                     ") runs only 1x1, stride-1, unpadded, ungrouped convolutions, not x" + dims_str(cfg_.x) + " w" +
                     dims_str(cfg_.w));
  if (a == kConvAlgoDepthwise && !depthwise_)
    throw ValueError("tuning plan: the depthwise kernel (" + std::to_string(kConvAlgoDepthwise) +
                     ") runs only depthwise convolutions (one group per channel) that fit its shared memory, not x" +
                     dims_str(cfg_.x) + " w" + dims_str(cfg_.w) + " group " + std::to_string(cfg_.group));
  if (a >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT && a != kConvAlgoGemm && a != kConvAlgoDepthwise)
    throw ValueError("tuning plan: cuDNN convolution algorithm " + std::to_string(a) + " does not exist (0.." +
                     std::to_string(CUDNN_CONVOLUTION_FWD_ALGO_COUNT - 1) + ")");
  if (m != CUDNN_DEFAULT_MATH && m != CUDNN_TENSOR_OP_MATH && m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
      m != CUDNN_FMA_MATH)
    throw ValueError("tuning plan: cuDNN math type " + std::to_string(m) + " does not exist");
  if (cfg_.math == MathMode::kFP32 && m != CUDNN_FMA_MATH)
    throw ValueError("tuning plan: strict fp32 admits only cuDNN FMA math (" + std::to_string(CUDNN_FMA_MATH) +
                     "), the plan asks for math type " + std::to_string(m));
  if (cfg_.forced_fused && (!cfg_.bias || cfg_.activation > kActRelu))
    throw ValueError("tuning plan: cuDNN's fused call needs a bias and ReLU or no activation");
  if (cfg_.forced_fused && a == kConvAlgoGemm)
    throw ValueError("tuning plan: the GEMM path has no cuDNN fused call");
  if (cfg_.forced_fused && a == kConvAlgoDepthwise)
    throw ValueError("tuning plan: the depthwise kernel has no cuDNN fused call");
  bool fft = a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
  if (fft && cfg_.group > 1)
    throw ValueError("tuning plan: FFT algorithms are not run on grouped convolutions (one hung)");
  return {a, static_cast<cudnnMathType_t>(m), 0, 0.f, cfg_.forced_fused};
}

// The cached choice for `key`, else a timed search (or cuDNN's heuristics) cached now.
void ConvOp::choose_cached(const std::string& key, bool log, const std::vector<int64_t>& xin) {
  std::optional<ConvAlgo> found = conv_cache().find(key);
  const bool cached = found.has_value();
  if (cached) algo_ = *found;
  if (log) std::fprintf(stderr, "rlflow conv %s cached %d\n", key.c_str(), cached ? 1 : 0);
  if (!cached) {
    // Without cudnn_find: cuDNN's heuristics instead of timing every algorithm.
    algo_ = cfg_.search.cudnn_find ? tune(xin) : heuristic();
    conv_cache().put(key, algo_);
    if (algo_.ms > 0) save_choice(key, algo_);
  }
}

ConvAlgo ConvOp::heuristic() {
  Context& ctx = context();
  bool strict = cfg_.math == MathMode::kFP32;
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  RLFLOW_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                      CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > (size_t(1) << 30)) continue;
    if (strict && perf[i].mathType != CUDNN_FMA_MATH) continue;
    return {perf[i].algo, perf[i].mathType, perf[i].memory, 0.f, false};
  }
  return {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, default_math(), 0, 0.f, false};
}

// The math type a choice that picks none carries: FMA in strict fp32 (the only one it
// admits), else cuDNN's default.
cudnnMathType_t ConvOp::default_math() const {
  return cfg_.math == MathMode::kFP32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH;
}

// y = act(y + bias + z) in place, as cfg_ asks (bias and z may be null): after every
// convolution but cuDNN's fused call and our depthwise kernel.
void ConvOp::epilogue(void* y, const void* bias, const void* z, cudaStream_t s) const {
  launch_bias_activation(float_storage(cfg_.math), y, bias, z, prod(cfg_.y), cfg_.y[1], cfg_.y[2] * cfg_.y[3],
                         cfg_.activation, s);
}

// Times every (algorithm, math type, fused or not) that cuDNN runs for this
// configuration on scratch buffers with time_calls_ms (a CUDA graph of 8 calls, median
// of 5 replays). Strict fp32 admits FMA math only.
ConvAlgo ConvOp::tune(const std::vector<int64_t>& xin, std::vector<ConvAlgo>* timings) {
  Context& ctx = context();
  cudaStream_t s = ctx.stream;
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  const size_t limit = size_t(1) << 30;
  std::vector<cudnnMathType_t> maths = {CUDNN_FMA_MATH};
  if (cfg_.math == MathMode::kTF32) maths = {CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH};
  if (is_16bit(cfg_.math)) maths = {CUDNN_DEFAULT_MATH};  // what Find used: tensor cores
  auto zeroed = [&](size_t bytes) { return zeroed_buffer(bytes, s); };
  const size_t esize = dtype_size(float_storage(cfg_.math));
  DeviceBuffer bx = zeroed(prod(xin) * esize), bw = zeroed(prod(cfg_.w) * esize);
  DeviceBuffer by = zeroed(prod(cfg_.y) * esize);
  DeviceBuffer bz = zeroed(cfg_.residual ? prod(cfg_.y) * esize : 0);
  DeviceBuffer bb = zeroed(cfg_.bias ? cfg_.y[1] * esize : 0);
  const void* z = cfg_.residual ? bz.get() : nullptr;
  const void* bias = cfg_.bias ? bb.get() : nullptr;
  // Candidates: what cudnnFind ran successfully (it runs every algorithm, so none of
  // these crashes on this configuration), each with FMA math and, for TF32, also the
  // math type Find used.
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  RLFLOW_CUDNN(cudnnFindConvolutionForwardAlgorithm(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  const bool log = cfg_.search.log;
  if (log) std::fprintf(stderr, "rlflow conv find returned %d\n", returned);
  std::vector<std::pair<int, cudnnMathType_t>> cands;
  // Find's eager timings misjudge launch overhead but not by orders of magnitude: only
  // algorithms within 4x (+ 50 us) of its best are timed again. FFT algorithms on grouped
  // convolutions are never timed (one hung in a captured graph on a depthwise conv).
  float find_best = -1;
  for (int i = 0; i < returned; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].time >= 0 && (find_best < 0 || perf[i].time < find_best))
      find_best = perf[i].time;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (find_best >= 0 && perf[i].time > 4 * find_best + 0.05f) continue;
    bool fft = perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT || perf[i].algo == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING;
    if (fft && cfg_.group > 1) continue;
    for (cudnnMathType_t math : maths) {
      if (math != CUDNN_FMA_MATH) math = perf[i].mathType;
      if (std::find(cands.begin(), cands.end(), std::make_pair(static_cast<int>(perf[i].algo), math)) ==
          cands.end())
        cands.emplace_back(static_cast<int>(perf[i].algo), math);
    }
  }
  ConvAlgo best;
  best.ms = -1;
  for (const auto& [a, math] : cands) {
    size_t ws = 0;
    if (cudnnSetConvolutionMathType(conv_desc_, math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                static_cast<cudnnConvolutionFwdAlgo_t>(a), &ws) !=
            CUDNN_STATUS_SUCCESS ||
        ws > limit)
      continue;
    DeviceBuffer wsb;
    try {
      wsb = DeviceBuffer(ws);
    } catch (const CudaError&) {
      cudaGetLastError();
      continue;
    }
    // cuDNN's fused call applies ReLU or nothing; other activations run in our epilogue.
    for (int fused = cfg_.bias && cfg_.activation <= kActRelu ? 1 : 0; fused >= 0; --fused) {
      ConvAlgo cand{a, math, ws, 0.f, fused != 0};
      if (log) std::fprintf(stderr, "rlflow conv try algo %d math %d fused %d ws %zu\n", static_cast<int>(a),
                            static_cast<int>(math), fused, ws);
      cand.ms = time_calls_ms(
          [&](cudaStream_t st) {
            return enqueue(cand, bx.get(), bw.get(), bias, z, by.get(), wsb.get(), st) ==
                   CUDNN_STATUS_SUCCESS;
          },
          s);
      if (cand.ms < 0) continue;
      if (log)
        std::fprintf(stderr, "rlflow conv tune %s algo %d math %d fused %d: %.4f ms\n",
                     dims_str(cfg_.w).c_str(), static_cast<int>(a), static_cast<int>(math), fused, cand.ms);
      if (timings) timings->push_back(cand);
      if (best.ms < 0 || cand.ms < best.ms) best = cand;
    }
  }
  // our own paths, where they apply (bx holds at least the unpadded input)
  auto consider = [&](const std::optional<ConvAlgo>& ours, const char* what) {
    if (!ours) return;
    if (log) std::fprintf(stderr, "rlflow conv tune %s %s: %.4f ms\n", dims_str(cfg_.w).c_str(), what, ours->ms);
    if (timings) timings->push_back(*ours);
    if (best.ms < 0 || ours->ms < best.ms) best = *ours;
  };
  if (depthwise_) consider(time_depthwise(bx.get(), bw.get(), bias, z, by.get(), s), "depthwise kernel");
  if (pointwise_) consider(time_gemm(bx.get(), bw.get(), bias, z, by.get(), s), "GEMM");
  if (best.ms < 0)  // nothing ran: the always-available implicit GEMM
    best = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, default_math(), 0, 0.f, false};
  return best;
}

// Y[n] (K x HW, row-major) = W (K x C) @ X[n] (C x HW): the image's pixels are the GEMM's
// columns, so NCHW tensors are read and written in place; W is shared by the batch
// (batch stride 0).
LtGemmConfig ConvOp::gemm_config() const {
  const int64_t c = cfg_.x[1], k = cfg_.y[1], hw = cfg_.x[2] * cfg_.x[3];
  LtGemmConfig g;
  g.batch = cfg_.x[0];
  g.a = {k, c, c, 1, 0};
  g.b = {c, hw, hw, 1, c * hw};
  g.d = {k, hw, hw, 1, k * hw};
  g.math = cfg_.math;
  g.log = cfg_.search.log;
  return g;
}

// 16-bit modes: cuDNN's graph API (its engines timed by GraphConv); for a pointwise
// convolution, the GEMM path instead where it is faster (both timed without the epilogue
// kernel, which runs after either; the choice cached under `key`). False where the graph
// API has no engine for the convolution (the legacy API then).
bool ConvOp::choose_16bit(const std::string& key, const std::vector<int64_t>& xin, int pad_h, int pad_w) {
  std::optional<ConvAlgo> cached = pointwise_ ? conv_cache().find(key) : std::nullopt;
  if (cached && cached->is_gemm()) {
    algo_ = *cached;
    algo_.workspace = 0;
    return true;
  }
  try {
    graph_ = std::make_unique<GraphConv>(
        GraphConvShape{xin, cfg_.w, cfg_.y, cfg_.strides, {pad_h, pad_w}, cfg_.dilations, cfg_.math,
                       cfg_.search.log});
  } catch (const UnsupportedGraphError&) {
    return false;  // no graph-API engine (grouped convolutions, fp16 and bf16, on cuDNN 9.19)
  }
  algo_ = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_DEFAULT_MATH, graph_->workspace_bytes(), graph_->ms(), false};
  if (!pointwise_ || cached) return true;
  cudaStream_t s = context().stream;
  const size_t esize = dtype_size(float_storage(cfg_.math));
  DeviceBuffer bx = zeroed_buffer(prod(cfg_.x) * esize, s), bw = zeroed_buffer(prod(cfg_.w) * esize, s);
  DeviceBuffer by = zeroed_buffer(prod(cfg_.y) * esize, s);
  std::optional<ConvAlgo> gemm = time_gemm(bx.get(), bw.get(), nullptr, nullptr, by.get(), s, false);
  if (gemm && (graph_->ms() <= 0 || gemm->ms < graph_->ms())) {
    graph_.reset();
    algo_ = *gemm;
  }
  conv_cache().put(key, algo_);
  if (algo_.ms > 0) save_choice(key, algo_);
  return true;
}

// The GEMM path timed as run() runs it (GEMM, then bias / residual / activation; the GEMM
// alone without `with_epilogue`), or nothing where cuBLASLt has no algorithm for it.
std::optional<ConvAlgo> ConvOp::time_gemm(const void* x, const void* w, const void* bias, const void* z, void* y,
                                          cudaStream_t s, bool with_epilogue) const {
  std::unique_ptr<LtGemm> gemm;
  try {
    gemm = std::make_unique<LtGemm>(gemm_config(), LtGemmPointers{w, x, nullptr, nullptr, y});
  } catch (const UnsupportedGraphError&) {
    return std::nullopt;
  }
  float ms = time_calls_ms(
      [&](cudaStream_t st) {
        if (!gemm->launch(st)) return false;
        if (with_epilogue) epilogue(y, bias, z, st);
        return true;
      },
      s);
  if (ms < 0) return std::nullopt;
  return ConvAlgo{kConvAlgoGemm, default_math(), 0, ms, false};
}

// Our depthwise kernel timed as run() runs it (its epilogue included), or nothing where it
// failed to launch.
std::optional<ConvAlgo> ConvOp::time_depthwise(const void* x, const void* w, const void* bias, const void* z,
                                               void* y, cudaStream_t s) const {
  const int dtype = float_storage(cfg_.math);
  float ms = time_calls_ms(
      [&](cudaStream_t st) {
        launch_depthwise_conv(dtype, dw_, x, w, bias, z, y, st);
        return true;
      },
      s);
  if (ms < 0) return std::nullopt;
  return ConvAlgo{kConvAlgoDepthwise, default_math(), 0, ms, false};
}

void ConvOp::bind(const void* x, const void* w, void* y) {
  if (!algo_.is_gemm()) return;
  gemm_ = std::make_unique<LtGemm>(gemm_config(), LtGemmPointers{w, x, nullptr, nullptr, y});
  gemm_x_ = x;
  gemm_w_ = w;
  gemm_y_ = y;
}

ConvOp::~ConvOp() {
  if (act_desc_) cudnnDestroyActivationDescriptor(act_desc_);
  if (b_desc_) cudnnDestroyTensorDescriptor(b_desc_);
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
}

cudnnStatus_t ConvOp::enqueue(const ConvAlgo& a, const void* xin, const void* w, const void* bias, const void* z,
                              void* y, void* workspace, cudaStream_t s) const {
  Context& ctx = context();
  float one = 1.f, zero = 0.f;
  if (a.fused) {
    float alpha2 = z ? 1.f : 0.f;
    return cudnnConvolutionBiasActivationForward(ctx.cudnn, &one, x_desc_, xin, w_desc_, w, conv_desc_, a.cudnn_algo(),
                                                 workspace, a.workspace, &alpha2, y_desc_, z ? z : y, b_desc_, bias,
                                                 act_desc_, y_desc_, y);
  }
  cudnnStatus_t st = graph_ ? graph_->enqueue(xin, w, y, workspace, s)
                            : cudnnConvolutionForward(ctx.cudnn, &one, x_desc_, xin, w_desc_, w, conv_desc_, a.cudnn_algo(),
                                                      workspace, a.workspace, &zero, y_desc_, y);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  epilogue(y, bias, z, s);
  return CUDNN_STATUS_SUCCESS;
}

void ConvOp::run(const void* x, const void* w, const void* bias, const void* residual, void* y, void* workspace,
                 void* scratch, cudaStream_t s) const {
  if (algo_.is_depthwise()) {  // reads the unpadded input: its padding is zeros in place
    launch_depthwise_conv(float_storage(cfg_.math), dw_, x, w, cfg_.bias ? bias : nullptr,
                          cfg_.residual ? residual : nullptr, y, s);
    return;
  }
  if (algo_.is_gemm()) {
    if (!gemm_ || x != gemm_x_ || w != gemm_w_ || y != gemm_y_)
      throw CudaError("a convolution on the GEMM path runs on other buffers than ConvOp::bind gave it");
    gemm_->run(s);
    epilogue(y, cfg_.bias ? bias : nullptr, cfg_.residual ? residual : nullptr, s);
    return;
  }
  Context& ctx = context();
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  const void* xin = x;
  if (explicit_pad_) {
    int64_t n = prod(std::vector<int64_t>(pad_idx_.out_dims, pad_idx_.out_dims + 4));
    launch_pad(x, scratch, dtype_size(float_storage(cfg_.math)), pad_idx_, 0, n, s);
    xin = scratch;
  }
  check_cudnn(enqueue(algo_, xin, w, cfg_.bias ? bias : nullptr, cfg_.residual ? residual : nullptr, y, workspace, s),
              algo_.fused ? "cudnnConvolutionBiasActivationForward" : "cudnnConvolutionForward", __FILE__, __LINE__);
}

}  // namespace cuda
}  // namespace taso
