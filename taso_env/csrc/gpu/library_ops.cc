// cuDNN and cuBLAS ops (see library_ops.h).
#include "library_ops.h"

#include "taso/types.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>

namespace taso {
namespace cuda {
namespace {

std::string dims_str(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "x" : "") + std::to_string(v[i]);
  return out;
}

std::mutex& conv_cache_mutex() {
  static std::mutex m;
  return m;
}

// RLFLOW_CONV_ALGO_CACHE: a file of tab-separated lines "key algo math fused workspace ms"
// read on first use and appended to on each new choice (keys name the device and cuDNN).
const char* cache_file() {
  const char* p = std::getenv("RLFLOW_CONV_ALGO_CACHE");
  return p && *p ? p : nullptr;
}

// C stdio, not iostreams: the module shares its process with other C++ runtimes.
std::map<std::string, ConvAlgo>& conv_cache() {
  static std::map<std::string, ConvAlgo> cache = [] {
    std::map<std::string, ConvAlgo> c;
    const char* path = cache_file();
    FILE* f = path ? std::fopen(path, "r") : nullptr;
    if (!f) return c;
    char line[4096];
    while (std::fgets(line, sizeof line, f)) {
      char* tab = std::strchr(line, '\t');
      if (!tab) continue;
      int algo = 0, math = 0, fused = 0;
      unsigned long long ws = 0;
      float ms = 0;
      if (std::sscanf(tab + 1, "%d %d %d %llu %f", &algo, &math, &fused, &ws, &ms) != 5) continue;
      if (algo < 0 || algo >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT) continue;
      c[std::string(line, tab)] = {static_cast<cudnnConvolutionFwdAlgo_t>(algo), static_cast<cudnnMathType_t>(math),
                                   static_cast<size_t>(ws), ms, fused != 0};
    }
    std::fclose(f);
    return c;
  }();
  return cache;
}

void save_choice(const std::string& key, const ConvAlgo& a) {
  const char* path = cache_file();
  FILE* f = path ? std::fopen(path, "a") : nullptr;
  if (!f) return;
  std::fprintf(f, "%s\t%d %d %d %llu %g\n", key.c_str(), static_cast<int>(a.algo), static_cast<int>(a.math),
               a.fused ? 1 : 0, static_cast<unsigned long long>(a.workspace), a.ms);
  std::fclose(f);
}

void set_nchw(cudnnTensorDescriptor_t d, const std::vector<int64_t>& s) {
  RLFLOW_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(s[0]),
                                          static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[3])));
}

int64_t prod(const std::vector<int64_t>& v, size_t from = 0, size_t to = std::string::npos) {
  to = std::min(to, v.size());
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= v[i];
  return p;
}

}  // namespace

size_t conv_algo_cache_size() {
  std::lock_guard<std::mutex> lock(conv_cache_mutex());
  return conv_cache().size();
}

ConvOp::ConvOp(const ConvConfig& cfg) : cfg_(cfg) {
  Context& ctx = context();
  const auto& p = cfg.pads;
  explicit_pad_ = p[0] != p[2] || p[1] != p[3];
  std::vector<int64_t> xin = cfg.x;
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
    scratch_bytes_ = static_cast<size_t>(prod(xin)) * sizeof(float);
    pad_h = pad_w = 0;
  }
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&y_desc_));
  RLFLOW_CUDNN(cudnnCreateFilterDescriptor(&w_desc_));
  RLFLOW_CUDNN(cudnnCreateConvolutionDescriptor(&conv_desc_));
  set_nchw(x_desc_, xin);
  set_nchw(y_desc_, cfg.y);
  RLFLOW_CUDNN(cudnnSetFilter4dDescriptor(w_desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, static_cast<int>(cfg.w[0]),
                                          static_cast<int>(cfg.w[1]), static_cast<int>(cfg.w[2]),
                                          static_cast<int>(cfg.w[3])));
  RLFLOW_CUDNN(cudnnSetConvolution2dDescriptor(conv_desc_, pad_h, pad_w, static_cast<int>(cfg.strides[0]),
                                               static_cast<int>(cfg.strides[1]), static_cast<int>(cfg.dilations[0]),
                                               static_cast<int>(cfg.dilations[1]), CUDNN_CROSS_CORRELATION,
                                               CUDNN_DATA_FLOAT));
  RLFLOW_CUDNN(cudnnSetConvolutionGroupCount(conv_desc_, static_cast<int>(cfg.group)));
  bool strict = cfg.math == MathMode::kFP32;
  RLFLOW_CUDNN(cudnnSetConvolutionMathType(conv_desc_, strict ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH));
  int on, oc, oh, ow;
  RLFLOW_CUDNN(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &on, &oc, &oh, &ow));
  if (on != cfg.y[0] || oc != cfg.y[1] || oh != cfg.y[2] || ow != cfg.y[3])
    throw CudaError("cuDNN computes a convolution output of " + std::to_string(on) + "x" + std::to_string(oc) + "x" +
                    std::to_string(oh) + "x" + std::to_string(ow) + ", the graph says " + dims_str(cfg.y));

  if (cfg.bias) {
    RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&b_desc_));
    RLFLOW_CUDNN(cudnnSetTensor4dDescriptor(b_desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1,
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
                    std::to_string(cfg.activation) + "|f32|" + math_mode_name(cfg.math);
  bool cached = false;
  {
    std::lock_guard<std::mutex> lock(conv_cache_mutex());
    auto it = conv_cache().find(key);
    if (it != conv_cache().end()) {
      algo_ = it->second;
      cached = true;
    }
  }
  const bool log = std::getenv("RLFLOW_TUNE_LOG") != nullptr;
  if (log) std::fprintf(stderr, "rlflow conv %s cached %d\n", key.c_str(), cached ? 1 : 0);
  if (!cached) {
    // RLFLOW_CUDNN_FIND=0: cuDNN's heuristics instead of timing every algorithm.
    const char* find_env = std::getenv("RLFLOW_CUDNN_FIND");
    algo_ = find_env && std::string(find_env) == "0" ? heuristic() : tune(xin);
    std::lock_guard<std::mutex> lock(conv_cache_mutex());
    conv_cache()[key] = algo_;
    if (algo_.ms > 0) save_choice(key, algo_);
  }
  RLFLOW_CUDNN(cudnnSetConvolutionMathType(conv_desc_, algo_.math));
  size_t ws = 0;
  RLFLOW_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_, algo_.algo,
                                                       &ws));
  algo_.workspace = ws;
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
  return {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, strict ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH, 0, 0.f, false};
}

// Times every (algorithm, math type, fused or not) that cuDNN runs for this
// configuration on scratch buffers: 2 warm-up calls, then the median of 5 samples of 3
// back-to-back calls. Strict fp32 admits FMA math only.
ConvAlgo ConvOp::tune(const std::vector<int64_t>& xin) {
  Context& ctx = context();
  cudaStream_t s = ctx.stream;
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  const size_t limit = size_t(1) << 30;
  std::vector<cudnnMathType_t> maths = {CUDNN_FMA_MATH};
  if (cfg_.math == MathMode::kTF32) maths = {CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH};
  auto zeroed = [&](size_t bytes) {
    DeviceBuffer b(std::max<size_t>(bytes, 4));
    RLFLOW_CUDA(cudaMemsetAsync(b.get(), 0, b.bytes(), s));
    return b;
  };
  DeviceBuffer bx = zeroed(prod(xin) * sizeof(float)), bw = zeroed(prod(cfg_.w) * sizeof(float));
  DeviceBuffer by = zeroed(prod(cfg_.y) * sizeof(float));
  DeviceBuffer bz = zeroed(cfg_.residual ? prod(cfg_.y) * sizeof(float) : 0);
  DeviceBuffer bb = zeroed(cfg_.bias ? cfg_.y[1] * sizeof(float) : 0);
  const float* z = cfg_.residual ? bz.as<float>() : nullptr;
  const float* bias = cfg_.bias ? bb.as<float>() : nullptr;
  cudaEvent_t e0, e1;
  RLFLOW_CUDA(cudaEventCreate(&e0));
  RLFLOW_CUDA(cudaEventCreate(&e1));
  // Candidates: what cudnnFind ran successfully (it runs every algorithm, so none of
  // these crashes on this configuration), each with FMA math and, for TF32, also the
  // math type Find used.
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  RLFLOW_CUDNN(cudnnFindConvolutionForwardAlgorithm(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                    CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  const bool log = std::getenv("RLFLOW_TUNE_LOG") != nullptr;
  if (log) std::fprintf(stderr, "rlflow conv find returned %d\n", returned);
  std::vector<std::pair<cudnnConvolutionFwdAlgo_t, cudnnMathType_t>> cands;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    for (cudnnMathType_t math : maths) {
      if (math != CUDNN_FMA_MATH) math = perf[i].mathType;
      if (std::find(cands.begin(), cands.end(), std::make_pair(perf[i].algo, math)) == cands.end())
        cands.emplace_back(perf[i].algo, math);
    }
  }
  ConvAlgo best;
  best.ms = -1;
  for (const auto& [a, math] : cands) {
    size_t ws = 0;
    if (cudnnSetConvolutionMathType(conv_desc_, math) != CUDNN_STATUS_SUCCESS ||
        cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn, x_desc_, w_desc_, conv_desc_, y_desc_, a, &ws) !=
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
      if (enqueue(cand, bx.as<float>(), bw.as<float>(), bias, z, by.as<float>(), wsb.get(), s) !=
          CUDNN_STATUS_SUCCESS) {
        cudaGetLastError();
        continue;
      }
      if (cudaStreamSynchronize(s) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      enqueue(cand, bx.as<float>(), bw.as<float>(), bias, z, by.as<float>(), wsb.get(), s);
      std::vector<float> samples;
      for (int r = 0; r < 5; ++r) {
        RLFLOW_CUDA(cudaEventRecord(e0, s));
        for (int k = 0; k < 3; ++k)
          enqueue(cand, bx.as<float>(), bw.as<float>(), bias, z, by.as<float>(), wsb.get(), s);
        RLFLOW_CUDA(cudaEventRecord(e1, s));
        RLFLOW_CUDA(cudaEventSynchronize(e1));
        float ms = 0;
        RLFLOW_CUDA(cudaEventElapsedTime(&ms, e0, e1));
        samples.push_back(ms / 3);
      }
      std::sort(samples.begin(), samples.end());
      cand.ms = samples[samples.size() / 2];
      if (log)
        std::fprintf(stderr, "rlflow conv tune %s algo %d math %d fused %d: %.4f ms\n",
                     dims_str(cfg_.w).c_str(), static_cast<int>(a), static_cast<int>(math), fused, cand.ms);
      if (best.ms < 0 || cand.ms < best.ms) best = cand;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (best.ms < 0) {  // nothing ran: the always-available implicit GEMM
    best = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
            cfg_.math == MathMode::kFP32 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH, 0, 0.f, false};
  }
  return best;
}

ConvOp::~ConvOp() {
  if (act_desc_) cudnnDestroyActivationDescriptor(act_desc_);
  if (b_desc_) cudnnDestroyTensorDescriptor(b_desc_);
  if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
  if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
}

cudnnStatus_t ConvOp::enqueue(const ConvAlgo& a, const float* xin, const float* w, const float* bias,
                              const float* z, float* y, void* workspace, cudaStream_t s) const {
  Context& ctx = context();
  float one = 1.f, zero = 0.f;
  if (a.fused) {
    float alpha2 = z ? 1.f : 0.f;
    return cudnnConvolutionBiasActivationForward(ctx.cudnn, &one, x_desc_, xin, w_desc_, w, conv_desc_, a.algo,
                                                 workspace, a.workspace, &alpha2, y_desc_, z ? z : y, b_desc_, bias,
                                                 act_desc_, y_desc_, y);
  }
  cudnnStatus_t st = cudnnConvolutionForward(ctx.cudnn, &one, x_desc_, xin, w_desc_, w, conv_desc_, a.algo,
                                             workspace, a.workspace, &zero, y_desc_, y);
  if (st != CUDNN_STATUS_SUCCESS) return st;
  launch_bias_activation(y, bias, z, prod(cfg_.y), cfg_.y[1], cfg_.y[2] * cfg_.y[3], cfg_.activation, s);
  return CUDNN_STATUS_SUCCESS;
}

void ConvOp::run(const float* x, const float* w, const float* bias, const float* residual, float* y,
                 void* workspace, void* scratch, cudaStream_t s) const {
  Context& ctx = context();
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  const float* xin = x;
  if (explicit_pad_) {
    int64_t n = prod(std::vector<int64_t>(pad_idx_.out_dims, pad_idx_.out_dims + 4));
    launch_pad(x, scratch, sizeof(float), pad_idx_, 0, n, s);
    xin = static_cast<const float*>(scratch);
  }
  check_cudnn(enqueue(algo_, xin, w, cfg_.bias ? bias : nullptr, cfg_.residual ? residual : nullptr, y, workspace, s),
              algo_.fused ? "cudnnConvolutionBiasActivationForward" : "cudnnConvolutionForward", __FILE__, __LINE__);
}

PoolOp::PoolOp(const PoolConfig& cfg) {
  params_.n = cfg.x[0];
  params_.c = cfg.x[1];
  params_.h = cfg.x[2];
  params_.w = cfg.x[3];
  params_.oh = cfg.y[2];
  params_.ow = cfg.y[3];
  params_.kh = static_cast<int>(cfg.kernel[0]);
  params_.kw = static_cast<int>(cfg.kernel[1]);
  params_.sh = static_cast<int>(cfg.strides[0]);
  params_.sw = static_cast<int>(cfg.strides[1]);
  params_.pt = static_cast<int>(cfg.pads[0]);
  params_.pl = static_cast<int>(cfg.pads[1]);
  params_.pb = static_cast<int>(cfg.pads[2]);
  params_.pr = static_cast<int>(cfg.pads[3]);
  params_.max = cfg.max;
  params_.count_include_pad = cfg.count_include_pad;
  bool symmetric = cfg.pads[0] == cfg.pads[2] && cfg.pads[1] == cfg.pads[3];
  bool small_pad = cfg.pads[0] < cfg.kernel[0] && cfg.pads[1] < cfg.kernel[1];
  if (!symmetric || !small_pad) return;
  context();
  RLFLOW_CUDNN(cudnnCreatePoolingDescriptor(&desc_));
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&y_desc_));
  cudnnPoolingMode_t mode = cfg.max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                    : (cfg.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                             : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING);
  RLFLOW_CUDNN(cudnnSetPooling2dDescriptor(desc_, mode, CUDNN_NOT_PROPAGATE_NAN, params_.kh, params_.kw, params_.pt,
                                           params_.pl, params_.sh, params_.sw));
  set_nchw(x_desc_, cfg.x);
  int n, c, h, w;
  RLFLOW_CUDNN(cudnnGetPooling2dForwardOutputDim(desc_, x_desc_, &n, &c, &h, &w));
  if (h != cfg.y[2] || w != cfg.y[3]) return;  // ceil_mode: our kernel
  set_nchw(y_desc_, cfg.y);
  cudnn_ = true;
}

PoolOp::~PoolOp() {
  if (desc_) cudnnDestroyPoolingDescriptor(desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
}

void PoolOp::run(const float* x, float* y, cudaStream_t s) const {
  if (!cudnn_) {
    launch_pool(x, y, params_, s);
    return;
  }
  Context& ctx = context();
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  float one = 1.f, zero = 0.f;
  RLFLOW_CUDNN(cudnnPoolingForward(ctx.cudnn, desc_, &one, x_desc_, x, &zero, y_desc_, y));
}

BatchNormOp::BatchNormOp(const std::vector<int64_t>& x, double eps) : eps_(eps) {
  total_ = prod(x);
  channels_ = x.size() > 1 ? x[1] : 1;
  inner_ = prod(x, 2);
  if (x.size() < 2 || eps < CUDNN_BN_MIN_EPSILON || x[0] > INT32_MAX || channels_ > INT32_MAX || inner_ > INT32_MAX)
    return;
  context();
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&p_desc_));
  set_nchw(x_desc_, {x[0], channels_, inner_, 1});
  RLFLOW_CUDNN(cudnnDeriveBNTensorDescriptor(p_desc_, x_desc_, CUDNN_BATCHNORM_SPATIAL));
  cudnn_ = true;
}

BatchNormOp::~BatchNormOp() {
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  if (p_desc_) cudnnDestroyTensorDescriptor(p_desc_);
}

void BatchNormOp::run(const float* x, const float* scale, const float* bias, const float* mean, const float* var,
                      float* y, cudaStream_t s) const {
  if (!cudnn_) {
    launch_batchnorm(x, scale, bias, mean, var, y, total_, channels_, inner_, static_cast<float>(eps_), s);
    return;
  }
  Context& ctx = context();
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  float one = 1.f, zero = 0.f;
  RLFLOW_CUDNN(cudnnBatchNormalizationForwardInference(ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, x,
                                                       x_desc_, y, p_desc_, scale, bias, mean, var, eps_));
}

MatMulOp::MatMulOp(const std::vector<int64_t>& a_in, const std::vector<int64_t>& b_in,
                   const std::vector<int64_t>& y, int activation, MathMode math, const float* a_ptr,
                   const float* b_ptr, float* y_ptr)
    : activation_(activation), math_(math), a_(a_ptr), b_(b_ptr), y_(y_ptr) {
  std::vector<int64_t> a = a_in, b = b_in;
  if (a.size() == 1) a.insert(a.begin(), 1);
  if (b.size() == 1) b.push_back(1);
  m_ = a[a.size() - 2];
  k_ = a.back();
  n_ = b.back();
  size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> ab(rank - 2, 1), bb(rank - 2, 1), batch(rank - 2, 1);
  std::copy(a.begin(), a.end() - 2, ab.begin() + (rank - a.size()));
  std::copy(b.begin(), b.end() - 2, bb.begin() + (rank - b.size()));
  for (size_t i = 0; i < batch.size(); ++i) batch[i] = std::max(ab[i], bb[i]);
  batch_ = prod(batch);
  int64_t a_batch = prod(ab), b_batch = prod(bb);
  if (b_batch == 1 && (a_batch == batch_)) {  // b shared: fold the batch into M
    mode_ = kSingle;
    m_ *= a_batch;
    batch_ = 1;
  } else if ((a_batch == 1 || ab == batch) && (b_batch == 1 || bb == batch)) {
    mode_ = kStrided;
    stride_a_ = a_batch == 1 ? 0 : m_ * k_;
    stride_b_ = b_batch == 1 ? 0 : k_ * n_;
  } else {  // general broadcast: one pointer triple per output batch
    mode_ = kPointers;
    std::vector<const float*> host(3 * batch_);
    for (int64_t i = 0; i < batch_; ++i) {
      int64_t rest = i, ia = 0, ib = 0, sa = 1, sb = 1;
      for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
        int64_t c = rest % batch[d];
        rest /= batch[d];
        ia += (ab[d] == 1 ? 0 : c) * sa;
        ib += (bb[d] == 1 ? 0 : c) * sb;
        sa *= ab[d];
        sb *= bb[d];
      }
      host[i] = a_ + ia * m_ * k_;
      host[batch_ + i] = b_ + ib * k_ * n_;
      host[2 * batch_ + i] = y_ + i * m_ * n_;
    }
    pointers_ = DeviceBuffer(host.size() * sizeof(float*));
    RLFLOW_CUDA(cudaMemcpy(pointers_.get(), host.data(), host.size() * sizeof(float*), cudaMemcpyHostToDevice));
  }
  (void)y;
}

void MatMulOp::run(cudaStream_t s) const {
  Context& ctx = context();
  RLFLOW_CUBLAS(cublasSetStream(ctx.cublas, s));
  set_cublas_math(math_);
  float one = 1.f, zero = 0.f;
  int m = static_cast<int>(m_), n = static_cast<int>(n_), k = static_cast<int>(k_);
  // Row-major C = A B is column-major C^T = B^T A^T.
  if (mode_ == kSingle) {
    RLFLOW_CUBLAS(cublasSgemm(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b_, n, a_, k, &zero, y_, n));
  } else if (mode_ == kStrided) {
    RLFLOW_CUBLAS(cublasSgemmStridedBatched(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b_, n, stride_b_,
                                            a_, k, stride_a_, &zero, y_, n, m_ * n_, static_cast<int>(batch_)));
  } else {
    const float* const* p = pointers_.as<const float* const>();
    RLFLOW_CUBLAS(cublasSgemmBatched(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, p + batch_, n, p, k, &zero,
                                     const_cast<float* const*>(p + 2 * batch_), n, static_cast<int>(batch_)));
  }
  launch_bias_activation(y_, nullptr, nullptr, batch_ * m_ * n_, 1, 1, activation_, s);
}

GemmOp::GemmOp(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>* c,
               bool trans_a, bool trans_b, float alpha, float beta, MathMode math)
    : ta_(trans_a), tb_(trans_b), has_c_(c != nullptr), alpha_(alpha), beta_(beta), math_(math) {
  m_ = ta_ ? a[1] : a[0];
  k_ = ta_ ? a[0] : a[1];
  n_ = tb_ ? b[0] : b[1];
  if (c) c_idx_ = make_broadcast({m_, n_}, {*c});
}

void GemmOp::run(const float* a, const float* b, const float* c, float* y, cudaStream_t s) const {
  Context& ctx = context();
  RLFLOW_CUBLAS(cublasSetStream(ctx.cublas, s));
  set_cublas_math(math_);
  float beta = 0.f;
  if (has_c_) {
    launch_broadcast_copy(c, y, sizeof(float), c_idx_, m_ * n_, s);
    beta = beta_;
  }
  int m = static_cast<int>(m_), n = static_cast<int>(n_), k = static_cast<int>(k_);
  RLFLOW_CUBLAS(cublasSgemm(ctx.cublas, tb_ ? CUBLAS_OP_T : CUBLAS_OP_N, ta_ ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                            &alpha_, b, tb_ ? k : n, a, ta_ ? m : k, &beta, y, n));
}

}  // namespace cuda
}  // namespace taso
