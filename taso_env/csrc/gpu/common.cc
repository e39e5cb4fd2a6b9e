// Status checks, device memory, the shared context and device queries.
#include "common.h"

#include <algorithm>
#include <string>
#include <vector>

#include "taso/errors.h"

namespace taso {
namespace cuda {

std::pair<int, std::string> classify_cuda_exception() {
  try {
    throw;
  } catch (const CudaError& e) {
    return {100, e.what()};
  } catch (const UnsupportedGraphError& e) {
    return {101, e.what()};
  } catch (...) {
    return classify_current_exception();
  }
}

LaunchParams& launch_params() {
  static thread_local LaunchParams params;
  return params;
}

void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so later calls can proceed
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                  ") in " + call + " at " + file + ":" + std::to_string(line));
}

void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw CudaError(std::string("cuDNN error ") + cudnnGetErrorString(status) + " in " + call + " at " + file +
                  ":" + std::to_string(line));
}

void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw CudaError(std::string("cuBLAS error ") + cublasGetStatusName(status) + " in " + call + " at " + file +
                  ":" + std::to_string(line));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  context();  // make sure the device is initialised
  cudaError_t status = cudaMalloc(&ptr_, bytes);
  if (status != cudaSuccess) {
    ptr_ = nullptr;
    cudaGetLastError();
    throw CudaError("cudaMalloc of " + std::to_string(bytes) + " bytes failed: " + cudaGetErrorString(status));
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Context& context() {
  // Deliberately never destroyed: tearing handles down after the CUDA runtime has shut
  // down at process exit crashes; this is a fixed allocation made once.
  static Context* ctx = [] {
    auto* c = new Context();
    if (device_count() == 0) throw CudaError("no CUDA device is available (cudaGetDeviceCount)");
    RLFLOW_CUDA(cudaGetDevice(&c->device));
    cudaDeviceProp prop;
    RLFLOW_CUDA(cudaGetDeviceProperties(&prop, c->device));
    c->device_name = prop.name;
    c->cc_major = prop.major;
    c->cc_minor = prop.minor;
    RLFLOW_CUDA(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    RLFLOW_CUDNN(cudnnCreate(&c->cudnn));
    RLFLOW_CUDNN(cudnnSetStream(c->cudnn, c->stream));
    RLFLOW_CUBLAS(cublasCreate(&c->cublas));
    RLFLOW_CUBLAS(cublasSetStream(c->cublas, c->stream));
    // A fixed cuBLAS workspace: cuBLAS then never allocates during graph capture.
    c->cublas_workspace_bytes = 32u << 20;
    RLFLOW_CUDA(cudaMalloc(&c->cublas_workspace, c->cublas_workspace_bytes));
    RLFLOW_CUBLAS(cublasSetWorkspace(c->cublas, c->cublas_workspace, c->cublas_workspace_bytes));
    RLFLOW_CUBLAS(cublasSetMathMode(c->cublas, CUBLAS_DEFAULT_MATH));
    RLFLOW_CUBLAS(cublasLtCreate(&c->cublaslt));
    return c;
  }();
  return *ctx;
}

float time_calls_ms(const std::function<bool(cudaStream_t)>& enqueue, cudaStream_t s, int calls, int samples) {
  if (!enqueue(s) || cudaStreamSynchronize(s) != cudaSuccess) {
    cudaGetLastError();
    return -1.f;
  }
  auto body = [&] {
    for (int k = 0; k < calls; ++k) enqueue(s);
  };
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
    body();
    if (cudaStreamEndCapture(s, &graph) != cudaSuccess || cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) {
      exec = nullptr;
      cudaGetLastError();
    }
  }
  auto launch = [&] {
    if (exec) RLFLOW_CUDA(cudaGraphLaunch(exec, s));
    else body();
  };
  cudaEvent_t e0, e1;
  RLFLOW_CUDA(cudaEventCreate(&e0));
  RLFLOW_CUDA(cudaEventCreate(&e1));
  launch();
  std::vector<float> times;
  for (int r = 0; r < samples; ++r) {
    RLFLOW_CUDA(cudaEventRecord(e0, s));
    launch();
    RLFLOW_CUDA(cudaEventRecord(e1, s));
    RLFLOW_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    RLFLOW_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    times.push_back(ms / calls);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void copy_to_device(void* device, const void* host, size_t bytes) {
  cudaStream_t s = context().stream;
  RLFLOW_CUDA(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s));
  RLFLOW_CUDA(cudaStreamSynchronize(s));
}

void copy_to_host(void* host, const void* device, size_t bytes) {
  cudaStream_t s = context().stream;
  RLFLOW_CUDA(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, s));
  RLFLOW_CUDA(cudaStreamSynchronize(s));
}

int float_storage(MathMode m) {
  switch (m) {
    case MathMode::kFP16: return kFloat16;
    case MathMode::kBF16: return kBFloat16;
    default: return kFloat32;
  }
}

void set_cublas_math(MathMode mode) {
  // CUBLAS_DEFAULT_MATH never uses TF32 for fp32 GEMMs (unlike cuDNN's default).
  RLFLOW_CUBLAS(cublasSetMathMode(context().cublas, mode == MathMode::kTF32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                            : CUBLAS_DEFAULT_MATH));
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

DeviceInfo device_info() {
  Context& c = context();
  DeviceInfo info;
  info.name = c.device_name;
  info.cc_major = c.cc_major;
  info.cc_minor = c.cc_minor;
  size_t free_b = 0;
  RLFLOW_CUDA(cudaMemGetInfo(&free_b, &info.total_memory));
  RLFLOW_CUDA(cudaRuntimeGetVersion(&info.cuda_runtime));
  RLFLOW_CUDA(cudaDriverGetVersion(&info.cuda_driver));
  info.cudnn_version = cudnnGetVersion();
  RLFLOW_CUBLAS(cublasGetVersion(c.cublas, &info.cublas_version));
  return info;
}

std::pair<size_t, size_t> memory_info() {
  context();
  size_t free_b = 0, total = 0;
  RLFLOW_CUDA(cudaMemGetInfo(&free_b, &total));
  return {free_b, total};
}

}  // namespace cuda
}  // namespace taso
