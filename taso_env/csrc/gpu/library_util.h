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

inline void set_nchw(cudnnTensorDescriptor_t d, const std::vector<int64_t>& s) {
  RLFLOW_CUDNN(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, static_cast<int>(s[0]),
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
