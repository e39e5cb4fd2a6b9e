// Element-wise kernels: unary math, broadcasting binary ops, Equal and Where, casts, fills,
// the conv/matmul bias + activation epilogue and the batch-norm fallback. 16-bit floats
// (__half, __nv_bfloat16) are loaded into float, computed in float and rounded once when
// stored (float_storage.cuh).
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>

#include "activation.cuh"
#include "common.h"
#include "float_storage.cuh"
#include "kernels.h"
#include "launch.cuh"
#include "taso/types.h"

namespace taso {
namespace cuda {

BroadcastIndex make_broadcast(const std::vector<int64_t>& out, const std::vector<std::vector<int64_t>>& operands) {
  BroadcastIndex idx;
  if (out.size() > static_cast<size_t>(kMaxRank) || operands.size() > 3)
    throw UnsupportedGraphError("broadcast of rank " + std::to_string(out.size()) + " exceeds the backend's " +
                                std::to_string(kMaxRank));
  idx.rank = static_cast<int>(out.size());
  for (int d = 0; d < idx.rank; ++d) idx.dims[d] = out[d];
  for (size_t k = 0; k < operands.size(); ++k) {
    const auto& s = operands[k];
    idx.same[k] = s == out;
    int64_t stride = 1;
    int offset = idx.rank - static_cast<int>(s.size());
    for (int d = idx.rank - 1; d >= 0; --d) {
      int sd = d - offset;
      if (sd < 0) {
        idx.strides[k][d] = 0;
        continue;
      }
      idx.strides[k][d] = s[sd] == 1 && out[d] != 1 ? 0 : stride;
      stride *= s[sd];
    }
  }
  return idx;
}

namespace {

// Storage types that compute in float (float_storage.cuh).
template <typename T>
constexpr bool kIs16Bit = std::is_same<T, __half>::value || std::is_same<T, __nv_bfloat16>::value;

__device__ inline void offsets_of(const BroadcastIndex& idx, int64_t i, int nops, int64_t* off) {
  for (int k = 0; k < nops; ++k) off[k] = 0;
  for (int d = idx.rank - 1; d >= 0; --d) {
    int64_t c = i % idx.dims[d];
    i /= idx.dims[d];
    for (int k = 0; k < nops; ++k) off[k] += c * idx.strides[k][d];
  }
}

template <typename T>
__device__ inline T erf_of(T x) { return erf(x); }

template <typename T>
__device__ inline T unary_apply(UnaryKind k, T x, float a, float b) {
  switch (k) {
    case UnaryKind::kRelu: return x > T(0) ? x : T(0);
    case UnaryKind::kSigmoid: return T(1) / (T(1) + exp(-x));
    case UnaryKind::kTanh: return tanh(x);
    case UnaryKind::kErf: return erf_of(x);
    case UnaryKind::kGelu: return T(0.5) * x * (T(1) + erf_of(x * T(0.70710678118654752440)));
    case UnaryKind::kSqrt: return sqrt(x);
    case UnaryKind::kExp: return exp(x);
    case UnaryKind::kClip: return x < T(a) ? T(a) : (x > T(b) ? T(b) : x);
    case UnaryKind::kHardSigmoid: {
      T v = T(a) * x + T(b);
      return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
    }
    case UnaryKind::kHardSwish: {
      T v = x / T(6) + T(0.5);
      return x * (v < T(0) ? T(0) : (v > T(1) ? T(1) : v));
    }
  }
  return x;
}

template <>
__device__ inline float unary_apply<float>(UnaryKind k, float x, float a, float b) {
  switch (k) {
    case UnaryKind::kRelu: return fmaxf(x, 0.f);
    case UnaryKind::kSigmoid: return 1.f / (1.f + expf(-x));
    case UnaryKind::kTanh: return tanhf(x);
    case UnaryKind::kErf: return erff(x);
    case UnaryKind::kGelu: return 0.5f * x * (1.f + erff(x * 0.70710678118654752440f));
    case UnaryKind::kSqrt: return sqrtf(x);
    case UnaryKind::kExp: return expf(x);
    case UnaryKind::kClip: return fminf(fmaxf(x, a), b);
    case UnaryKind::kHardSigmoid: return fminf(fmaxf(a * x + b, 0.f), 1.f);
    case UnaryKind::kHardSwish: return x * fminf(fmaxf(x / 6.f + 0.5f, 0.f), 1.f);
  }
  return x;
}

// Double computes in double, every other float type in float.
template <typename T>
__global__ void unary_kernel(UnaryKind k, const T* x, T* y, int64_t n, float a, float b) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same<T, double>::value) y[i] = unary_apply<double>(k, x[i], a, b);
    else y[i] = from_float<T>(unary_apply<float>(k, load_float(x[i]), a, b));
  }
}

template <typename T>
__global__ void relu_int_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = x[i] > T(0) ? x[i] : T(0);
}

template <typename T>
__device__ inline T binary_apply(BinaryKind k, T a, T b) {
  switch (k) {
    case BinaryKind::kAdd: return a + b;
    case BinaryKind::kSub: return a - b;
    case BinaryKind::kMul: return a * b;
    case BinaryKind::kDiv:
      if constexpr (std::is_integral<T>::value) return b == T(0) ? T(0) : a / b;  // truncates like ONNX
      else return a / b;
  }
  return a;
}

// binary_apply on stored values: 16-bit floats in float, every other type in itself.
template <typename T>
__device__ inline T binary_stored(BinaryKind k, T a, T b) {
  if constexpr (kIs16Bit<T>) return from_float<T>(binary_apply<float>(k, load_float(a), load_float(b)));
  else return binary_apply<T>(k, a, b);
}

template <typename T>
__global__ void binary_same_kernel(BinaryKind k, const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = binary_stored<T>(k, a[i], b[i]);
}

// b broadcast along the last dims: y[i] = a[i] op b[(i / inner) % nb] (per-channel / row vector).
template <typename T>
__global__ void binary_bcast_kernel(BinaryKind k, BroadcastIndex idx, const T* a, const T* b, T* y, int64_t n) {
  int64_t off[2];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    offsets_of(idx, i, 2, off);
    y[i] = binary_stored<T>(k, a[off[0]], b[off[1]]);
  }
}

// One operand laid out like the output, the other a vector repeated along it:
// vec[(i / inner) % nb] (a bias row, a per-channel scale, a scalar).
template <typename T>
__global__ void binary_vec_kernel(BinaryKind k, const T* full, const T* vec, T* y, int64_t n, int64_t inner,
                                  int64_t nb, bool vec_first) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    T v = vec[(i / inner) % nb];
    y[i] = vec_first ? binary_stored<T>(k, v, full[i]) : binary_stored<T>(k, full[i], v);
  }
}

// Whether operand `op` of `idx` reads vec[(i / inner) % nb]: its non-broadcast dims form
// one contiguous run laid out row-major.
bool vector_pattern(const BroadcastIndex& idx, int op, int64_t* inner, int64_t* nb) {
  int d0 = -1, d1 = -1;
  for (int d = 0; d < idx.rank; ++d)
    if (idx.strides[op][d] != 0 && idx.dims[d] != 1) {
      if (d0 < 0) d0 = d;
      d1 = d + 1;
    }
  *inner = 1;
  *nb = 1;
  if (d0 < 0) return true;  // a scalar
  int64_t expect = 1;
  for (int d = d1 - 1; d >= d0; --d) {
    if (idx.dims[d] == 1) continue;
    if (idx.strides[op][d] != expect) return false;
    expect *= idx.dims[d];
  }
  *nb = expect;
  for (int d = d1; d < idx.rank; ++d) *inner *= idx.dims[d];
  return true;
}

template <typename T>
__global__ void where_kernel(BroadcastIndex idx, const uint8_t* c, const T* x, const T* y, T* out, int64_t n) {
  int64_t off[3];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    offsets_of(idx, i, 3, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

// Values compared as numbers: 16-bit floats through float (+0 equals -0, NaN nothing).
template <typename T>
__device__ inline bool values_equal(T a, T b) {
  if constexpr (kIs16Bit<T>) return load_float(a) == load_float(b);
  else return a == b;
}

template <typename T>
__global__ void equal_kernel(BroadcastIndex idx, const T* a, const T* b, uint8_t* out, int64_t n) {
  int64_t off[2];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    offsets_of(idx, i, 2, off);
    out[i] = values_equal<T>(a[off[0]], b[off[1]]) ? 1 : 0;
  }
}

template <typename T>
__global__ void bcast_copy_kernel(BroadcastIndex idx, const T* x, T* out, int64_t n) {
  int64_t off[1];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    offsets_of(idx, i, 1, off);
    out[i] = x[off[0]];
  }
}

// Conversions through double (exact for every supported pair except int64 > 2^53,
// which a float tensor cannot represent anyway); bool is x != 0. 16-bit floats go
// through float.
template <typename T>
__device__ inline double to_double(T v) {
  if constexpr (kIs16Bit<T>) return static_cast<double>(load_float(v));
  else return static_cast<double>(v);
}
template <typename T>
__device__ inline T from_double(double v) {
  if constexpr (kIs16Bit<T>) return from_float<T>(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <typename From, typename To>
__global__ void cast_kernel(const From* x, To* y, int64_t n, bool to_bool) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    if constexpr (std::is_same<From, int64_t>::value && std::is_same<To, int32_t>::value) {
      y[i] = static_cast<int32_t>(x[i]);
    } else {
      double v = to_double<From>(x[i]);
      y[i] = to_bool ? from_double<To>(v != 0.0 ? 1.0 : 0.0) : from_double<To>(v);
    }
  }
}

template <typename T>
__global__ void fill_kernel(T* y, T v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = v;
}

__device__ inline uint64_t splitmix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename T>
__global__ void random_float_kernel(T* y, int64_t n, uint64_t seed, float scale, bool positive) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float u = (splitmix(seed ^ splitmix(static_cast<uint64_t>(i))) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    float v = (2.f * u - 1.f) * scale;
    if (positive) v = fabsf(v) + 1.f;
    y[i] = from_double<T>(static_cast<double>(v));
  }
}

__global__ void random_bool_kernel(uint8_t* y, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = static_cast<uint8_t>(splitmix(seed ^ splitmix(static_cast<uint64_t>(i))) & 1);
}

template <typename T>
__global__ void bias_act_kernel(T* y, const T* bias, const T* residual, int64_t total, int64_t channels,
                                int64_t inner, int act) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    float v = load_float(y[i]);
    if (bias) v += load_float(bias[(i / inner) % channels]);
    if (residual) v += load_float(residual[i]);
    y[i] = from_float<T>(activate(v, act));
  }
}

template <typename T>
__global__ void batchnorm_kernel(const T* x, const T* scale, const T* bias, const T* mean, const T* var, T* y,
                                 int64_t total, int64_t channels, int64_t inner, float eps) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c = (i / inner) % channels;
    float f = load_float(scale[c]) / sqrtf(load_float(var[c]) + eps);
    y[i] = from_float<T>((load_float(x[i]) - load_float(mean[c])) * f + load_float(bias[c]));
  }
}

// The float storage types (float_storage.cuh) and double.
template <typename F>
void by_float_dtype(int dtype, F&& f) {
  if (dtype == kFloat64) f(double{});
  else by_float_storage(dtype, f);
}

// by_float_dtype's types, int32 and int64.
template <typename F>
void by_numeric_dtype(int dtype, F&& f) {
  if (dtype == kInt32) f(int32_t{});
  else if (dtype == kInt64) f(int64_t{});
  else by_float_dtype(dtype, f);
}

// by_numeric_dtype's types, int8, uint8 and bool (stored as uint8).
template <typename F>
void by_any_dtype(int dtype, F&& f) {
  if (dtype == kInt8) f(int8_t{});
  else if (dtype == kUInt8 || dtype == kBool) f(uint8_t{});
  else by_numeric_dtype(dtype, f);
}

}  // namespace

bool unary_supported(UnaryKind k, int dtype) {
  if (dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16) return true;
  return k == UnaryKind::kRelu && (dtype == kInt32 || dtype == kInt64);
}

bool binary_supported(int dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16 || dtype == kInt32 ||
         dtype == kInt64;
}

void launch_unary(UnaryKind k, int dtype, const void* x, void* y, int64_t n, cudaStream_t s, float a, float b) {
  if (n == 0) return;
  if (dtype == kInt32) {
    relu_int_kernel<<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<const int32_t*>(x), static_cast<int32_t*>(y), n);
  } else if (dtype == kInt64) {
    relu_int_kernel<<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<const int64_t*>(x), static_cast<int64_t*>(y), n);
  } else {
    by_float_dtype(dtype, [&](auto t) {
      using T = decltype(t);
      unary_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(k, static_cast<const T*>(x), static_cast<T*>(y), n, a, b);
    });
  }
  check_launch("unary kernel");
}

void launch_binary(BinaryKind k, int dtype, const void* a, const void* b, void* y, const BroadcastIndex& idx,
                   int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_numeric_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    int64_t inner = 1, nb = 1;
    if (idx.same[0] && idx.same[1])
      binary_same_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(k, static_cast<const T*>(a), static_cast<const T*>(b),
                                                             static_cast<T*>(y), n);
    else if (idx.same[0] && vector_pattern(idx, 1, &inner, &nb))
      binary_vec_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(k, static_cast<const T*>(a), static_cast<const T*>(b),
                                                            static_cast<T*>(y), n, inner, nb, false);
    else if (idx.same[1] && vector_pattern(idx, 0, &inner, &nb))
      binary_vec_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(k, static_cast<const T*>(b), static_cast<const T*>(a),
                                                            static_cast<T*>(y), n, inner, nb, true);
    else
      binary_bcast_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(k, idx, static_cast<const T*>(a),
                                                               static_cast<const T*>(b), static_cast<T*>(y), n);
  });
  check_launch("binary kernel");
}

void launch_where(const void* cond, const void* x, const void* y, void* out, int elem_size,
                  const BroadcastIndex& idx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    where_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(idx, static_cast<const uint8_t*>(cond), static_cast<const T*>(x),
                                                     static_cast<const T*>(y), static_cast<T*>(out), n);
  });
  check_launch("where kernel");
}

void launch_equal(int dtype, const void* a, const void* b, void* out, const BroadcastIndex& idx, int64_t n,
                  cudaStream_t s) {
  if (n == 0) return;
  by_any_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    equal_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(idx, static_cast<const T*>(a), static_cast<const T*>(b),
                                                                static_cast<uint8_t*>(out), n);
  });
  check_launch("equal kernel");
}

void launch_broadcast_copy(const void* x, void* out, int elem_size, const BroadcastIndex& idx, int64_t n,
                           cudaStream_t s) {
  if (n == 0) return;
  by_size(elem_size, [&](auto t) {
    using T = decltype(t);
    bcast_copy_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(idx, static_cast<const T*>(x), static_cast<T*>(out), n);
  });
  check_launch("broadcast copy kernel");
}

bool cast_supported(int from, int to) {
  auto ok = [](int d) {
    return d == kFloat32 || d == kFloat64 || d == kFloat16 || d == kBFloat16 || d == kInt32 || d == kInt64 ||
           d == kInt8 || d == kUInt8 || d == kBool;
  };
  return ok(from) && ok(to);
}

void launch_cast(int from, int to, const void* x, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_any_dtype(from, [&](auto f) {
    using F = decltype(f);
    by_any_dtype(to, [&](auto t) {
      using T = decltype(t);
      cast_kernel<F, T><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<const F*>(x), static_cast<T*>(y), n,
                                                         to == kBool);
    });
  });
  check_launch("cast kernel");
}

void launch_fill(int dtype, double value, void* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  by_any_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    T v;
    // 16-bit floats round from float, as from_float does in the kernels (an explicit
    // float: not every CUDA version converts __nv_bfloat16 from double).
    if constexpr (kIs16Bit<T>) v = T(static_cast<float>(value));
    else v = dtype == kBool ? static_cast<T>(value != 0.0) : static_cast<T>(value);
    fill_kernel<T><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<T*>(y), v, n);
  });
  check_launch("fill kernel");
}

void launch_random_fill(int dtype, void* y, int64_t n, uint64_t seed, float scale, bool positive, cudaStream_t s) {
  if (n == 0) return;
  switch (dtype) {
    case kFloat32:
      random_float_kernel<float><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<float*>(y), n, seed, scale, positive);
      break;
    case kFloat64:
      random_float_kernel<double><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<double*>(y), n, seed, scale, positive);
      break;
    case kFloat16:
      random_float_kernel<__half><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<__half*>(y), n, seed, scale, positive);
      break;
    case kBFloat16:
      random_float_kernel<__nv_bfloat16><<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<__nv_bfloat16*>(y), n,
                                                                                      seed, scale, positive);
      break;
    case kBool: random_bool_kernel<<<grid_for(n), threads_per_block(), 0, s>>>(static_cast<uint8_t*>(y), n, seed); break;
    default: RLFLOW_CUDA(cudaMemsetAsync(y, 0, n * dtype_size(dtype), s)); break;
  }
  check_launch("random fill kernel");
}

void launch_bias_activation(int dtype, void* y, const void* bias, const void* residual, int64_t total,
                            int64_t channels, int64_t inner, int act, cudaStream_t s) {
  if (total == 0 || (!bias && !residual && act == 0)) return;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    bias_act_kernel<T><<<grid_for(total), threads_per_block(), 0, s>>>(
        static_cast<T*>(y), static_cast<const T*>(bias), static_cast<const T*>(residual), total, channels, inner, act);
  });
  check_launch("bias/activation kernel");
}

void launch_batchnorm(int dtype, const void* x, const void* scale, const void* bias, const void* mean,
                      const void* var, void* y, int64_t total, int64_t channels, int64_t inner, float eps,
                      cudaStream_t s) {
  if (total == 0) return;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    batchnorm_kernel<T><<<grid_for(total), threads_per_block(), 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias),
        static_cast<const T*>(mean), static_cast<const T*>(var), static_cast<T*>(y), total, channels, inner, eps);
  });
  check_launch("batch norm kernel");
}

}  // namespace cuda
}  // namespace taso
