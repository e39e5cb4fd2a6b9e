// Small helpers shared by the cuDNN/cuBLAS op files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace taso {
namespace cuda {

inline std::string dims_str(const std::vector<int64_t>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "x" : "") + std::to_string(v[i]);
  return out;
}

// cuDNN's type of the stored float tensors in `math` (common.h: float_storage).
inline cudnnDataType_t cudnn_storage_type(MathMode math) {
  switch (math) {
    case MathMode::kFP16: return CUDNN_DATA_HALF;
    case MathMode::kBF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

// cuBLAS's type of the stored matrices in `math`, and the compute type: float
// accumulation, TF32 tensor cores in tf32 only.
inline cudaDataType_t cuda_storage_type(MathMode math) {
  switch (math) {
    case MathMode::kFP16: return CUDA_R_16F;
    case MathMode::kBF16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}
inline cublasComputeType_t cublas_compute_type(MathMode math) {
  return math == MathMode::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

inline void set_nchw(cudnnTensorDescriptor_t d, const std::vector<int64_t>& s, MathMode math) {
  RLFLOW_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, cudnn_storage_type(math), static_cast<int>(s[0]),
                                          static_cast<int>(s[1]), static_cast<int>(s[2]), static_cast<int>(s[3])));
}

inline int64_t prod(const std::vector<int64_t>& v, size_t from = 0, size_t to = std::string::npos) {
  to = std::min(to, v.size());
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= v[i];
  return p;
}

}  // namespace cuda
}  // namespace taso
