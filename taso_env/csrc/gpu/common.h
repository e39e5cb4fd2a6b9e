// Shared pieces of the CUDA backend: typed errors, status checks, RAII device memory,
// the process-wide handles (stream, cuDNN, cuBLAS) and the math mode.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "taso/types.h"

namespace taso {
namespace cuda {

// A CUDA, cuDNN or cuBLAS call failed (the message names the call, the op and the status).
class CudaError : public std::runtime_error {
 public:
  explicit CudaError(const std::string& m) : std::runtime_error(m) {}
};

// The graph holds an op this backend cannot execute (an opaque ONNX op, an
// unsupported dtype); the message names the op.
class UnsupportedGraphError : public std::runtime_error {
 public:
  explicit UnsupportedGraphError(const std::string& m) : std::runtime_error(m) {}
};

// Error kinds for the Python translator (_cuda.pyx): 100 CudaError,
// 101 UnsupportedGraphError, otherwise the core's classification.
std::pair<int, std::string> classify_cuda_exception();

void check_cuda(cudaError_t status, const char* call, const char* file, int line);
void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line);
void check_cublas(cublasStatus_t status, const char* call, const char* file, int line);

#define RLFLOW_CUDA(call) ::taso::cuda::check_cuda((call), #call, __FILE__, __LINE__)
#define RLFLOW_CUDNN(call) ::taso::cuda::check_cudnn((call), #call, __FILE__, __LINE__)
#define RLFLOW_CUBLAS(call) ::taso::cuda::check_cublas((call), #call, __FILE__, __LINE__)

// Strict fp32 (no TF32 anywhere), TF32 tensor cores for convolutions and GEMMs, or a
// 16-bit mode: every float32 tensor of the graph is stored as float16 / bfloat16 on the
// device (weights and inputs cast when uploaded, outputs cast back to float32 when read),
// convolutions and GEMMs run on tensor cores with float32 accumulation, and our kernels
// load 16-bit values, compute in float32 and store 16-bit results.
enum class MathMode : int { kFP32 = 0, kTF32 = 1, kFP16 = 2, kBF16 = 3 };
inline const char* math_mode_name(MathMode m) {
  switch (m) {
    case MathMode::kTF32: return "tf32";
    case MathMode::kFP16: return "fp16";
    case MathMode::kBF16: return "bf16";
    default: return "fp32";
  }
}
inline bool is_16bit(MathMode m) { return m == MathMode::kFP16 || m == MathMode::kBF16; }
// The device dtype of the graph's float32 tensors in `m` (kFloat32, kFloat16 or kBFloat16).
int float_storage(MathMode m);
// The device dtype of a graph tensor of `dtype` when float32 tensors are stored as
// `float_dtype` (other dtypes are stored as they are).
inline int stored_dtype(int dtype, int float_dtype) { return dtype == kFloat32 ? float_dtype : dtype; }

// How convolutions and GEMMs choose their algorithm the first time a configuration is
// seen in the process (ExecutorOptions::algo_search, OpMeasureOptions::algo_search).
struct AlgoSearch {
  // Time cuDNN's candidates for a convolution (false: take cuDNN's heuristic choice,
  // nothing timed).
  bool cudnn_find = true;
  // Print each configuration's cache verdict and each timed candidate to stderr.
  bool log = false;
};

// Owning device allocation (cudaMalloc / cudaFree); movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Process-wide handles, created on first use and kept for the life of the process
// (a fixed, one-time allocation). All work runs on one non-blocking stream.
struct Context {
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublaslt = nullptr;
  void* cublas_workspace = nullptr;
  size_t cublas_workspace_bytes = 0;
  int device = 0;
  std::string device_name;
  int cc_major = 0, cc_minor = 0;
};
Context& context();

// Launch parameters of rlflow's own grid-stride kernels (launch.cuh): threads per block
// and elements per thread. Thread-local; the executor sets them around each step of a
// tuning plan (ExecutorOptions::plan), so a captured CUDA graph keeps the values it was
// captured with. Default: 256 threads, 1 element per thread.
struct LaunchParams {
  int threads = 256;
  int items_per_thread = 1;
};
LaunchParams& launch_params();
// Sets launch_params() for its lifetime (values <= 0 keep the current ones).
class LaunchScope {
 public:
  LaunchScope(int threads, int items_per_thread) : saved_(launch_params()) {
    if (threads > 0) launch_params().threads = threads;
    if (items_per_thread > 0) launch_params().items_per_thread = items_per_thread;
  }
  ~LaunchScope() { launch_params() = saved_; }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  LaunchParams saved_;
};

// GPU time of one call of `enqueue` in ms, as the executor runs it: `calls` back-to-back
// calls captured in a CUDA graph (eager launches would charge each kernel several us of
// launch overhead; eager when a library refuses capture), the median of `samples`
// replays after one warm-up. `enqueue` returns false when the call cannot run; the
// result is then negative.
float time_calls_ms(const std::function<bool(cudaStream_t)>& enqueue, cudaStream_t s, int calls = 8,
                    int samples = 5);

// Host <-> device copies ordered on the shared stream, returning when the data has
// arrived. (A plain cudaMemcpy from pageable memory runs on the legacy stream and may
// return before its DMA lands, unordered with the non-blocking stream the steps run on:
// a kernel could read the tensor half-written.)
void copy_to_device(void* device, const void* host, size_t bytes);
void copy_to_host(void* host, const void* device, size_t bytes);

// Sets the cuBLAS math mode of the shared handle for `mode`.
void set_cublas_math(MathMode mode);

// Device properties and library versions, for recording with measurements.
struct DeviceInfo {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_memory = 0;
  int cuda_runtime = 0;
  int cuda_driver = 0;
  size_t cudnn_version = 0;
  int cublas_version = 0;
};
DeviceInfo device_info();
// Number of CUDA devices; 0 (never an exception) when there is no driver or device.
int device_count();
// (free, total) bytes of device memory (cudaMemGetInfo).
std::pair<size_t, size_t> memory_info();

}  // namespace cuda
}  // namespace taso
