// Normalisation and reduction kernels: Softmax, LayerNorm, ReduceMean/ReduceSum (and
// GlobalAvgPool through it), CumSum (a running sum along an axis), and the pooling
// fallback for cases cuDNN cannot express.
// Kernels are templated on the storage type T of float tensors (float_storage.cuh) and
// accumulate in float.
#include <cfloat>

#include "common.h"
#include "float_storage.cuh"
#include "kernels.h"
#include "launch.cuh"

namespace taso {
namespace cuda {
namespace {

constexpr int kRowThreads = 256;

// One block per row of n contiguous elements.
template <typename T>
__global__ void softmax_rows_kernel(const T* x, T* y, int64_t n) {
  __shared__ float shared[32];
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, load_float(xr[j]));
  m = block_max(m, shared);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(load_float(xr[j]) - m);
  s = block_sum(s, shared);
  float inv = 1.f / s;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = from_float<T>(expf(load_float(xr[j]) - m) * inv);
}

// One thread per (outer, inner) column when the softmax axis is not the last.
template <typename T>
__global__ void softmax_cols_kernel(const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  int64_t cols = outer * inner;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
    int64_t o = c / inner, in = c % inner;
    const T* xc = x + o * n * inner + in;
    T* yc = y + o * n * inner + in;
    float m = -FLT_MAX;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, load_float(xc[j * inner]));
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) s += expf(load_float(xc[j * inner]) - m);
    float inv = 1.f / s;
    for (int64_t j = 0; j < n; ++j) yc[j * inner] = from_float<T>(expf(load_float(xc[j * inner]) - m) * inv);
  }
}

__device__ inline int64_t param_offset(const ParamIndex& p, int64_t j) {
  if (p.mode == 0) return j;
  if (p.mode == 1) return 0;
  int64_t off = 0;
  for (int d = p.rank - 1; d >= 0; --d) {
    off += (j % p.dims[d]) * p.strides[d];
    j /= p.dims[d];
  }
  return off;
}

template <typename T>
__global__ void layernorm_kernel(const T* x, const T* scale, const T* bias, T* y, int64_t n, ParamIndex si,
                                 ParamIndex bi, float eps) {
  __shared__ float shared[32];
  const T* xr = x + blockIdx.x * n;
  T* yr = y + blockIdx.x * n;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += load_float(xr[j]);
  float mean = block_sum(s, shared) / static_cast<float>(n);
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float d = load_float(xr[j]) - mean;
    v += d * d;
  }
  float rstd = rsqrtf(block_sum(v, shared) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float out = (load_float(xr[j]) - mean) * rstd * load_float(scale[param_offset(si, j)]);
    if (bias) out += load_float(bias[param_offset(bi, j)]);
    yr[j] = from_float<T>(out);
  }
}

// One block per output element; threads stride over the reduced elements.
template <typename T>
__global__ void reduce_kernel(const T* x, T* y, ReduceIndex idx, int64_t n_red, float factor) {
  __shared__ float shared[32];
  int64_t o = blockIdx.x, base = 0;
  for (int d = idx.kept_rank - 1; d >= 0; --d) {
    base += (o % idx.kept_dims[d]) * idx.kept_strides[d];
    o /= idx.kept_dims[d];
  }
  float s = 0.f;
  for (int64_t r = threadIdx.x; r < n_red; r += blockDim.x) {
    int64_t rest = r, off = base;
    for (int d = idx.red_rank - 1; d >= 0; --d) {
      off += (rest % idx.red_dims[d]) * idx.red_strides[d];
      rest /= idx.red_dims[d];
    }
    s += load_float(x[off]);
  }
  s = block_sum(s, shared);
  if (threadIdx.x == 0) y[blockIdx.x] = from_float<T>(s * factor);
}

// Start value of max pooling: the lowest finite value of T, so that a window covering only
// padding stores a finite value in 16 bits as it does in float32 (-FLT_MAX would round to
// -inf). Any other window's maximum is a stored input either way.
template <typename T>
__device__ inline float lowest_finite() { return -FLT_MAX; }
template <>
__device__ inline float lowest_finite<__half>() { return -load_float(CUDART_MAX_NORMAL_FP16); }
template <>
__device__ inline float lowest_finite<__nv_bfloat16>() { return -load_float(CUDART_MAX_NORMAL_BF16); }

template <typename T>
__global__ void pool_kernel(const T* x, T* y, PoolParams p) {
  int64_t total = p.n * p.c * p.oh * p.ow;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t ox = i % p.ow, oy = (i / p.ow) % p.oh, nc = i / (p.ow * p.oh);
    const T* xp = x + nc * p.h * p.w;
    int64_t y0 = oy * p.sh - p.pt, x0 = ox * p.sw - p.pl;
    float acc = p.max ? lowest_finite<T>() : 0.f;
    int64_t count = 0, padded = 0;
    for (int ky = 0; ky < p.kh; ++ky) {
      int64_t yy = y0 + ky;
      for (int kx = 0; kx < p.kw; ++kx) {
        int64_t xx = x0 + kx;
        // Positions inside the explicitly padded input (ceil-mode overhang excluded).
        bool in_padded = yy < p.h + p.pb && xx < p.w + p.pr;
        if (yy < 0 || yy >= p.h || xx < 0 || xx >= p.w) {
          padded += in_padded ? 1 : 0;
          continue;
        }
        float v = load_float(xp[yy * p.w + xx]);
        acc = p.max ? fmaxf(acc, v) : acc + v;
        ++count;
      }
    }
    if (!p.max) {
      int64_t div = p.count_include_pad ? count + padded : count;
      acc = div > 0 ? acc / static_cast<float>(div) : 0.f;
    }
    y[i] = from_float<T>(acc);
  }
}

// The accumulator of a running sum over stored values of T: float for the float storage
// types, T itself for float64 and the integers.
template <typename T>
struct SumOf {
  using type = T;
  __device__ static type load(T v) { return v; }
  __device__ static T store(type v) { return v; }
};
template <>
struct SumOf<float> {
  using type = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <>
struct SumOf<__half> {
  using type = float;
  __device__ static float load(__half v) { return load_float(v); }
  __device__ static __half store(float v) { return from_float<__half>(v); }
};
template <>
struct SumOf<__nv_bfloat16> {
  using type = float;
  __device__ static float load(__nv_bfloat16 v) { return load_float(v); }
  __device__ static __nv_bfloat16 store(float v) { return from_float<__nv_bfloat16>(v); }
};

// One thread per (outer, inner) line of x viewed as [outer, len, inner], summing along len.
template <typename T>
__global__ void cumsum_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool exclusive,
                              bool reverse) {
  using Acc = typename SumOf<T>::type;
  int64_t lines = outer * inner;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < lines; c += (int64_t)gridDim.x * blockDim.x) {
    int64_t base = (c / inner) * len * inner + c % inner;
    Acc sum = Acc(0);
    for (int64_t j = 0; j < len; ++j) {
      int64_t at = base + (reverse ? len - 1 - j : j) * inner;
      Acc v = SumOf<T>::load(x[at]);
      if (!exclusive) sum += v;
      y[at] = SumOf<T>::store(sum);
      if (exclusive) sum += v;
    }
  }
}

// Lines at least this long, when fewer than kBlockScanMaxLines (too few to fill the GPU
// with one thread each), are scanned by a block each.
constexpr int64_t kBlockScanMinLength = 64;
constexpr int64_t kBlockScanMaxLines = 4096;

// One block of kRowThreads per line (few, long lines: a sequence of position ids): each
// thread sums a contiguous chunk of the line, the block scans the chunk sums, and each
// thread then writes its chunk starting from the sum of the chunks before it.
template <typename T>
__global__ void cumsum_block_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool exclusive,
                                    bool reverse) {
  using Acc = typename SumOf<T>::type;
  __shared__ Acc partial[kRowThreads];
  int64_t chunk = (len + kRowThreads - 1) / kRowThreads;
  int64_t begin = threadIdx.x * chunk, end = begin + chunk < len ? begin + chunk : len;
  for (int64_t line = blockIdx.x; line < outer * inner; line += gridDim.x) {
    int64_t base = (line / inner) * len * inner + line % inner;
    auto at = [&](int64_t j) { return base + (reverse ? len - 1 - j : j) * inner; };
    Acc own = Acc(0);
    for (int64_t j = begin; j < end; ++j) own += SumOf<T>::load(x[at(j)]);
    partial[threadIdx.x] = own;
    __syncthreads();
    for (int step = 1; step < kRowThreads; step <<= 1) {  // inclusive scan of the chunk sums
      Acc add = threadIdx.x >= step ? partial[threadIdx.x - step] : Acc(0);
      __syncthreads();
      partial[threadIdx.x] += add;
      __syncthreads();
    }
    Acc sum = partial[threadIdx.x] - own;  // the chunks before this one
    for (int64_t j = begin; j < end; ++j) {
      Acc v = SumOf<T>::load(x[at(j)]);
      if (!exclusive) sum += v;
      y[at(j)] = SumOf<T>::store(sum);
      if (exclusive) sum += v;
    }
    __syncthreads();  // partial is reused by the next line
  }
}

}  // namespace

bool cumsum_supported(int dtype) {
  return dtype == kFloat32 || dtype == kFloat16 || dtype == kBFloat16 || dtype == kFloat64 || dtype == kInt32 ||
         dtype == kInt64;
}

void launch_cumsum(int dtype, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, bool exclusive,
                   bool reverse, cudaStream_t s) {
  int64_t lines = outer * inner;
  if (lines == 0 || len == 0) return;
  auto launch = [&](auto t) {
    using T = decltype(t);
    if (len >= kBlockScanMinLength && lines < kBlockScanMaxLines)
      cumsum_block_kernel<T><<<static_cast<unsigned>(lines < 65535 ? lines : 65535), kRowThreads, 0, s>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner, exclusive, reverse);
    else
      cumsum_kernel<T><<<grid_for(lines), threads_per_block(), 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                      outer, len, inner, exclusive, reverse);
  };
  if (dtype == kInt32) launch(int32_t{});
  else if (dtype == kInt64) launch(int64_t{});
  else if (dtype == kFloat64) launch(double{});
  else by_float_storage(dtype, launch);
  check_launch("cumsum kernel");
}

void launch_softmax(int dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, cudaStream_t s) {
  if (outer * n * inner == 0) return;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (inner == 1) {
      int threads = n >= kRowThreads ? kRowThreads : ((static_cast<int>(n) + 31) / 32) * 32;
      softmax_rows_kernel<T><<<static_cast<unsigned>(outer), threads, 0, s>>>(xt, yt, n);
    } else {
      softmax_cols_kernel<T><<<grid_for(outer * inner), threads_per_block(), 0, s>>>(xt, yt, outer, n, inner);
    }
  });
  check_launch("softmax kernel");
}

void launch_layernorm(int dtype, const void* x, const void* scale, const void* bias, void* y, int64_t rows,
                      int64_t n, const ParamIndex& scale_idx, const ParamIndex& bias_idx, float eps,
                      cudaStream_t s) {
  if (rows * n == 0) return;
  int threads = n >= kRowThreads ? kRowThreads : ((static_cast<int>(n) + 31) / 32) * 32;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    layernorm_kernel<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(scale), static_cast<const T*>(bias), static_cast<T*>(y), n,
        scale_idx, bias_idx, eps);
  });
  check_launch("layer norm kernel");
}

void launch_reduce(int dtype, const void* x, void* y, const ReduceIndex& idx, int64_t n_out, int64_t n_red, bool mean,
                   cudaStream_t s) {
  if (n_out == 0) return;
  int threads = n_red >= kRowThreads ? kRowThreads : std::max(32, static_cast<int>((n_red + 31) / 32) * 32);
  float factor = mean && n_red > 0 ? 1.f / static_cast<float>(n_red) : 1.f;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    reduce_kernel<T><<<static_cast<unsigned>(n_out), threads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), idx,
                                                                      n_red, factor);
  });
  check_launch("reduce kernel");
}

void launch_pool(int dtype, const void* x, void* y, const PoolParams& p, cudaStream_t s) {
  int64_t total = p.n * p.c * p.oh * p.ow;
  if (total == 0) return;
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    pool_kernel<T><<<grid_for(total), threads_per_block(), 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
  });
  check_launch("pool kernel");
}

}  // namespace cuda
}  // namespace taso
