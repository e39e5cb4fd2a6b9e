// cuDNN pooling and batch norm, cuBLAS MatMul and Gemm (see library_ops.h; convolution
// is in conv_op.cc).
#include "library_ops.h"

#include <algorithm>

#include "library_util.h"
#include "taso/types.h"

namespace taso {
namespace cuda {

PoolOp::PoolOp(const PoolConfig& cfg) : dtype_(float_storage(cfg.math)) {
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
  set_nchw(x_desc_, cfg.x, cfg.math);
  int n, c, h, w;
  RLFLOW_CUDNN(cudnnGetPooling2dForwardOutputDim(desc_, x_desc_, &n, &c, &h, &w));
  if (h != cfg.y[2] || w != cfg.y[3]) return;  // ceil_mode: our kernel
  set_nchw(y_desc_, cfg.y, cfg.math);
  cudnn_ = true;
}

PoolOp::~PoolOp() {
  if (desc_) cudnnDestroyPoolingDescriptor(desc_);
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
}

void PoolOp::run(const void* x, void* y, cudaStream_t s) const {
  if (!cudnn_) {
    launch_pool(dtype_, x, y, params_, s);
    return;
  }
  Context& ctx = context();
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  float one = 1.f, zero = 0.f;
  RLFLOW_CUDNN(cudnnPoolingForward(ctx.cudnn, desc_, &one, x_desc_, x, &zero, y_desc_, y));
}

BatchNormOp::BatchNormOp(const std::vector<int64_t>& x, double eps, MathMode math)
    : dtype_(float_storage(math)), eps_(eps) {
  total_ = prod(x);
  channels_ = x.size() > 1 ? x[1] : 1;
  inner_ = prod(x, 2);
  if (dtype_ != kFloat32 || x.size() < 2 || eps < CUDNN_BN_MIN_EPSILON || x[0] > INT32_MAX || channels_ > INT32_MAX || inner_ > INT32_MAX)
    return;
  context();
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&x_desc_));
  RLFLOW_CUDNN(cudnnCreateTensorDescriptor(&p_desc_));
  set_nchw(x_desc_, {x[0], channels_, inner_, 1}, math);
  RLFLOW_CUDNN(cudnnDeriveBNTensorDescriptor(p_desc_, x_desc_, CUDNN_BATCHNORM_SPATIAL));
  cudnn_ = true;
}

BatchNormOp::~BatchNormOp() {
  if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  if (p_desc_) cudnnDestroyTensorDescriptor(p_desc_);
}

void BatchNormOp::run(const void* x, const void* scale, const void* bias, const void* mean, const void* var, void* y,
                      cudaStream_t s) const {
  if (!cudnn_) {
    launch_batchnorm(dtype_, x, scale, bias, mean, var, y, total_, channels_, inner_, static_cast<float>(eps_), s);
    return;
  }
  Context& ctx = context();
  RLFLOW_CUDNN(cudnnSetStream(ctx.cudnn, s));
  float one = 1.f, zero = 0.f;
  RLFLOW_CUDNN(cudnnBatchNormalizationForwardInference(ctx.cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, x_desc_, x,
                                                       x_desc_, y, p_desc_, scale, bias, mean, var, eps_));
}

MatMulOp::MatMulOp(const std::vector<int64_t>& a_in, const std::vector<int64_t>& b_in,
                   const std::vector<int64_t>& y, int activation, MathMode math, const void* a_ptr,
                   const void* b_ptr, void* y_ptr)
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
    const size_t esize = dtype_size(float_storage(math));
    auto at = [&](const void* base, int64_t elements) { return static_cast<const char*>(base) + elements * esize; };
    std::vector<const void*> host(3 * batch_);
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
      host[i] = at(a_, ia * m_ * k_);
      host[batch_ + i] = at(b_, ib * k_ * n_);
      host[2 * batch_ + i] = at(y_, i * m_ * n_);
    }
    pointers_ = DeviceBuffer(host.size() * sizeof(void*));
    copy_to_device(pointers_.get(), host.data(), host.size() * sizeof(void*));
  }
  (void)y;
}

void MatMulOp::run(cudaStream_t s) const {
  Context& ctx = context();
  RLFLOW_CUBLAS(cublasSetStream(ctx.cublas, s));
  set_cublas_math(math_);
  float one = 1.f, zero = 0.f;
  int m = static_cast<int>(m_), n = static_cast<int>(n_), k = static_cast<int>(k_);
  const cudaDataType_t t = cuda_storage_type(math_);
  // Row-major C = A B is column-major C^T = B^T A^T.
  if (mode_ == kSingle) {
    RLFLOW_CUBLAS(cublasGemmEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b_, t, n, a_, t, k, &zero, y_, t, n,
                               cublas_compute_type(math_), CUBLAS_GEMM_DEFAULT));
  } else if (mode_ == kStrided) {
    RLFLOW_CUBLAS(cublasGemmStridedBatchedEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b_, t, n, stride_b_,
                                             a_, t, k, stride_a_, &zero, y_, t, n, m_ * n_, static_cast<int>(batch_),
                                             cublas_compute_type(math_), CUBLAS_GEMM_DEFAULT));
  } else {
    const void* const* p = pointers_.as<const void* const>();
    RLFLOW_CUBLAS(cublasGemmBatchedEx(ctx.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, p + batch_, t, n, p, t, k,
                                      &zero, const_cast<void* const*>(p + 2 * batch_), t, n, static_cast<int>(batch_),
                                      cublas_compute_type(math_), CUBLAS_GEMM_DEFAULT));
  }
  launch_bias_activation(float_storage(math_), y_, nullptr, nullptr, batch_ * m_ * n_, 1, 1, activation_, s);
}

GemmOp::GemmOp(const std::vector<int64_t>& a, const std::vector<int64_t>& b, const std::vector<int64_t>* c,
               bool trans_a, bool trans_b, float alpha, float beta, MathMode math)
    : ta_(trans_a), tb_(trans_b), has_c_(c != nullptr), alpha_(alpha), beta_(beta), math_(math) {
  m_ = ta_ ? a[1] : a[0];
  k_ = ta_ ? a[0] : a[1];
  n_ = tb_ ? b[0] : b[1];
  if (c) c_idx_ = make_broadcast({m_, n_}, {*c});
}

void GemmOp::run(const void* a, const void* b, const void* c, void* y, cudaStream_t s) const {
  Context& ctx = context();
  RLFLOW_CUBLAS(cublasSetStream(ctx.cublas, s));
  set_cublas_math(math_);
  float beta = 0.f;
  if (has_c_) {
    launch_broadcast_copy(c, y, dtype_size(float_storage(math_)), c_idx_, m_ * n_, s);
    beta = beta_;
  }
  int m = static_cast<int>(m_), n = static_cast<int>(n_), k = static_cast<int>(k_);
  const cudaDataType_t t = cuda_storage_type(math_);
  RLFLOW_CUBLAS(cublasGemmEx(ctx.cublas, tb_ ? CUBLAS_OP_T : CUBLAS_OP_N, ta_ ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                             &alpha_, b, t, tb_ ? k : n, a, t, ta_ ? m : k, &beta, y, t, n, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT));
}

}  // namespace cuda
}  // namespace taso
