// Storage types of the graph's float32 tensors on the device (common.h: MathMode,
// float_storage): float in fp32 / tf32, __half in fp16, __nv_bfloat16 in bf16. Kernels
// load a stored value into float, compute in float and store the result back:
//
//   by_float_storage(dtype, [&](auto t) {
//     using T = decltype(t);
//     my_kernel<T><<<...>>>(static_cast<const T*>(x), static_cast<T*>(y), n);
//   });
//   template <typename T> __global__ void my_kernel(const T* x, T* y, int64_t n) {
//     ... y[i] = from_float<T>(f(load_float(x[i]))); ...
//   }
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "common.h"
#include "taso/types.h"

namespace taso {
namespace cuda {

__host__ __device__ __forceinline__ float load_float(float v) { return v; }
__device__ __forceinline__ float load_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float load_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// Calls f with a value of the storage type of `dtype` (kFloat32, kFloat16 or kBFloat16);
// UnsupportedGraphError for any other dtype.
template <typename F>
void by_float_storage(int dtype, F&& f) {
  switch (dtype) {
    case kFloat32: f(float{}); break;
    case kFloat16: f(__half{}); break;
    case kBFloat16: f(__nv_bfloat16{}); break;
    default:
      throw UnsupportedGraphError("dtype " + dtype_name(dtype) + " is not a float storage type of this kernel");
  }
}

}  // namespace cuda
}  // namespace taso
