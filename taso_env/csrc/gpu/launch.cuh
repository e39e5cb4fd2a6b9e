// Launch geometry shared by the .cu files: grid-stride loops; block size and grid from
// launch_params() (common.h); block-wide reductions.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <string>

#include "common.h"

namespace taso {
namespace cuda {

// Threads per block and grid size of the current launch parameters (common.h:
// launch_params(), set per step by a tuning plan). Every kernel launched with these
// runs a grid-stride loop, so any block size and elements-per-thread value is correct.
inline int threads_per_block() { return launch_params().threads; }

inline unsigned grid_for(int64_t n) {
  const LaunchParams& p = launch_params();
  int64_t per_block = static_cast<int64_t>(p.threads) * std::max(p.items_per_thread, 1);
  int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 8)));
}

// Calls f with an unsigned integer of `elem_size` bytes (kernels that only move data
// dispatch on the element size, not the dtype).
template <typename F>
void by_size(int elem_size, F&& f) {
  switch (elem_size) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    default: throw UnsupportedGraphError("element size " + std::to_string(elem_size) + " is not supported");
  }
}

// Block-wide reductions of one float (sum or max) for kernels whose block reduces one
// row; every thread gets the result. `shared` holds one float per warp (32 suffice).
__device__ inline float block_sum(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < static_cast<int>(blockDim.x + 31) / 32; ++w) total += shared[w];
  return total;
}

__device__ inline float block_max(float v, float* shared) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float m = -FLT_MAX;
  for (int w = 0; w < static_cast<int>(blockDim.x + 31) / 32; ++w) m = fmaxf(m, shared[w]);
  return m;
}

// Surfaces launch-configuration errors at the launch that caused them.
inline void check_launch(const char* what) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) check_cuda(status, what, __FILE__, __LINE__);
}

}  // namespace cuda
}  // namespace taso
