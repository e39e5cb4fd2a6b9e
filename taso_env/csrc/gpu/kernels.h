// Host-side launchers of the backend's own kernels (element-wise with broadcasting,
// data movement, normalisation, reductions, pooling fallback, fills). Every launcher
// enqueues on `stream` and never synchronises, so all of them can be captured into a
// CUDA graph. Index helpers take at most kMaxRank dimensions.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace taso {
namespace cuda {

constexpr int kMaxRank = 8;

// Output dims and, per operand, the element strides that map an output coordinate to
// the operand (0 on broadcast dims). Built by make_broadcast().
struct BroadcastIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};
  bool same[3] = {false, false, false};  // operand is laid out exactly like the output
};
// Throws UnsupportedGraphError when the output rank exceeds kMaxRank.
BroadcastIndex make_broadcast(const std::vector<int64_t>& out,
                              const std::vector<std::vector<int64_t>>& operands);

// kClip: min(max(x, a), b); kHardSigmoid: max(0, min(1, a * x + b)); kHardSwish:
// x * max(0, min(1, x / 6 + 1 / 2)).
enum class UnaryKind : int { kRelu, kSigmoid, kTanh, kErf, kGelu, kSqrt, kExp, kClip, kHardSigmoid, kHardSwish };
enum class BinaryKind : int { kAdd, kSub, kMul, kDiv };

// dtype codes are the ONNX codes of taso/types.h.
bool unary_supported(UnaryKind k, int dtype);
bool binary_supported(int dtype);
void launch_unary(UnaryKind k, int dtype, const void* x, void* y, int64_t n, cudaStream_t s, float a = 0.f,
                  float b = 0.f);
void launch_binary(BinaryKind k, int dtype, const void* a, const void* b, void* y, const BroadcastIndex& idx,
                   int64_t n, cudaStream_t s);
// out = cond ? x : y (cond bool bytes), any element size.
void launch_where(const void* cond, const void* x, const void* y, void* out, int elem_size,
                  const BroadcastIndex& idx, int64_t n, cudaStream_t s);
// Broadcast copy of x (operand 0 of idx) into out.
void launch_broadcast_copy(const void* x, void* out, int elem_size, const BroadcastIndex& idx, int64_t n,
                           cudaStream_t s);
bool cast_supported(int from, int to);
void launch_cast(int from, int to, const void* x, void* y, int64_t n, cudaStream_t s);
// Fills with `value` converted to dtype.
void launch_fill(int dtype, double value, void* y, int64_t n, cudaStream_t s);
// Deterministic pseudo-random data: floats uniform in [-scale, scale) (|.| + 1 when
// `positive`), bools random, integers 0.
void launch_random_fill(int dtype, void* y, int64_t n, uint64_t seed, float scale, bool positive,
                        cudaStream_t s);

// Epilogue activations beyond the graph IR's fused codes (executor fusion only).
constexpr int kEpilogueRelu6 = 4;      // Clip(min 0, max 6)
constexpr int kEpilogueHardSwish = 5;  // HardSwish

// The launchers below that take `dtype` read and write float tensors stored as `dtype`
// (kFloat32, kFloat16 or kBFloat16: float_storage.cuh) and compute in float32.

// y[n, c, inner] = act(y + bias[c] + residual[n, c, inner]) in place; bias and residual
// may be null. act: 0 none, 1 relu, 2 sigmoid, 3 tanh, kEpilogueRelu6, kEpilogueHardSwish.
void launch_bias_activation(int dtype, void* y, const void* bias, const void* residual, int64_t total,
                            int64_t channels, int64_t inner, int act, cudaStream_t s);
// A depthwise convolution (one group per channel, one filter each) of NCHW x, with its
// padding read as zeros in place (any pads, strides, dilations), then
// act(conv + bias[c] + residual) as launch_bias_activation; bias and residual may be null.
struct DepthwiseConvParams {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 1, kw = 1, stride_h = 1, stride_w = 1, dilation_h = 1, dilation_w = 1, pad_top = 0, pad_left = 0;
  int act = 0;
};
// Whether launch_depthwise_conv runs these shapes (a band of one output row and its input
// rows fit the kernel's shared memory).
bool depthwise_conv_fits(const DepthwiseConvParams& p);
void launch_depthwise_conv(int dtype, const DepthwiseConvParams& p, const void* x, const void* w, const void* bias,
                           const void* residual, void* y, cudaStream_t s);
// Inference batch norm over channel axis 1 of [N, C, inner].
void launch_batchnorm(int dtype, const void* x, const void* scale, const void* bias, const void* mean,
                      const void* var, void* y, int64_t total, int64_t channels, int64_t inner, float eps,
                      cudaStream_t s);

// Permuted copy: out coordinate i reads x at sum(coord[d] * in_strides[d]).
struct PermuteIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
};
void launch_permute(const void* x, void* y, int elem_size, const PermuteIndex& idx, int64_t n, cudaStream_t s);

// Concat / split viewed as rows of [outer, row_len]; piece i owns columns
// [offsets[i], offsets[i+1]). `ptrs` and `offsets` are device arrays.
void launch_concat(const void* const* ptrs, const int64_t* offsets, int pieces, void* out, int elem_size,
                   int64_t outer, int64_t row_len, cudaStream_t s);
void launch_split(const void* x, void* const* ptrs, const int64_t* offsets, int pieces, int elem_size,
                  int64_t outer, int64_t row_len, cudaStream_t s);

// Constant padding: out coordinate minus begins, outside the input -> value.
struct PadIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_dims[kMaxRank] = {};
  int64_t begins[kMaxRank] = {};
};
void launch_pad(const void* x, void* y, int elem_size, const PadIndex& idx, uint64_t value_bits, int64_t n,
                cudaStream_t s);

// np.take(data [outer, axis_dim, inner], indices (n_idx), axis); negative indices wrap,
// out-of-range ones are clamped.
void launch_gather(const void* data, const void* indices, bool indices64, void* out, int elem_size,
                   int64_t outer, int64_t axis_dim, int64_t n_idx, int64_t inner, cudaStream_t s);

// GatherElements: out (indices' shape, `rank` dims out_dims) reads data at the output
// coordinate with its `axis` coordinate replaced by the index (negative indices wrap,
// out-of-range ones are clamped); data_strides are data's element strides.
struct GatherElementsIndex {
  int rank = 0, axis = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t data_strides[kMaxRank] = {};
  int64_t axis_dim = 0;
};
void launch_gather_elements(const void* data, const void* indices, bool indices64, void* out, int elem_size,
                            const GatherElementsIndex& idx, int64_t n, cudaStream_t s);

// out = (a == b) as bool bytes, operands of `dtype` broadcast by idx (operands 0, 1).
void launch_equal(int dtype, const void* a, const void* b, void* out, const BroadcastIndex& idx, int64_t n,
                  cudaStream_t s);

// Whether launch_cumsum runs `dtype` (float storage types, float64, int32, int64).
bool cumsum_supported(int dtype);
// ONNX CumSum of x viewed as [outer, len, inner] along len: `exclusive` leaves each
// element out of its own sum, `reverse` sums from the end. Floats accumulate in float
// (float64 in double), integers in their own type. Few long lines scan a block each,
// many lines a thread each.
void launch_cumsum(int dtype, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool exclusive,
                   bool reverse, cudaStream_t s);

// Softmax of x viewed as [outer, n, inner] along n.
void launch_softmax(int dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s);

// Parameter broadcast over the normalised dims of LayerNorm.
struct ParamIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};
  int mode = 0;  // 0 contiguous (index j), 1 scalar, 2 general
};
void launch_layernorm(int dtype, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                      int64_t n, const ParamIndex& scale_idx, const ParamIndex& bias_idx, float eps,
                      cudaStream_t s);

// Reduction: each output element sums x over the reduced dims.
struct ReduceIndex {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};
  int64_t red_dims[kMaxRank] = {}, red_strides[kMaxRank] = {};
};
void launch_reduce(int dtype, const void* x, void* y, const ReduceIndex& idx, int64_t n_out, int64_t n_red, bool mean,
                   cudaStream_t s);

// Own pooling (asymmetric pads, ceil_mode): ONNX semantics of docs/operators.md.
struct PoolParams {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int kh = 0, kw = 0, sh = 1, sw = 1, pt = 0, pl = 0, pb = 0, pr = 0;
  bool max = true, count_include_pad = false;
};
void launch_pool(int dtype, const void* x, void* y, const PoolParams& p, cudaStream_t s);

}  // namespace cuda
}  // namespace taso
