// Launch geometry shared by the .cu files: grid-stride loops of kThreads threads.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace taso {
namespace cuda {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 8)));
}

// Surfaces launch-configuration errors at the launch that caused them.
inline void check_launch(const char* what) {
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) check_cuda(status, what, __FILE__, __LINE__);
}

}  // namespace cuda
}  // namespace taso
