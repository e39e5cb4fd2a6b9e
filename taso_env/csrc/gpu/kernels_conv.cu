// Depthwise convolution (kernels.h): one block per (image, channel) plane and band of
// output rows. The band's input rows (zero where they fall in the padding) and the
// channel's filter are staged in shared memory, each thread computes output pixels of the
// band from there, and the epilogue (bias, residual, activation) is applied before the
// single write. Memory-bound: every input element is read from global memory about once.
#include <algorithm>
#include <cstdint>

#include "activation.cuh"
#include "common.h"
#include "float_storage.cuh"
#include "kernels.h"
#include "launch.cuh"

namespace taso {
namespace cuda {
namespace {

constexpr size_t kSharedBytes = 48 * 1024;  // without opting in to more
constexpr int64_t kOutputsPerBlock = 512;

int64_t input_rows(const DepthwiseConvParams& p, int64_t band) {
  return (band - 1) * p.stride_h + (p.kh - 1) * static_cast<int64_t>(p.dilation_h) + 1;
}

int64_t input_cols(const DepthwiseConvParams& p) {
  return (p.ow - 1) * p.stride_w + (p.kw - 1) * static_cast<int64_t>(p.dilation_w) + 1;
}

size_t shared_bytes(const DepthwiseConvParams& p, int64_t band) {
  return static_cast<size_t>(input_rows(p, band) * input_cols(p) + p.kh * p.kw) * sizeof(float);
}

// Output rows per block: about kOutputsPerBlock outputs, within the shared memory.
int64_t band_rows(const DepthwiseConvParams& p) {
  int64_t band = std::max<int64_t>(1, std::min<int64_t>(p.oh, (kOutputsPerBlock + p.ow - 1) / p.ow));
  while (band > 1 && shared_bytes(p, band) > kSharedBytes) --band;
  return band;
}

template <typename T>
__global__ void depthwise_conv_kernel(const T* __restrict__ x, const T* __restrict__ wt, const T* __restrict__ bias,
                                      const T* __restrict__ residual, T* __restrict__ y, DepthwiseConvParams p,
                                      int64_t band) {
  extern __shared__ float smem[];
  const int64_t plane = blockIdx.x;  // image * channels + channel
  const int64_t ch = plane % p.c;
  const int64_t oy0 = static_cast<int64_t>(blockIdx.y) * band;
  const int64_t rows_out = p.oh - oy0 < band ? p.oh - oy0 : band;
  const int64_t rows_in = (rows_out - 1) * p.stride_h + (p.kh - 1) * static_cast<int64_t>(p.dilation_h) + 1;
  const int64_t cols_in = (p.ow - 1) * p.stride_w + (p.kw - 1) * static_cast<int64_t>(p.dilation_w) + 1;
  float* tile = smem;                   // rows_in x cols_in, from input (oy0 * stride - pad_top, -pad_left)
  float* filter = smem + rows_in * cols_in;  // kh x kw
  const T* xp = x + plane * p.h * p.w;
  const int64_t iy0 = oy0 * p.stride_h - p.pad_top;
  for (int64_t i = threadIdx.x; i < rows_in * cols_in; i += blockDim.x) {
    const int64_t iy = iy0 + i / cols_in, ix = i % cols_in - p.pad_left;
    tile[i] = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w ? load_float(xp[iy * p.w + ix]) : 0.f;
  }
  for (int i = threadIdx.x; i < p.kh * p.kw; i += blockDim.x) filter[i] = load_float(wt[ch * p.kh * p.kw + i]);
  __syncthreads();
  const float b = bias ? load_float(bias[ch]) : 0.f;
  for (int64_t o = threadIdx.x; o < rows_out * p.ow; o += blockDim.x) {
    const int64_t r = o / p.ow, col = o % p.ow;
    const float* at = tile + r * p.stride_h * cols_in + col * p.stride_w;
    float acc = 0.f;
    for (int ky = 0; ky < p.kh; ++ky)
      for (int kx = 0; kx < p.kw; ++kx)
        acc += at[ky * p.dilation_h * cols_in + kx * p.dilation_w] * filter[ky * p.kw + kx];
    const int64_t idx = (plane * p.oh + oy0 + r) * p.ow + col;
    acc += b;
    if (residual) acc += load_float(residual[idx]);
    y[idx] = from_float<T>(activate(acc, p.act));
  }
}

}  // namespace

bool depthwise_conv_fits(const DepthwiseConvParams& p) {
  return p.n > 0 && p.c > 0 && p.oh > 0 && p.ow > 0 && p.n * p.c <= INT32_MAX && shared_bytes(p, 1) <= kSharedBytes;
}

void launch_depthwise_conv(int dtype, const DepthwiseConvParams& p, const void* x, const void* w, const void* bias,
                           const void* residual, void* y, cudaStream_t s) {
  if (!depthwise_conv_fits(p)) throw UnsupportedGraphError("depthwise convolution too wide for the kernel's shared memory");
  const int64_t band = band_rows(p);
  const int64_t outputs = band * p.ow;
  const int threads = static_cast<int>(std::min<int64_t>(256, std::max<int64_t>(32, (outputs + 31) / 32 * 32)));
  const dim3 grid(static_cast<unsigned>(p.n * p.c), static_cast<unsigned>((p.oh + band - 1) / band));
  by_float_storage(dtype, [&](auto t) {
    using T = decltype(t);
    depthwise_conv_kernel<T><<<grid, threads, shared_bytes(p, band), s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
        static_cast<const T*>(residual), static_cast<T*>(y), p, band);
  });
  check_launch("depthwise convolution kernel");
}

}  // namespace cuda
}  // namespace taso
