// GEMMs through cuBLASLt: strided operands (transposed views need no copy), bias and
// residual epilogues, TF32 tensor cores in tf32 math, and the algorithm chosen by timing
// the candidates cuBLASLt's heuristics offer, as the executor runs them (cached per
// configuration for the process).
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <string>

#include "common.h"

namespace taso {
namespace cuda {

// A batch of row-major matrices: element (batch, row, col) lives at
// data + batch * batch_stride + row * row_stride + col * col_stride (in elements).
struct MatrixLayout {
  int64_t rows = 0, cols = 0;
  int64_t row_stride = 0, col_stride = 1, batch_stride = 0;
};

// D[b] = act(alpha * A[b] @ B[b] (+ bias[n] broadcast over rows) (+ C[b])); act is ReLU
// or nothing. Every matrix and the bias are stored as float_storage(math) (float32,
// float16 or bfloat16); accumulation in float32 (TF32 tensor cores in tf32).
struct LtGemmConfig {
  int64_t batch = 1;
  MatrixLayout a, b, d, c;  // a: m x k, b: k x n, d and c: m x n (c only with residual)
  float alpha = 1.f;
  bool bias = false;
  bool residual = false;
  bool relu = false;
  MathMode math = MathMode::kFP32;
  bool log = false;  // print the timed candidates to stderr (AlgoSearch::log)
};

// Whether cuBLASLt can read / write these layouts: one of each matrix's strides is 1
// (D's column stride), leading dimensions fit, batch strides are positive when batch > 1
// (A's may be 0: one A for every batch).
bool lt_gemm_supported(const LtGemmConfig& cfg);
// How many GEMM configurations have an algorithm chosen in this process (or read from
// the file RLFLOW_GEMM_ALGO_CACHE names).
size_t gemm_algo_cache_size();

// The device pointers a GEMM step reads and writes (bound at construction: the
// executor's buffers never move). bias / c may be null.
struct LtGemmPointers {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;
  const void* c = nullptr;
  void* d = nullptr;
};

class LtGemm {
 public:
  // Chooses the algorithm: the first time a configuration (with the pointers'
  // alignments) is seen in the process, every candidate of cuBLASLt's heuristics is
  // timed on the step's own buffers (D is overwritten; the graph writes it again when it
  // runs). Throws UnsupportedGraphError when !lt_gemm_supported(cfg) or no candidate runs.
  LtGemm(const LtGemmConfig& cfg, const LtGemmPointers& ptrs);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  void run(cudaStream_t s) const;
  // run() that reports failure instead of throwing (for timing inside a graph capture).
  bool launch(cudaStream_t s) const;

 private:
  cublasStatus_t enqueue(const cublasLtMatmulAlgo_t& algo, cudaStream_t s) const;

  LtGemmConfig cfg_;
  LtGemmPointers p_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_desc_ = nullptr, b_desc_ = nullptr, c_desc_ = nullptr, d_desc_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
};

}  // namespace cuda
}  // namespace taso
