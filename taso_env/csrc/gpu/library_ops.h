// Library-backed ops: cuDNN convolution (algorithm chosen by our own timing, cached per
// configuration and math mode, in the process and in the file RLFLOW_CONV_ALGO_CACHE names;
// bias + residual + ReLU fused by cuDNN where that is faster, other epilogues by our kernel), cuDNN pooling
// and batch norm (inference), cuBLAS MatMul (batched, numpy broadcasting) and Gemm.
// Each object owns its descriptors and device parameter arrays (RAII).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "conv_graph.h"
#include "gemm_lt.h"
#include "kernels.h"

namespace taso {
namespace cuda {

// The cached choice of a convolution algorithm: the fastest (algorithm, math type,
// fused-call or convolution + our epilogue kernel) by our own timing of the exact call
// that runs, over every algorithm cuDNN accepts for the configuration.
// `algo` is a cudnnConvolutionFwdAlgo_t, or kConvAlgoGemm: a pointwise convolution (1x1
// kernel, stride 1, no padding, one group) as a cuBLASLt GEMM per image, Y[K, HW] =
// W[K, C] X[C, HW], then our epilogue kernel. cuDNN's implicit GEMMs run such
// convolutions with few, long-running blocks where the input has many channels and few
// pixels (strict fp32 on the H100: ~25 us for 960 channels at 7x7, whatever the output
// channels), where cuBLASLt's split-K kernels take 5-10 us; the timed search picks.
constexpr int kConvAlgoGemm = 100;
// `algo` kConvAlgoDepthwise: a depthwise convolution (one group per channel, one filter
// each) by our own kernel (launch_depthwise_conv: padding read as zeros in place, the
// epilogue applied before its one write), where it beats cuDNN's grouped kernels.
constexpr int kConvAlgoDepthwise = 101;

struct ConvAlgo {
  int algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;
  float ms = 0;        // our timing of the chosen call (median; 0 when chosen by heuristics)
  bool fused = false;  // cudnnConvolutionBiasActivationForward (bias, residual and ReLU in one call)
  bool is_gemm() const { return algo == kConvAlgoGemm; }
  bool is_depthwise() const { return algo == kConvAlgoDepthwise; }
  bool is_ours() const { return is_gemm() || is_depthwise(); }  // not a cuDNN algorithm
  cudnnConvolutionFwdAlgo_t cudnn_algo() const { return static_cast<cudnnConvolutionFwdAlgo_t>(algo); }
};

struct ConvConfig {
  std::vector<int64_t> x, w, y;  // NCHW input, [K, C/g, kh, kw] kernel, NCHW output
  std::vector<int64_t> strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};  // pads: top, left, bottom, right
  int64_t group = 1;
  bool bias = false;
  bool residual = false;  // y = act(conv(x) + bias + z), z shaped like y (executor fusion)
  int activation = 0;
  MathMode math = MathMode::kFP32;
  // A tuning plan's choice (ExecutorOptions::plan): forced_algo >= 0 runs that cuDNN
  // algorithm with forced_math (a cudnnMathType_t) and, when forced_fused, cuDNN's fused
  // call, skipping the timed search and the cache. Invalid choices throw ValueError.
  int forced_algo = -1;
  int forced_math = -1;
  bool forced_fused = false;
  // When set, every candidate of the timed search is appended here with its time (the
  // op's whole tuning space, for tuning records); the cache is neither read nor written.
  std::vector<ConvAlgo>* timings = nullptr;
  // How the algorithm is chosen when nothing is cached (ExecutorOptions::algo_search).
  AlgoSearch search;
};



class ConvOp {
 public:
  explicit ConvOp(const ConvConfig& cfg);
  ~ConvOp();
  ConvOp(const ConvOp&) = delete;
  ConvOp& operator=(const ConvOp&) = delete;

  size_t workspace_bytes() const { return algo_.workspace; }
  // Bytes of the explicitly padded input (asymmetric pads only; 0 otherwise).
  size_t scratch_bytes() const { return scratch_bytes_; }
  const ConvAlgo& algo() const { return algo_; }
  // The buffers every later run() reads and writes: the GEMM path (kConvAlgoGemm) binds
  // its cuBLASLt call to them here, outside any graph capture. A no-op for cuDNN paths.
  void bind(const void* x, const void* w, void* y);
  // residual: z of ConvConfig::residual (else null).
  // Tensors stored as float_storage(cfg.math).
  void run(const void* x, const void* w, const void* bias, const void* residual, void* y, void* workspace,
           void* scratch, cudaStream_t s) const;

 private:
  cudnnStatus_t enqueue(const ConvAlgo& a, const void* xin, const void* w, const void* bias, const void* z,
                        void* y, void* workspace, cudaStream_t s) const;
  ConvAlgo tune(const std::vector<int64_t>& xin, std::vector<ConvAlgo>* timings = nullptr);
  ConvAlgo heuristic();
  ConvAlgo forced_choice() const;
  cudnnMathType_t default_math() const;
  void epilogue(void* y, const void* bias, const void* z, cudaStream_t s) const;
  void choose_cached(const std::string& key, bool log, const std::vector<int64_t>& xin);
  // The GEMM of the kConvAlgoGemm path on these buffers (x, w, y as the op's tensors).
  LtGemmConfig gemm_config() const;
  std::optional<ConvAlgo> time_gemm(const void* x, const void* w, const void* bias, const void* z, void* y,
                                    cudaStream_t s, bool with_epilogue = true) const;
  bool choose_16bit(const std::string& key, const std::vector<int64_t>& xin, int pad_h, int pad_w);
  std::optional<ConvAlgo> time_depthwise(const void* x, const void* w, const void* bias, const void* z, void* y,
                                         cudaStream_t s) const;

  ConvConfig cfg_;
  ConvAlgo algo_;
  bool pointwise_ = false;  // the GEMM path is open to this configuration
  bool depthwise_ = false;  // our depthwise kernel is
  DepthwiseConvParams dw_;
  std::unique_ptr<LtGemm> gemm_;  // kConvAlgoGemm: bound by bind()
  const void* gemm_x_ = nullptr;
  const void* gemm_w_ = nullptr;
  void* gemm_y_ = nullptr;
  // 16-bit modes: the convolution through cuDNN's graph API (conv_graph.h) instead of
  // cudnnConvolutionForward, our epilogue kernel after it.
  std::unique_ptr<GraphConv> graph_;
  bool explicit_pad_ = false;
  size_t scratch_bytes_ = 0;
  PadIndex pad_idx_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr, b_desc_ = nullptr;
  cudnnFilterDescriptor_t w_desc_ = nullptr;
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnActivationDescriptor_t act_desc_ = nullptr;
};

// Number of distinct convolution configurations whose algorithm has been chosen.
size_t conv_algo_cache_size();

struct PoolConfig {
  std::vector<int64_t> x, y;
  std::vector<int64_t> kernel, strides{1, 1}, pads{0, 0, 0, 0};
  bool max = true, count_include_pad = false;
  MathMode math = MathMode::kFP32;  // tensors stored as float_storage(math)
};

// cuDNN pooling where it expresses the op (symmetric pads, matching output size),
// otherwise the backend's own kernel.
class PoolOp {
 public:
  explicit PoolOp(const PoolConfig& cfg);
  ~PoolOp();
  PoolOp(const PoolOp&) = delete;
  PoolOp& operator=(const PoolOp&) = delete;
  bool uses_cudnn() const { return cudnn_; }
  void run(const void* x, void* y, cudaStream_t s) const;

 private:
  bool cudnn_ = false;
  int dtype_ = kFloat32;
  PoolParams params_;
  cudnnPoolingDescriptor_t desc_ = nullptr;
  cudnnTensorDescriptor_t x_desc_ = nullptr, y_desc_ = nullptr;
};

// Inference batch norm of [N, C, ...] float32: cuDNN (spatial) for eps >= its minimum in
// fp32 / tf32, else the backend's kernel (16-bit modes: cuDNN wants float parameters,
// ours are stored 16-bit).
class BatchNormOp {
 public:
  BatchNormOp(const std::vector<int64_t>& x, double eps, MathMode math);
  ~BatchNormOp();
  BatchNormOp(const BatchNormOp&) = delete;
  BatchNormOp& operator=(const BatchNormOp&) = delete;
  void run(const void* x, const void* scale, const void* bias, const void* mean, const void* var, void* y,
           cudaStream_t s) const;

 private:
  bool cudnn_ = false;
  int dtype_ = kFloat32;
  int64_t total_ = 0, channels_ = 0, inner_ = 0;
  double eps_;
  cudnnTensorDescriptor_t x_desc_ = nullptr, p_desc_ = nullptr;
};

// np.matmul of float32 a [..., M, K] and b [..., K, N] (stored as float_storage(math)) (rank-1 operands promoted as
// numpy does; batch dims broadcast), then the fused activation. One GEMM when b has
// no batch, strided-batched when each operand is fully batched or not at all, pointer
// arrays otherwise. Pointers are bound at construction (buffers never move).
class MatMulOp {
 public:
  MatMulOp(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>& y,
           int activation, MathMode math, const void* a_ptr, const void* b_ptr, void* y_ptr);
  void run(cudaStream_t s) const;

 private:
  enum Mode { kSingle, kStrided, kPointers } mode_ = kSingle;
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1, stride_a_ = 0, stride_b_ = 0;
  int activation_ = 0;
  MathMode math_;
  const void* a_;
  const void* b_;
  void* y_;
  DeviceBuffer pointers_;  // [A..., B..., C...] for kPointers
};

// ONNX Gemm: alpha * op(a) @ op(b) + beta * c (c broadcast to [M, N]), stored as
// float_storage(math).
class GemmOp {
 public:
  GemmOp(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>* c,
         bool trans_a, bool trans_b, float alpha, float beta, MathMode math);
  void run(const void* a, const void* b, const void* c, void* y, cudaStream_t s) const;

 private:
  int64_t m_ = 0, n_ = 0, k_ = 0;
  bool ta_, tb_, has_c_;
  float alpha_, beta_;
  MathMode math_;
  BroadcastIndex c_idx_;
};

}  // namespace cuda
}  // namespace taso
